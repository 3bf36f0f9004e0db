package producer

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"mime"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/courierkit/courier/internal/ceheader"
)

// DefaultContentType is the content type of an event that names none.
const DefaultContentType = "application/json"

// Event is one message for Kafka, written to the outbox by Enqueue and
// published by the relay. Only Topic, Type and (for JSON) a valid Payload are
// required.
type Event struct {
	// ID is the event id, published as ce_id. Leave it zero to have Enqueue
	// assign a UUIDv7, which also sorts by creation time. An id of your own
	// must be unique: Enqueue refuses one that an earlier event of your own
	// used (within Retention) with ErrDuplicateID.
	ID uuid.UUID
	// Topic is the Kafka topic. Required; Kafka's naming rules apply.
	Topic string
	// Key is the Kafka record key, which picks the partition. Events of one
	// (Topic, Key) are published in enqueue order. Empty means no key. At
	// most 2048 bytes (MaxKeyBytes) of UTF-8 text.
	Key string
	// Type is the event type, published as ce_type, e.g. "OrderCreated".
	// Required.
	Type string
	// Payload is the record value, published byte for byte.
	Payload []byte
	// ContentType describes Payload. A JSON type (application/json, text/json
	// or any +json type) requires Payload to be valid JSON. Defaults to
	// "application/json" (DefaultContentType).
	ContentType string
	// Headers are extra record headers. Names starting with ce_, retry_ or
	// dlq_, content-type and replay_count (in any case) are reserved for
	// courier's wire contract. Names and values are UTF-8 text without NUL;
	// a name is at most 2048 bytes (MaxAttributeBytes).
	Headers map[string]string
	// AggregateType and AggregateID name the entity the event is about,
	// published as ce_aggregatetype and ce_aggregateid.
	AggregateType, AggregateID string
	// TenantID is published as ce_tenantid.
	TenantID string
	// CorrelationID and CausationID are published as ce_correlationid and
	// ce_causationid.
	CorrelationID, CausationID string
	// IdempotencyKey makes the enqueue idempotent per topic: a second event
	// with the same Topic and IdempotencyKey is not written, and Enqueue
	// reports the first one's ID. Empty means no idempotency. At most 2048
	// bytes (MaxKeyBytes).
	IdempotencyKey string
	// MaxAttempts is how many failed publish attempts dead-letter this
	// event (column max_retries). Zero uses the relay's
	// RelayConfig.MaxAttempts. From 0 to 2147483647.
	MaxAttempts int
	// NotBefore delays publishing until this time. Zero means at once.
	// Between the years 1 and 9999 (UTC).
	NotBefore time.Time
}

// Errors for events Enqueue refuses. Each comes wrapped in an *EventError,
// which names the event and the field; match them with errors.Is.
var (
	ErrEmptyTopic         = errors.New("topic is empty")
	ErrInvalidTopic       = errors.New("topic name is not valid in Kafka")
	ErrMissingType        = errors.New("event type is empty")
	ErrPayloadTooLarge    = errors.New("payload is larger than the configured maximum")
	ErrInvalidJSON        = errors.New("payload is not valid JSON but the content type says JSON")
	ErrInvalidContentType = errors.New("content type cannot be parsed")
	ErrReservedHeader     = errors.New("header name is reserved by courier")
	ErrInvalidHeader      = errors.New("header is not valid")
	ErrInvalidText        = errors.New("text must be valid UTF-8 without NUL bytes")
	ErrInvalidMaxAttempts = errors.New("max attempts is out of range")
	ErrTooLong            = errors.New("text is longer than courier allows")
	// ErrRecordTooLarge is an event whose Kafka record, as the relay
	// publishes it (key, payload, headers, the relay's ce_ headers and
	// Kafka's framing, see Config.MaxPayloadBytes), is larger than
	// Config.MaxPayloadBytes.
	ErrRecordTooLarge = errors.New("record (key, payload and headers) is larger than the configured maximum")
	ErrInvalidTime    = errors.New("time is out of range")
	// ErrDuplicateID is an event id used twice: by two events of a batch,
	// or by an event of your own enqueued before (within Retention, by a
	// committed or a concurrent transaction). If the earlier enqueue is
	// one this one retries, it is done already.
	ErrDuplicateID = errors.New("event id is already used")
)

// Limits of an event's text fields, in bytes.
const (
	// MaxKeyBytes bounds Key and IdempotencyKey, which PostgreSQL indexes
	// (a B-tree entry holds at most about 2,700 bytes).
	MaxKeyBytes = 2048
	// MaxAttributeBytes bounds Type, ContentType, AggregateType,
	// AggregateID, TenantID, CorrelationID, CausationID and header names:
	// each is a Kafka header, and ids and names that long are mistakes.
	MaxAttributeBytes = ceheader.MaxAttributeBytes
)

