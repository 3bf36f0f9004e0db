package producer

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// DefaultContentType is the content type of an event that names none.
const DefaultContentType = "application/json"

// Event is one message for Kafka, written to the outbox by Enqueue and
// published by the relay. Only Topic, Type and (for JSON) a valid Payload are
// required.
type Event struct {
	// ID is the event id, published as ce_id. Leave it zero to have Enqueue
	// assign a UUIDv7, which also sorts by creation time.
	ID uuid.UUID
	// Topic is the Kafka topic. Required; Kafka's naming rules apply.
	Topic string
	// Key is the Kafka record key, which picks the partition. Events of one
	// (Topic, Key) are published in enqueue order. Empty means no key.
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
	// dlq_, and content-type, are reserved for courier's wire contract.
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
	// reports the first one's ID. Empty means no idempotency.
	IdempotencyKey string
	// MaxRetries caps the relay's publish retries for this event before it is
	// dead-lettered. Zero uses the relay's default. Must not be negative.
	MaxRetries int
	// NotBefore delays publishing until this time. Zero means at once.
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
	ErrInvalidMaxRetries  = errors.New("max retries must not be negative")
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
// and the dead-letter contracts of courier.
var reservedHeaderPrefixes = []string{"ce_", "retry_", "dlq_"}

// normalize validates e, fills its defaults and returns the copy to write.
func normalize(e Event, maxPayload int) (Event, error) {
	fail := func(field string, err error) (Event, error) { return Event{}, &EventError{Field: field, Err: err} }

	if err := validTopic(e.Topic); err != nil {
		return fail("Topic", err)
	}
	if e.Type == "" {
		return fail("Type", ErrMissingType)
	}
	texts := []struct{ field, value string }{
		{"Key", e.Key}, {"Type", e.Type}, {"AggregateType", e.AggregateType}, {"AggregateID", e.AggregateID},
		{"TenantID", e.TenantID}, {"CorrelationID", e.CorrelationID}, {"CausationID", e.CausationID},
		{"IdempotencyKey", e.IdempotencyKey},
	}
	for _, f := range texts {
		if !validText(f.value) {
			return fail(f.field, fmt.Errorf("%w: %q", ErrInvalidText, f.value))
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
		return fail("ContentType", fmt.Errorf("%w: %q: %v", ErrInvalidContentType, e.ContentType, err))
	}
	if isJSON && !json.Valid(e.Payload) {
		return fail("Payload", fmt.Errorf("%w (%s, %d bytes)", ErrInvalidJSON, e.ContentType, len(e.Payload)))
	}
	for name, value := range e.Headers {
		if err := validHeader(name, value); err != nil {
			return fail("Headers["+name+"]", err)
		}
	}
	if e.MaxRetries < 0 {
		return fail("MaxRetries", fmt.Errorf("%w: got %d", ErrInvalidMaxRetries, e.MaxRetries))
	}
	return e, nil
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
	case name == "":
		return fmt.Errorf("%w: the name is empty", ErrInvalidHeader)
	case !validText(name) || !validText(value):
		return fmt.Errorf("%w: %w", ErrInvalidHeader, ErrInvalidText)
	}
	return nil
}

func validText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }
