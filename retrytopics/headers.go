package retrytopics

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/groupname"
	"github.com/courierkit/courier/internal/textcut"
	"github.com/courierkit/courier/internal/topicname"
	"github.com/courierkit/courier/record"
)

// The headers a record in a retry tier carries besides the original ones.
// A record moving on replaces them, never appends to them. Times are unix
// milliseconds in decimal.
const (
	// HeaderAttempt is the retry round: 1 in the first tier, 2 in the
	// second, and so on; 0 for a record that waits behind an earlier
	// message of its key (Config.KeyOrder of the consumer) without having
	// failed itself.
	HeaderAttempt = "retry_attempt"
	// HeaderOriginalTopic, HeaderOriginalPartition and HeaderOriginalOffset
	// locate the record on the main topic.
	HeaderOriginalTopic     = "retry_original_topic"
	HeaderOriginalPartition = "retry_original_partition"
	HeaderOriginalOffset    = "retry_original_offset"
	// HeaderOriginalTimestamp is the timestamp of the record on the main
	// topic (the retry record has its own).
	HeaderOriginalTimestamp = "retry_original_timestamp"
	// HeaderNotBefore is when the record may be handled, at the earliest.
	HeaderNotBefore = "retry_not_before"
	// HeaderFirstFailedAt is when the message first failed; absent for a
	// record that has not failed yet.
	HeaderFirstFailedAt = "retry_first_failed_at"
	// HeaderLastError is the last error, cut to dlq.MaxHeaderValueBytes;
	// absent for a record that has not failed yet.
	HeaderLastError = "retry_last_error"
	// HeaderFailedAttempts counts the handler attempts that failed so far,
	// on the main topic and in every tier: the next attempt is number
	// HeaderFailedAttempts+1, and a dead letter's retry_count is the total.
	HeaderFailedAttempts = "retry_failed_attempts"
	// HeaderConsumerGroup is the consumer group that sent the record: a
	// group consuming a retry topic handles only its own records, so that
	// groups can share retry topics.
	HeaderConsumerGroup = "retry_consumer_group"
)

// names are the retry headers' names.
var names = []string{HeaderAttempt, HeaderOriginalTopic, HeaderOriginalPartition, HeaderOriginalOffset, HeaderOriginalTimestamp,
	HeaderNotBefore, HeaderFirstFailedAt, HeaderLastError, HeaderFailedAttempts, HeaderConsumerGroup}

// ErrMalformedHeaders is matched by the errors of Parse.
var ErrMalformedHeaders = errors.New("retrytopics: malformed retry headers")

// HeaderError says which retry header is missing or malformed.
type HeaderError struct {
	// Header is the header's name.
	Header string
	// Value is its value, "" when missing.
	Value string
	// Reason says what is wrong.
	Reason string
}

func (e *HeaderError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("retry header %s: %s", e.Header, e.Reason)
	}
	return fmt.Sprintf("retry header %s=%q: %s", e.Header, e.Value, e.Reason)
}

// Unwrap returns ErrMalformedHeaders.
func (e *HeaderError) Unwrap() error { return ErrMalformedHeaders }

// Info is what the retry headers of a record say.
type Info struct {
	// Round is the retry round (HeaderAttempt).
	Round int
	// FailedAttempts counts the attempts that failed so far.
	FailedAttempts int
	// OriginalTopic, OriginalPartition, OriginalOffset and
	// OriginalTimestamp describe the record on the main topic.
	OriginalTopic     string
	OriginalPartition int32
	OriginalOffset    int64
	OriginalTimestamp time.Time
	// NotBefore is when the record may be handled, at the earliest.
	NotBefore time.Time
	// FirstFailedAt is when the message first failed; zero when it has
	// not failed yet.
	FirstFailedAt time.Time
	// LastError is the last error; "" when it has not failed yet.
	LastError string
	// ConsumerGroup is the group that sent the record.
	ConsumerGroup string
}

// IsHeader reports whether name is one of the retry headers' names. Other
// headers starting with retry_ are the application's own, and are kept.
func IsHeader(name []byte) bool {
	for _, n := range names {
		if string(name) == n {
			return true
		}
	}
	return false
}

// Bounds of the retry headers: Parse refuses a value outside them.
const (
	// MaxCount bounds retry_attempt and retry_failed_attempts.
	MaxCount = 1_000_000
	// MaxGroupBytes bounds retry_consumer_group.
	MaxGroupBytes = groupname.MaxBytes
	// maxMillis is 9999-12-31T23:59:59.999Z, the last instant RFC 3339
	// (and the dead-letter envelope) can write.
	maxMillis = 253402300799999
)

// Parse reads the retry headers of a record. It returns false when the
// record has none (it never went through a retry tier), and an error
// matching ErrMalformedHeaders (a *HeaderError naming the header) when one
// of them is malformed, out of range, repeated, or a required one is
// missing: retry_attempt, retry_original_topic, retry_original_partition,
// retry_original_offset and retry_not_before are required.
//
// Every value is input from Kafka, so it is checked: counts are whole
// numbers from 0 to MaxCount, the partition and offset 0 or more, the
// topic a valid Kafka topic name, times unix milliseconds from 1970 to the
// year 9999, the consumer group valid UTF-8 without control characters of
// at most MaxGroupBytes. retry_last_error is free text: invalid UTF-8 in it
// is replaced by U+FFFD and it is cut to dlq.MaxHeaderValueBytes. The
// consumer checks the rest against the topic the record was read from
// (the original topic and the round).
func Parse(headers []*record.Header) (Info, bool, error) {
	var (
		info  Info
		found bool
		seen  = map[string]bool{}
	)
	for _, h := range headers {
		if h == nil || !IsHeader(h.Key) {
			continue
		}
		found = true
		name, value := string(h.Key), string(h.Value)
		if seen[name] {
			return Info{}, true, &HeaderError{Header: name, Value: short(value),
				Reason: "appears more than once; the consumer writes each retry header once"}
		}
		seen[name] = true
		if err := info.set(name, value); err != nil {
			return Info{}, true, &HeaderError{Header: name, Value: short(value), Reason: err.Error()}
		}
	}
	if !found {
		return Info{}, false, nil
	}
	for _, name := range []string{HeaderAttempt, HeaderOriginalTopic, HeaderOriginalPartition, HeaderOriginalOffset, HeaderNotBefore} {
		if !seen[name] {
			return Info{}, true, &HeaderError{Header: name, Reason: "is missing; a record in a retry topic needs " +
				"retry_attempt, retry_original_topic, retry_original_partition, retry_original_offset and retry_not_before"}
		}
	}
	return info, true, nil
}