// Bounds of Event.NotBefore: the years 1 to 9999 UTC, which RFC 3339 and
// JSON can write (PostgreSQL's timestamptz holds more).
var (
	minNotBefore = time.Date(1, time.January, 1, 0, 0, 0, 0, time.UTC)
	maxNotBefore = time.Date(10000, time.January, 1, 0, 0, 0, 0, time.UTC)
)

// EventError is the error for an event that failed validation. Nothing of a
// batch holding such an event is written.
type EventError struct {
	// Index is the event's position in the batch (0 for Enqueue).
	Index int
	// Field is the offending field, e.g. "Topic" or "Headers[ce_id]".
	Field string
	// Err wraps one of the Err… sentinels of this package with details.
	Err error
}

func (e *EventError) Error() string {
	return fmt.Sprintf("producer: event %d: %s: %v", e.Index, e.Field, e.Err)
}

func (e *EventError) Unwrap() error { return e.Err }

// maxTopicLen is Kafka's limit on topic names.
const maxTopicLen = 249

// reservedHeaderPrefixes belong to the CloudEvents binding, the retry-topic
// and the dead-letter contracts of courier (internal/ceheader,
// retrytopics/headers.go, dlq/headers.go); content-type and replay_count
// are reserved too (validHeader).
var reservedHeaderPrefixes = []string{"ce_", "retry_", "dlq_"}

// normalize validates e, fills its defaults, adds the trace context trace
// (see withTrace) to its headers and returns the copy to write. It checks
// everything PostgreSQL would refuse (so that a bad event never aborts the
// caller's transaction) and what Kafka would: the record the relay
// publishes for it (see recordBytes) must fit in maxPayload.
func normalize(e Event, maxPayload int, trace map[string]string) (Event, error) {
	fail := func(field string, err error) (Event, error) { return Event{}, &EventError{Field: field, Err: err} }

	if err := validTopic(e.Topic); err != nil {
		return fail("Topic", err)
	}
	if e.Type == "" {
		return fail("Type", fmt.Errorf("%w: name what happened, e.g. OrderCreated", ErrMissingType))
	}
	texts := []struct {
		field, value string
		limit        int
	}{
		{"Key", e.Key, MaxKeyBytes}, {"Type", e.Type, MaxAttributeBytes},
		{"AggregateType", e.AggregateType, MaxAttributeBytes}, {"AggregateID", e.AggregateID, MaxAttributeBytes},
		{"TenantID", e.TenantID, MaxAttributeBytes}, {"CorrelationID", e.CorrelationID, MaxAttributeBytes},
		{"CausationID", e.CausationID, MaxAttributeBytes}, {"IdempotencyKey", e.IdempotencyKey, MaxKeyBytes},
		{"ContentType", e.ContentType, MaxAttributeBytes},
	}
	for _, f := range texts {
		if err := checkText(f.value, f.limit); err != nil {
			return fail(f.field, err)
		}
	}
	if len(e.Payload) > maxPayload {
		return fail("Payload", fmt.Errorf("%w: %d bytes, limit %d (Config.MaxPayloadBytes)", ErrPayloadTooLarge, len(e.Payload), maxPayload))
	}
	if e.ContentType == "" {
		e.ContentType = DefaultContentType
	}
	isJSON, err := jsonContentType(e.ContentType)
	if err != nil {
		return fail("ContentType", fmt.Errorf("%w: %s: %v", ErrInvalidContentType, quoteText(e.ContentType), err))
	}
	if isJSON && !json.Valid(e.Payload) {
		return fail("Payload", fmt.Errorf("%w (%s, %d bytes)", ErrInvalidJSON, e.ContentType, len(e.Payload)))
	}
	for name, value := range e.Headers {
		if err := validHeader(name, value); err != nil {
			return fail("Headers["+quoteField(name)+"]", err)
		}
	}
	e.Headers = withTrace(e.Headers, trace)
	if size := recordBytes(&e); size > maxPayload {
		headerBytes := 0
		for name, value := range e.Headers {
			headerBytes += len(name) + len(value)
		}
		field := "Payload" // the largest part names the field
		switch {
		case headerBytes > len(e.Payload) && headerBytes >= len(e.Key):
			field = "Headers"
		case len(e.Key) > len(e.Payload):
			field = "Key"
		}
		return fail(field, fmt.Errorf("%w: %d bytes as the relay publishes it (key %d, payload %d, headers %d, "+
			"the relay's ce_ headers and Kafka's framing %d), limit %d (Config.MaxPayloadBytes)",
			ErrRecordTooLarge, size, len(e.Key), len(e.Payload), headerBytes, size-len(e.Key)-len(e.Payload)-headerBytes, maxPayload))
	}
	if e.MaxAttempts < 0 || e.MaxAttempts > math.MaxInt32 {
		return fail("MaxAttempts", fmt.Errorf("%w: got %d; use 0 for the relay's default, or 1 to %d", ErrInvalidMaxAttempts, e.MaxAttempts, math.MaxInt32))
	}
	if !e.NotBefore.IsZero() && (e.NotBefore.Before(minNotBefore) || !e.NotBefore.Before(maxNotBefore)) {
		return fail("NotBefore", fmt.Errorf("%w: %s; use a time between the years 1 and 9999, or the zero time for at once",
			ErrInvalidTime, e.NotBefore.UTC().Format("2006-01-02T15:04:05Z07:00 (year 2006)")))
	}
	return e, nil
}

