package retrytopics_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/topicname"
	"github.com/courierkit/courier/record"
	"github.com/courierkit/courier/retrytopics"
)

// FuzzRetryHeaders feeds Parse a well-formed set of retry headers in which
// one header's name and value are replaced by arbitrary bytes, and one
// arbitrary header is added. Parse must not panic, and must either return
// values in range or an error naming a retry header; what it accepts must
// survive a round trip through Headers.
func FuzzRetryHeaders(f *testing.F) {
	f.Add(uint8(0), []byte(retrytopics.HeaderOriginalOffset), []byte("-1"), []byte("x"), []byte("y"))
	f.Add(uint8(1), []byte(retrytopics.HeaderOriginalTopic), []byte("bad topic!"), []byte(""), []byte(""))
	f.Add(uint8(2), []byte(retrytopics.HeaderNotBefore), []byte("99999999999999999"), []byte("ce_id"), []byte("a\x00b"))
	f.Add(uint8(3), []byte(retrytopics.HeaderAttempt), []byte("+1"), []byte(retrytopics.HeaderAttempt), []byte("1"))
	f.Add(uint8(4), []byte(retrytopics.HeaderLastError), []byte("\xff\xfe"), []byte("retry_own"), []byte("\xff"))
	f.Add(uint8(5), []byte(retrytopics.HeaderConsumerGroup), []byte("g\x1b[31m"), []byte{0xff}, []byte(nil))
	f.Add(uint8(6), []byte(retrytopics.HeaderFailedAttempts), []byte("1000001"), []byte("x"), []byte("y"))
	f.Add(uint8(7), []byte(retrytopics.HeaderOriginalPartition), []byte("2147483648"), []byte("x"), []byte("y"))
	f.Add(uint8(0), []byte("ce_id"), []byte("fine"), []byte(retrytopics.HeaderOriginalTimestamp), []byte("-5"))
	f.Fuzz(func(t *testing.T, at uint8, name, value, extraName, extraValue []byte) {
		base := retrytopics.Headers(nil, retrytopics.Info{
			Round: 1, FailedAttempts: 3, OriginalTopic: "orders", OriginalPartition: 2, OriginalOffset: 17,
			OriginalTimestamp: time.UnixMilli(1_700_000_000_000), NotBefore: time.UnixMilli(1_700_000_005_000),
			FirstFailedAt: time.UnixMilli(1_700_000_001_000), LastError: "psp 503", ConsumerGroup: "payouts",
		})
		headers := make([]*record.Header, 0, len(base)+1)
		for i := range base {
			headers = append(headers, &base[i])
		}
		headers[int(at)%len(headers)] = &record.Header{Key: name, Value: value}
		headers = append(headers, &record.Header{Key: extraName, Value: extraValue})

		info, found, err := retrytopics.Parse(headers)
		if err != nil {
			var he *retrytopics.HeaderError
			if !errors.As(err, &he) || !errors.Is(err, retrytopics.ErrMalformedHeaders) || !retrytopics.IsHeader([]byte(he.Header)) {
				t.Fatalf("Parse error %v names no retry header", err)
			}
			if !strings.Contains(err.Error(), he.Header) || !utf8.ValidString(err.Error()) || len(he.Value) > 70 {
				t.Fatalf("error %q: does not name %s, or quotes too much / invalid UTF-8", err, he.Header)
			}
			return
		}
		if !found {
			t.Fatal("a record with retry headers parsed as having none")
		}
		checkInRange(t, info)
		// What Parse accepts, Headers writes back and Parse reads the same.
		again, _, err := retrytopics.Parse(ptrs(retrytopics.Headers(nil, info)))
		if err != nil {
			t.Fatalf("round trip of %+v: %v", info, err)
		}
		if again.Round != info.Round || again.OriginalTopic != info.OriginalTopic || again.OriginalOffset != info.OriginalOffset ||
			!again.NotBefore.Equal(info.NotBefore) || again.LastError != info.LastError || again.ConsumerGroup != info.ConsumerGroup {
			t.Fatalf("round trip changed %+v into %+v", info, again)
		}
	})
}

// checkInRange fails t unless every field of info is in range.
func checkInRange(t *testing.T, info retrytopics.Info) {
	t.Helper()
	last := time.UnixMilli(253402300799999)
	switch {
	case info.Round < 0 || info.Round > retrytopics.MaxCount, info.FailedAttempts < 0 || info.FailedAttempts > retrytopics.MaxCount:
		t.Fatalf("count out of range: %+v", info)
	case topicname.Validate(info.OriginalTopic) != nil:
		t.Fatalf("invalid original topic %q", info.OriginalTopic)
	case info.OriginalPartition < 0 || info.OriginalOffset < 0:
		t.Fatalf("negative place: %+v", info)
	case info.NotBefore.Before(time.UnixMilli(0)) || info.NotBefore.After(last):
		t.Fatalf("not before %v out of range", info.NotBefore)
	case !utf8.ValidString(info.LastError) || len(info.LastError) > dlq.MaxHeaderValueBytes:
		t.Fatalf("last error %q: invalid UTF-8 or longer than %d", info.LastError, dlq.MaxHeaderValueBytes)
	case retrytopics.ValidGroup(info.ConsumerGroup) != nil:
		t.Fatalf("consumer group %q accepted", info.ConsumerGroup)
	}
	for _, at := range []time.Time{info.OriginalTimestamp, info.FirstFailedAt} {
		if !at.IsZero() && (at.Before(time.UnixMilli(0)) || at.After(last)) {
			t.Fatalf("time %v out of range", at)
		}
	}
}