// set parses the value of the retry header name into info, and says what
// is wrong with it.
func (info *Info) set(name, value string) error {
	var err error
	switch name {
	case HeaderAttempt:
		info.Round, err = parseCount(value)
	case HeaderFailedAttempts:
		info.FailedAttempts, err = parseCount(value)
	case HeaderOriginalTopic:
		if err := topicname.Validate(value); err != nil {
			return fmt.Errorf("is not a Kafka topic: %w", err)
		}
		info.OriginalTopic = value
	case HeaderOriginalPartition:
		var p int64
		p, err = parseWhole(value, math.MaxInt32, "a partition")
		info.OriginalPartition = int32(p)
	case HeaderOriginalOffset:
		info.OriginalOffset, err = parseWhole(value, math.MaxInt64, "an offset")
	case HeaderOriginalTimestamp:
		info.OriginalTimestamp, err = parseTime(value)
	case HeaderNotBefore:
		info.NotBefore, err = parseTime(value)
	case HeaderFirstFailedAt:
		info.FirstFailedAt, err = parseTime(value)
	case HeaderLastError:
		info.LastError = dlq.TruncateHeader(strings.ToValidUTF8(value, "\uFFFD"))
	case HeaderConsumerGroup:
		err = ValidGroup(value)
		info.ConsumerGroup = value
	}
	return err
}

// ValidGroup says what is wrong with a consumer group id, as a retry
// header carries it, if anything: it has at most MaxGroupBytes, is valid
// UTF-8 and holds no control character. Its errors read after the name.
func ValidGroup(s string) error { return groupname.Validate(s) }

func parseCount(s string) (int, error) {
	n, err := parseWhole(s, MaxCount, "a count")
	return int(n), err
}

// parseWhole parses a whole number from 0 to limit, written in decimal
// without sign or padding.
func parseWhole(s string, limit int64, what string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err != nil || s != strconv.FormatInt(n, 10):
		return 0, fmt.Errorf("is not %s: a whole number in decimal from 0 to %d", what, limit)
	case n < 0 || n > limit:
		return 0, fmt.Errorf("is out of range for %s: use 0 to %d", what, limit)
	}
	return n, nil
}

func parseTime(s string) (time.Time, error) {
	ms, err := parseWhole(s, maxMillis, "a time")
	if err != nil {
		return time.Time{}, fmt.Errorf("is not a time in unix milliseconds from 1970 to the year 9999 (%w)", err)
	}
	return time.UnixMilli(ms), nil
}

// short cuts a header value quoted in an error, on a UTF-8 boundary, with
// invalid UTF-8 replaced.
func short(s string) string { return textcut.Cut(s, 64, "…") }

// Headers returns the headers of a record moving to a retry tier: the
// original ones without any retry_* header, in order, followed by the retry
// headers of info. Zero times and an empty LastError or ConsumerGroup are
// left out. The values are copies; the original headers are not changed.
func Headers(original []*record.Header, info Info) []record.Header {
	out := make([]record.Header, 0, len(original)+10)
	for _, h := range original {
		if h != nil && !IsHeader(h.Key) {
			out = append(out, *h)
		}
	}
	add := func(name, value string) {
		out = append(out, record.Header{Key: []byte(name), Value: []byte(value)})
	}
	addTime := func(name string, t time.Time) {
		if !t.IsZero() {
			add(name, strconv.FormatInt(t.UnixMilli(), 10))
		}
	}
	add(HeaderAttempt, strconv.Itoa(info.Round))
	add(HeaderFailedAttempts, strconv.Itoa(info.FailedAttempts))
	add(HeaderOriginalTopic, info.OriginalTopic)
	add(HeaderOriginalPartition, strconv.FormatInt(int64(info.OriginalPartition), 10))
	add(HeaderOriginalOffset, strconv.FormatInt(info.OriginalOffset, 10))
	addTime(HeaderOriginalTimestamp, info.OriginalTimestamp)
	addTime(HeaderNotBefore, info.NotBefore)
	addTime(HeaderFirstFailedAt, info.FirstFailedAt)
	if info.LastError != "" {
		add(HeaderLastError, dlq.TruncateHeader(info.LastError))
	}
	if info.ConsumerGroup != "" {
		add(HeaderConsumerGroup, info.ConsumerGroup)
	}
	return out
}

// Strip returns headers without the retry headers: the headers of the
// record on the main topic, as a dead letter or a replay restores them.
func Strip(headers []*record.Header) []*record.Header {
	out := make([]*record.Header, 0, len(headers))
	for _, h := range headers {
		if h != nil && !IsHeader(h.Key) {
			out = append(out, h)
		}
	}
	return out
}