// checkText refuses what a PostgreSQL text column cannot hold (NUL, and
// bytes that are not UTF-8) and text over limit bytes.
func checkText(s string, limit int) error {
	switch {
	case !validText(s):
		return fmt.Errorf("%w: %s", ErrInvalidText, quoteText(s))
	case len(s) > limit:
		return fmt.Errorf("%w: %d bytes, at most %d", ErrTooLong, len(s), limit)
	}
	return nil
}

// quoteText quotes s for an error message, escaped, and cut after 64
// bytes.
func quoteText(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + fmt.Sprintf("... (%d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// quoteField is a header name as EventError.Field holds it: as given when
// it is printable text of at most 64 bytes, else quoted and cut.
func quoteField(name string) string {
	if len(name) <= 64 && utf8.ValidString(name) && !strings.ContainsFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) {
		return name
	}
	return quoteText(name)
}

// validTopic applies Kafka's topic naming rules.
func validTopic(topic string) error {
	switch {
	case topic == "":
		return ErrEmptyTopic
	case len(topic) > maxTopicLen:
		return fmt.Errorf("%w: %d characters, Kafka allows at most %d", ErrInvalidTopic, len(topic), maxTopicLen)
	case topic == "." || topic == "..":
		return fmt.Errorf("%w: %q is not allowed", ErrInvalidTopic, topic)
	}
	for _, r := range topic {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%w: %q has %q; use only ASCII letters, digits, '.', '_' and '-'", ErrInvalidTopic, topic, r)
		}
	}
	return nil
}

// jsonContentType reports whether a media type is JSON: application/json,
// text/json, or a structured syntax suffix +json (RFC 6839).
func jsonContentType(contentType string) (bool, error) {
	if contentType == DefaultContentType { // most events: no need to parse it
		return true, nil
	}
	mediaType, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false, err
	}
	return mediaType == "application/json" || mediaType == "text/json" || strings.HasSuffix(mediaType, "+json"), nil
}

func validHeader(name, value string) error {
	lower := strings.ToLower(name)
	for _, p := range reservedHeaderPrefixes {
		if strings.HasPrefix(lower, p) {
			return fmt.Errorf("%w: names starting with %q are set by courier", ErrReservedHeader, p)
		}
	}
	switch {
	case lower == "content-type":
		return fmt.Errorf("%w: set Event.ContentType instead", ErrReservedHeader)
	case lower == replayCountHeader:
		return fmt.Errorf("%w: %s counts the replays of a dead letter (dlq.Replay sets it); name yours otherwise", ErrReservedHeader, replayCountHeader)
	case name == "":
		return fmt.Errorf("%w: the name is empty", ErrInvalidHeader)
	case !validText(name):
		return fmt.Errorf("%w: name: %w: %s", ErrInvalidHeader, ErrInvalidText, quoteText(name))
	case len(name) > MaxAttributeBytes:
		return fmt.Errorf("%w: name: %w: %d bytes, at most %d", ErrInvalidHeader, ErrTooLong, len(name), MaxAttributeBytes)
	case !validText(value):
		return fmt.Errorf("%w: value: %w: %s", ErrInvalidHeader, ErrInvalidText, quoteText(value))
	}
	return nil
}

// replayCountHeader is dlq.ReplayCountHeader: a record that carries it is
// taken for a replayed dead letter.
const replayCountHeader = "replay_count"

func validText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }
