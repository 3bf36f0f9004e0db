package dlq

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/courierkit/courier/internal/ceheader"
	"github.com/courierkit/courier/internal/textcut"
	"github.com/courierkit/courier/internal/topicname"
	"github.com/courierkit/courier/record"
)

// EnvelopeVersion is the envelope version this package writes and reads.
const EnvelopeVersion = 1

// NoPartition and NoOffset are the partition and offset of a record that
// never reached Kafka, such as an outbox event dead-lettered by the relay.
const (
	NoPartition int32 = -1
	NoOffset    int64 = -1
)

// MaxCount caps retry_count and replay_count, so that a replay's
// replay_count + 1 never overflows, whatever an envelope says.
const MaxCount = math.MaxInt32

// MaxErrorBytes caps the error text of an envelope. Longer text is cut on a
// UTF-8 boundary and ends in "… (truncated)".
const MaxErrorBytes = 4096

// ErrorKind says why a record was dead-lettered.
type ErrorKind string

const (
	// KindRetriesExhausted: the error may be transient, but every retry
	// failed. Replaying after the cause is fixed is expected to succeed.
	KindRetriesExhausted ErrorKind = "retries_exhausted"
	// KindPermanent: the error is one no retry can fix (a malformed payload,
	// a rejected request), so the record skipped the remaining retries.
	// Replay needs a fix in the handler or the data first.
	KindPermanent ErrorKind = "permanent"
)

// Errors of Validate, Encode, Decode, FromRaw and Read. Each comes wrapped
// in an *EnvelopeError that names the field; match them with errors.Is.
var (
	// ErrCorruptEnvelope: the input is not a dead-letter envelope at all:
	// not JSON, not an object, a field of the wrong JSON type, or no
	// envelope_version.
	ErrCorruptEnvelope = errors.New("corrupt envelope")
	// ErrUnsupportedVersion: the envelope (or dlq_format) comes from a newer
	// courier than this one.
	ErrUnsupportedVersion = errors.New("unsupported envelope version")
	// ErrInvalidEnvelope: the envelope parses but breaks a rule of version
	// 1: a required field is missing, a value is out of range, base64 does
	// not decode, or two fields contradict each other.
	ErrInvalidEnvelope = errors.New("invalid envelope")
)

// EnvelopeError is the error for an envelope that cannot be encoded,
// decoded or restored.
type EnvelopeError struct {
	// Field is the JSON field (e.g. "original_topic",
	// "original_header_list[2].value_base64") or, for a raw-mode record, the
	// header (e.g. "dlq_retry_count"). Empty when the input as a whole is at
	// fault.
	Field string
	// Err wraps ErrCorruptEnvelope, ErrUnsupportedVersion or
	// ErrInvalidEnvelope with details.
	Err error
}

func (e *EnvelopeError) Error() string {
	if e.Field == "" {
		return "dlq: " + e.Err.Error()
	}
	return fmt.Sprintf("dlq: %s: %v", e.Field, e.Err)
}

func (e *EnvelopeError) Unwrap() error { return e.Err }

func fieldErr(field string, sentinel error, format string, args ...any) error {
	return &EnvelopeError{Field: field, Err: fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))}
}

// Header is one Kafka record header, record.Header: a nil Value is a null
// header value, distinct from an empty one; a nil Key is the empty name
// (Kafka has no null header names). Convert a sarama.RecordHeader h with
// Header(h).
type Header = record.Header

// Original is the record that failed, as read from Kafka or as the relay
// would have published it.
type Original struct {
	// Topic is the topic the record was read from or meant for. Required.
	Topic string
	// Partition is the record's partition, or NoPartition (-1) when it never
	// reached Kafka.
	Partition int32
	// Offset is the record's offset, or NoOffset (-1) when it never reached
	// Kafka.
	Offset int64
	// Timestamp is the record's timestamp. Zero when unknown. It is kept to
	// the millisecond; a time RFC 3339 cannot write (outside years 0-9999)
	// is dropped.
	Timestamp time.Time
	// Key is the record key. Nil (no key) and empty are distinct.
	Key []byte
	// Value is the record value. Nil (a tombstone) and empty are distinct.
	Value []byte
	// Headers are the record headers, in order; names may repeat.
	Headers []Header
}

// Failure describes why and when the record was given up on.
type Failure struct {
	// Error is the last error's text. Cut to MaxErrorBytes.
	Error string
	// Kind says why the record was dead-lettered. Required.
	Kind ErrorKind
	// Attempts is how many attempts failed before the record was given up
	// on (for the relay, the outbox retry_count). The envelope writes it as
	// retry_count, a raw-mode record as the dlq_retry_count header
	// (HeaderRetryCount). Must not be negative.
	Attempts int
	// FailedAt is when the record was given up on. Defaults to now.
	FailedAt time.Time
	// FirstFailedAt is when the record first failed. Defaults to FailedAt.
	FirstFailedAt time.Time
	// CorrelationID ties the record to a business flow, e.g. from the
	// ce_correlationid header. Optional.
	CorrelationID string
	// ConsumerGroup is the group that failed to handle the record. Empty
	// for the relay.
	ConsumerGroup string
	// ReplayCount is how many times the record was replayed from a
	// dead-letter topic before failing again. Must not be negative.
	ReplayCount int
}

// Envelope is the dead-letter envelope, version 1. Its fields mirror the
// JSON fields one for one (named in each doc); times are written as RFC 3339
// in UTC with milliseconds. Build one with New, and get the original record
// back with Original, which restores its bytes exactly.
type Envelope struct {
	// Version is envelope_version: always 1 (EnvelopeVersion).
	Version int
	// OriginalTopic is original_topic: the topic the record was read from,
	// or the outbox event's topic. Required.
	OriginalTopic string
	// OriginalPartition is original_partition; -1 (NoPartition) when the
	// record never reached Kafka (an outbox event dead-lettered by the
	// relay).
	OriginalPartition int32
	// OriginalOffset is original_offset; -1 (NoOffset) when the record never
	// reached Kafka. Partition and offset are -1 together or not at all.
	OriginalOffset int64
	// OriginalTimestamp is original_timestamp: the record's timestamp; null
	// in JSON when zero.
	OriginalTimestamp time.Time
	// OriginalKey is original_key: the key when it is valid UTF-8, else nil
	// (null). Null in both original_key and original_key_base64 means the
	// record had no key.
	OriginalKey *string
	// OriginalKeyBase64 is original_key_base64: the key in standard base64
	// when it is not valid UTF-8; left out of the JSON otherwise.
	OriginalKeyBase64 *string
	// OriginalHeaders is original_headers: each header whose name and value
	// are UTF-8, by name, the last one winning (a null value shows as "").
	// A view for people and tools; replay uses original_header_list.
	OriginalHeaders map[string]string
	// OriginalHeadersBase64 is original_headers_base64: like
	// original_headers, for the headers whose last value is not UTF-8, in
	// standard base64. A name is in at most one of the two.
	OriginalHeadersBase64 map[string]string
	// OriginalHeaderList is original_header_list: every original header, in
	// order, duplicates included, each {key, value} or, for bytes that are
	// not UTF-8, key_base64 / value_base64. Replay restores headers from it.
	OriginalHeaderList []HeaderEntry
	// OriginalMessage is original_message: the value when it is JSON that
	// encodes back to the same bytes (compact, UTF-8, not null), else nil
	// (null).
	OriginalMessage json.RawMessage
	// OriginalMessageBase64 is original_message_base64: the value in
	// standard base64 when it is not such JSON. Null in both means a nil
	// value (a tombstone); "" here means an empty value.
	OriginalMessageBase64 *string
	// Error is error: the last error's text, at most MaxErrorBytes (4 KiB).
	Error string
	// ErrorKind is error_kind: retries_exhausted (the attempts ran out) or
	// permanent (the error was marked so). Required.
	ErrorKind ErrorKind
	// Attempts is retry_count: how many attempts failed (in raw mode the
	// dlq_retry_count header, HeaderRetryCount).
	Attempts int
	// FailedAt is failed_at: when the record was given up on. Required.
	FailedAt time.Time
	// FirstFailedAt is first_failed_at: when the record first failed; null
	// in JSON when zero.
	FirstFailedAt time.Time
	// CorrelationID is correlation_id: ties the record to a business flow,
	// e.g. the original's ce_correlationid header. Optional.
	CorrelationID string
	// ConsumerGroup is consumer_group: the group that gave up on the
	// record; empty for the relay.
	ConsumerGroup string
	// ReplayCount is replay_count: how many times the record was replayed
	// before this failure.
	ReplayCount int
}

// HeaderEntry is one original header in original_header_list. Exactly one
// of Key and KeyBase64 is set; at most one of Value and ValueBase64 is, and
// neither means a null value.
type HeaderEntry struct {
	// Key is the header name when it is valid UTF-8.
	Key *string `json:"key,omitempty"`
	// KeyBase64 is the header name in standard base64 when it is not.
	KeyBase64 *string `json:"key_base64,omitempty"`
	// Value is the header value when it is valid UTF-8.
	Value *string `json:"value,omitempty"`
	// ValueBase64 is the header value in standard base64 when it is not.
	ValueBase64 *string `json:"value_base64,omitempty"`
}

// New builds the envelope of a failed record. It copies the original bytes
// into their text or base64 fields (see the package doc), cuts f.Error to
// MaxErrorBytes, applies the defaults of Failure and validates the result.
// Any key, value and headers are accepted; the error names the field of o
// or f that is wrong.
func New(o Original, f Failure) (Envelope, error) {
	if f.FailedAt.IsZero() {
		f.FailedAt = time.Now()
	}
	if f.FirstFailedAt.IsZero() {
		f.FirstFailedAt = f.FailedAt
	}
	e := build(o, f)
	if !representable(e.OriginalTimestamp) {
		e.OriginalTimestamp = time.Time{}
	}
	// build wrote the key, value and headers itself, valid by
	// construction: check the rest.
	if err := e.validate(false); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// build converts o and f without defaults or validation.
func build(o Original, f Failure) Envelope {
	e := Envelope{
		Version:           EnvelopeVersion,
		OriginalTopic:     o.Topic,
		OriginalPartition: o.Partition,
		OriginalOffset:    o.Offset,
		OriginalTimestamp: wireTime(o.Timestamp),
		Error:             TruncateError(f.Error),
		ErrorKind:         f.Kind,
		Attempts:          f.Attempts,
		FailedAt:          wireTime(f.FailedAt),
		FirstFailedAt:     wireTime(f.FirstFailedAt),
		CorrelationID:     f.CorrelationID,
		ConsumerGroup:     f.ConsumerGroup,
		ReplayCount:       f.ReplayCount,
	}
	if o.Key != nil {
		e.OriginalKey, e.OriginalKeyBase64 = textOrBase64(o.Key)
	}
	switch {
	case o.Value == nil:
	case exactJSON(o.Value):
		e.OriginalMessage = bytes.Clone(o.Value)
	default:
		e.OriginalMessageBase64 = ptr(base64.StdEncoding.EncodeToString(o.Value))
	}
	for _, h := range o.Headers {
		var entry HeaderEntry
		entry.Key, entry.KeyBase64 = textOrBase64(h.Key)
		if h.Value != nil {
			entry.Value, entry.ValueBase64 = textOrBase64(h.Value)
		}
		e.OriginalHeaderList = append(e.OriginalHeaderList, entry)
	}
	e.OriginalHeaders, e.OriginalHeadersBase64 = headerView(e.OriginalHeaderList)
	return e
}

// exactJSON reports whether value can sit in original_message and come back
// with the same bytes: valid UTF-8, valid JSON, already compact (Encode
// compacts raw JSON), and not the literal null (which reads back as "no
// value").
func exactJSON(value []byte) bool {
	return utf8.Valid(value) && json.Valid(value) && string(value) != "null" && compactJSON(value)
}

// compactJSON reports whether valid JSON has no whitespace outside its
// strings: the only bytes json.Compact would take out.
func compactJSON(value []byte) bool {
	inString, escaped := false, false
	for _, c := range value {
		switch {
		case escaped:
			escaped = false
		case inString:
			escaped = c == '\\'
			inString = c != '"'
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		}
	}
	return true
}

func textOrBase64(b []byte) (text, b64 *string) {
	if utf8.Valid(b) {
		return ptr(string(b)), nil
	}
	return nil, ptr(base64.StdEncoding.EncodeToString(b))
}

func ptr[T any](v T) *T { return &v }

// headerView derives original_headers and original_headers_base64 from the
// list: by name, the last value winning; names that are not UTF-8 are left
// out. Both maps are nil when empty.
func headerView(list []HeaderEntry) (text, b64 map[string]string) {
	for _, h := range list {
		if h.Key == nil {
			continue
		}
		name := *h.Key
		if h.ValueBase64 != nil {
			delete(text, name)
			b64 = setKey(b64, name, *h.ValueBase64)
			continue
		}
		delete(b64, name)
		value := ""
		if h.Value != nil {
			value = *h.Value
		}
		text = setKey(text, name, value)
	}
	if len(text) == 0 {
		text = nil
	}
	if len(b64) == 0 {
		b64 = nil
	}
	return text, b64
}

func setKey(m map[string]string, k, v string) map[string]string {
	if m == nil {
		m = map[string]string{}
	}
	m[k] = v
	return m
}

// Original restores the failed record: topic, partition, offset and
// timestamp, and the key, value and headers byte for byte, headers in their
// original order with duplicates. It validates the envelope first.
func (e Envelope) Original() (Original, error) {
	if err := e.Validate(); err != nil {
		return Original{}, err
	}
	return e.original()
}

// original is Original for an envelope validated already (Read's): the
// validation is most of what decoding an envelope costs.
func (e Envelope) original() (Original, error) {
	key, err := decodeText("original_key", e.OriginalKey, e.OriginalKeyBase64)
	if err != nil {
		return Original{}, err
	}
	value, err := e.OriginalValue()
	if err != nil {
		return Original{}, err
	}
	headers, err := e.originalHeaders()
	if err != nil {
		return Original{}, err
	}
	return Original{
		Topic:     e.OriginalTopic,
		Partition: e.OriginalPartition,
		Offset:    e.OriginalOffset,
		Timestamp: e.OriginalTimestamp,
		Key:       key,
		Value:     value,
		Headers:   headers,
	}, nil
}

// TenantID is the tenant of the original record: the value of its
// ce_tenantid header (the last one, as in OriginalHeaders), "" when it
// has none or its value cannot be a tenant (not UTF-8, a control
// character, more than 2048 bytes), as the consumer counts it.
// Filter.TenantID matches it.
func (e Envelope) TenantID() string {
	if tenant := e.OriginalHeaders[ceheader.TenantID]; ceheader.ValidTenant(tenant) {
		return tenant
	}
	return ""
}

// OriginalValue restores the original value byte for byte: nil for a
// tombstone, empty for an empty value. original_message is returned
// compacted, so an envelope that a tool pretty-printed still restores the
// bytes that were dead-lettered.
func (e Envelope) OriginalValue() ([]byte, error) {
	switch {
	case e.OriginalMessage != nil && e.OriginalMessageBase64 != nil:
		return nil, fieldErr("original_message", ErrInvalidEnvelope,
			"set together with original_message_base64; keep exactly one (or neither for a tombstone)")
	case e.OriginalMessage != nil:
		var compact bytes.Buffer
		if err := json.Compact(&compact, e.OriginalMessage); err != nil {
			return nil, fieldErr("original_message", ErrInvalidEnvelope,
				"not valid JSON (%v); put a value that is not JSON in original_message_base64", err)
		}
		if compact.String() == "null" {
			return nil, fieldErr("original_message", ErrInvalidEnvelope,
				"is JSON null; a tombstone leaves both message fields null, and a value of the 4 bytes \"null\" goes in original_message_base64")
		}
		return compact.Bytes(), nil
	default:
		return decodeBase64("original_message_base64", e.OriginalMessageBase64)
	}
}

// originalHeaders restores the headers from the list or, without one, from
// the two maps in name order. Nil when there are none.
func (e Envelope) originalHeaders() ([]Header, error) {
	if len(e.OriginalHeaderList) == 0 {
		var headers []Header
		for name, value := range e.OriginalHeaders {
			headers = append(headers, Header{Key: []byte(name), Value: []byte(value)})
		}
		for name, b64 := range e.OriginalHeadersBase64 {
			value, err := decodeBase64("original_headers_base64["+short(name)+"]", &b64)
			if err != nil {
				return nil, err
			}
			headers = append(headers, Header{Key: []byte(name), Value: value})
		}
		slices.SortStableFunc(headers, func(a, b Header) int { return bytes.Compare(a.Key, b.Key) })
		return headers, nil
	}
	headers := make([]Header, 0, len(e.OriginalHeaderList))
	for i, h := range e.OriginalHeaderList {
		// The field's name is made only for an error: this runs for every
		// header of every dead letter written.
		field := func() string { return fmt.Sprintf("original_header_list[%d]", i) }
		if (h.Key == nil) == (h.KeyBase64 == nil) {
			return nil, fieldErr(field(), ErrInvalidEnvelope, "needs exactly one of key and key_base64")
		}
		key, err := decodeText("original_header_list", h.Key, h.KeyBase64)
		if err != nil {
			_, err = decodeText(field()+".key", h.Key, h.KeyBase64)
			return nil, err
		}
		value, err := decodeText("original_header_list", h.Value, h.ValueBase64)
		if err != nil {
			_, err = decodeText(field()+".value", h.Value, h.ValueBase64)
			return nil, err
		}
		headers = append(headers, Header{Key: key, Value: value})
	}
	return headers, nil
}

// decodeText restores bytes kept as UTF-8 text or as base64 (field names the
// text field; the base64 field is field+"_base64"). Nil when neither is set.
func decodeText(field string, text, b64 *string) ([]byte, error) {
	switch {
	case text != nil && b64 != nil:
		return nil, fieldErr(field, ErrInvalidEnvelope, "set together with %s_base64; keep exactly one", field)
	case text != nil:
		if !utf8.ValidString(*text) {
			return nil, fieldErr(field, ErrInvalidEnvelope, "is not valid UTF-8; put such bytes in %s_base64", field)
		}
		return []byte(*text), nil
	default:
		return decodeBase64(field+"_base64", b64)
	}
}

func decodeBase64(field string, b64 *string) ([]byte, error) {
	if b64 == nil {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(*b64)
	if err != nil {
		return nil, fieldErr(field, ErrInvalidEnvelope, "not valid base64 (%v); use standard base64 with padding", err)
	}
	if b == nil {
		b = []byte{}
	}
	return b, nil
}

// Validate checks e against the rules of envelope version 1. The error is an
// *EnvelopeError naming the first offending field.
func (e Envelope) Validate() error { return e.validate(true) }

// validate is Validate; with encoded false it leaves out the fields that
// hold the original's bytes (key, value, headers).
func (e Envelope) validate(encoded bool) error {
	switch {
	case e.Version == 0:
		return fieldErr("envelope_version", ErrInvalidEnvelope, "is missing; set it to %d, or build the envelope with New", EnvelopeVersion)
	case e.Version < EnvelopeVersion:
		return fieldErr("envelope_version", ErrInvalidEnvelope, "is %d; versions start at %d", e.Version, EnvelopeVersion)
	case e.Version != EnvelopeVersion:
		return fieldErr("envelope_version", ErrUnsupportedVersion,
			"is %d; this courier reads version %d only, upgrade courier to read newer dead letters", e.Version, EnvelopeVersion)
	}
	if err := topicname.Validate(e.OriginalTopic); err != nil {
		return fieldErr("original_topic", ErrInvalidEnvelope, "%s", err)
	}
	switch {
	case e.OriginalPartition < NoPartition:
		return fieldErr("original_partition", ErrInvalidEnvelope, "is %d; use a partition number, or -1 for a record that never reached Kafka", e.OriginalPartition)
	case e.OriginalOffset < NoOffset:
		return fieldErr("original_offset", ErrInvalidEnvelope, "is %d; use an offset, or -1 for a record that never reached Kafka", e.OriginalOffset)
	case (e.OriginalPartition == NoPartition) != (e.OriginalOffset == NoOffset):
		return fieldErr("original_offset", ErrInvalidEnvelope,
			"partition %d with offset %d: partition and offset are both -1 (a record that never reached Kafka) or both set", e.OriginalPartition, e.OriginalOffset)
	}
	if !representable(e.OriginalTimestamp) {
		return fieldErr("original_timestamp", ErrInvalidEnvelope, "%s is outside the years 0-9999 that RFC 3339 can write; leave it zero", e.OriginalTimestamp)
	}
	if encoded {
		if _, err := decodeText("original_key", e.OriginalKey, e.OriginalKeyBase64); err != nil {
			return err
		}
		if err := e.checkMessage(); err != nil {
			return err
		}
		if err := e.validateHeaders(); err != nil {
			return err
		}
	}
	switch {
	case e.ErrorKind == "":
		return fieldErr("error_kind", ErrInvalidEnvelope, "is empty; use %q or %q", KindRetriesExhausted, KindPermanent)
	case e.Attempts < 0:
		return fieldErr("retry_count", ErrInvalidEnvelope, "is %d; it counts retries and cannot be negative", e.Attempts)
	case e.FailedAt.IsZero():
		return fieldErr("failed_at", ErrInvalidEnvelope, "is missing; set it to the time the record was given up on (New defaults it to now)")
	case !representable(e.FailedAt):
		return fieldErr("failed_at", ErrInvalidEnvelope, "%s is outside the years 0-9999 that RFC 3339 can write; check the clock", e.FailedAt)
	case !representable(e.FirstFailedAt):
		return fieldErr("first_failed_at", ErrInvalidEnvelope, "%s is outside the years 0-9999 that RFC 3339 can write", e.FirstFailedAt)
	case e.ReplayCount < 0:
		return fieldErr("replay_count", ErrInvalidEnvelope, "is %d; it counts replays and cannot be negative", e.ReplayCount)
	case e.ReplayCount > MaxCount:
		return fieldErr("replay_count", ErrInvalidEnvelope, "is %d, over %d; no record is replayed that often", e.ReplayCount, MaxCount)
	case e.Attempts > MaxCount:
		return fieldErr("retry_count", ErrInvalidEnvelope, "is %d, over %d; no record is retried that often", e.Attempts, MaxCount)
	}
	return nil
}

// checkMessage is the check of OriginalValue, without compacting a copy
// of original_message when it is plainly fine (the usual case).
func (e Envelope) checkMessage() error {
	if e.OriginalMessage != nil && e.OriginalMessageBase64 == nil && json.Valid(e.OriginalMessage) &&
		string(bytes.TrimSpace(e.OriginalMessage)) != "null" {
		return nil
	}
	_, err := e.OriginalValue()
	return err
}

// plainEntries reports whether every entry of the list is plainly fine:
// exactly one of key and key_base64, text fields valid UTF-8 and base64
// fields valid base64. It decodes nothing it need not: originalHeaders
// says what is wrong otherwise.
func (e Envelope) plainEntries() bool {
	plain := func(text, b64 *string) bool {
		switch {
		case text != nil && b64 != nil:
			return false
		case text != nil:
			return utf8.ValidString(*text)
		case b64 != nil:
			_, err := base64.StdEncoding.DecodeString(*b64)
			return err == nil
		}
		return true
	}
	for _, h := range e.OriginalHeaderList {
		if (h.Key == nil) == (h.KeyBase64 == nil) || !plain(h.Key, h.KeyBase64) || !plain(h.Value, h.ValueBase64) {
			return false
		}
	}
	return true
}

// validateHeaders checks the list and that the maps are exactly the view
// derived from it; without a list, that the maps do not overlap.
func (e Envelope) validateHeaders() error {
	if len(e.OriginalHeaderList) == 0 {
		for name, text := range e.OriginalHeaders {
			if !utf8.ValidString(name) || !utf8.ValidString(text) {
				return fieldErr("original_headers["+short(name)+"]", ErrInvalidEnvelope, "is not valid UTF-8; put such headers in original_header_list")
			}
			if _, dup := e.OriginalHeadersBase64[name]; dup {
				return fieldErr("original_headers_base64["+short(name)+"]", ErrInvalidEnvelope, "the header is also in original_headers; keep it in one map")
			}
		}
		for name := range e.OriginalHeadersBase64 {
			if !utf8.ValidString(name) {
				return fieldErr("original_headers_base64["+short(name)+"]", ErrInvalidEnvelope, "the name is not valid UTF-8; put such headers in original_header_list")
			}
		}
		_, err := e.originalHeaders()
		return err
	}
	if !e.plainEntries() {
		if _, err := e.originalHeaders(); err != nil {
			return err
		}
	}
	text, b64 := headerView(e.OriginalHeaderList)
	if !maps.Equal(text, e.OriginalHeaders) {
		return fieldErr("original_headers", ErrInvalidEnvelope,
			"disagrees with original_header_list, from which replay restores headers; edit the list and derive the map from it (last value per name)")
	}
	if !maps.Equal(b64, e.OriginalHeadersBase64) {
		return fieldErr("original_headers_base64", ErrInvalidEnvelope,
			"disagrees with original_header_list, from which replay restores headers; edit the list and derive the map from it (last value per name)")
	}
	return nil
}

// timeLayout is RFC 3339 with milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// wireTime is t as the envelope keeps it: UTC, to the millisecond.
func wireTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC().Truncate(time.Millisecond)
}

// representable reports whether t is zero or RFC 3339 can write it.
func representable(t time.Time) bool {
	if t.IsZero() {
		return true
	}
	y := t.UTC().Year()
	return y >= 0 && y <= 9999
}

func formatTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	return ptr(t.UTC().Format(timeLayout))
}

func parseTime(field string, s *string) (time.Time, error) {
	if s == nil {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, *s)
	if err != nil {
		return time.Time{}, fieldErr(field, ErrInvalidEnvelope, "%q is not an RFC 3339 time like 2026-01-16T09:59:58.120Z", short(*s))
	}
	return wireTime(t), nil
}

// truncatedMarker ends text that was cut.
const truncatedMarker = "… (truncated)"

// TruncateError returns s cut to at most MaxErrorBytes on a UTF-8 boundary,
// ending in "… (truncated)" when it was cut. Bytes that are not UTF-8 are
// replaced by U+FFFD first, as JSON would do anyway.
func TruncateError(s string) string { return truncate(s, MaxErrorBytes) }

// short cuts text quoted in error messages.
func short(s string) string { return truncate(s, 64) }

func truncate(s string, limit int) string { return textcut.Cut(s, limit, truncatedMarker) }

// wireEnvelope is the JSON form. Encode writes its fields in this order:
// the order of the sample envelope in ARCHITECTURE.md ("Wire contracts"),
// with original_key_base64, original_headers_base64 and
// original_header_list after the fields they complete.
type wireEnvelope struct {
	Version               int               `json:"envelope_version"`
	OriginalTopic         string            `json:"original_topic"`
	OriginalPartition     *int32            `json:"original_partition"`
	OriginalOffset        *int64            `json:"original_offset"`
	OriginalTimestamp     *string           `json:"original_timestamp"`
	OriginalKey           *string           `json:"original_key"`
	OriginalKeyBase64     *string           `json:"original_key_base64,omitempty"`
	OriginalHeaders       map[string]string `json:"original_headers"`
	OriginalHeadersBase64 map[string]string `json:"original_headers_base64,omitempty"`
	OriginalHeaderList    []HeaderEntry     `json:"original_header_list,omitempty"`
	OriginalMessage       json.RawMessage   `json:"original_message"`
	OriginalMessageBase64 *string           `json:"original_message_base64"`
	Error                 string            `json:"error"`
	ErrorKind             ErrorKind         `json:"error_kind"`
	Attempts              int               `json:"retry_count"`
	FailedAt              *string           `json:"failed_at"`
	FirstFailedAt         *string           `json:"first_failed_at"`
	CorrelationID         string            `json:"correlation_id"`
	ConsumerGroup         string            `json:"consumer_group"`
	ReplayCount           int               `json:"replay_count"`
}

// Encode validates e and writes it as JSON, with Error cut to MaxErrorBytes
// and times in UTC to the millisecond. HTML escaping is off so that
// original_message keeps its bytes.
func Encode(e Envelope) ([]byte, error) {
	e.Error = TruncateError(e.Error)
	if err := e.Validate(); err != nil {
		return nil, err
	}
	w := wireEnvelope{
		Version:               e.Version,
		OriginalTopic:         e.OriginalTopic,
		OriginalPartition:     &e.OriginalPartition,
		OriginalOffset:        &e.OriginalOffset,
		OriginalTimestamp:     formatTime(e.OriginalTimestamp),
		OriginalKey:           e.OriginalKey,
		OriginalKeyBase64:     e.OriginalKeyBase64,
		OriginalHeaders:       e.OriginalHeaders,
		OriginalHeadersBase64: e.OriginalHeadersBase64,
		OriginalHeaderList:    e.OriginalHeaderList,
		OriginalMessage:       e.OriginalMessage,
		OriginalMessageBase64: e.OriginalMessageBase64,
		Error:                 e.Error,
		ErrorKind:             e.ErrorKind,
		Attempts:              e.Attempts,
		FailedAt:              formatTime(e.FailedAt),
		FirstFailedAt:         formatTime(e.FirstFailedAt),
		CorrelationID:         e.CorrelationID,
		ConsumerGroup:         e.ConsumerGroup,
		ReplayCount:           e.ReplayCount,
	}
	if w.OriginalHeaders == nil {
		w.OriginalHeaders = map[string]string{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(w); err != nil {
		return nil, fmt.Errorf("dlq: encode envelope of %s/%d/%d: %w", e.OriginalTopic, e.OriginalPartition, e.OriginalOffset, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Decode parses and validates a JSON envelope. Input that is not an
// envelope gives ErrCorruptEnvelope, a version other than 1
// ErrUnsupportedVersion, and an envelope breaking a rule ErrInvalidEnvelope,
// each in an *EnvelopeError naming the field. Decode never panics.
//
// Fields this version does not know are ignored, so later additions to
// version 1 stay readable.
func Decode(data []byte) (Envelope, error) {
	// The version first: a newer envelope may not fit version 1's shape.
	var probe struct {
		Version json.RawMessage `json:"envelope_version"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return Envelope{}, corrupt(err)
	}
	if probe.Version == nil || string(probe.Version) == "null" {
		return Envelope{}, fieldErr("envelope_version", ErrCorruptEnvelope,
			"is missing, so this is not a courier dead-letter envelope; a raw-mode dead letter is read with Read or FromRaw")
	}
	var version int
	if err := json.Unmarshal(probe.Version, &version); err != nil {
		return Envelope{}, fieldErr("envelope_version", ErrCorruptEnvelope, "is %s, want an integer", short(string(probe.Version)))
	}
	if version < EnvelopeVersion {
		return Envelope{}, fieldErr("envelope_version", ErrInvalidEnvelope, "is %d; versions start at %d", version, EnvelopeVersion)
	}
	if version != EnvelopeVersion {
		return Envelope{}, fieldErr("envelope_version", ErrUnsupportedVersion,
			"is %d; this courier reads version %d only, upgrade courier to read newer dead letters", version, EnvelopeVersion)
	}

	var w wireEnvelope
	if err := json.Unmarshal(data, &w); err != nil {
		return Envelope{}, corrupt(err)
	}
	for _, required := range []struct {
		field   string
		missing bool
	}{
		{"original_partition", w.OriginalPartition == nil},
		{"original_offset", w.OriginalOffset == nil},
		{"failed_at", w.FailedAt == nil},
	} {
		if required.missing {
			return Envelope{}, fieldErr(required.field, ErrInvalidEnvelope, "is missing; every version 1 envelope has it")
		}
	}
	e := Envelope{
		Version:               w.Version,
		OriginalTopic:         w.OriginalTopic,
		OriginalPartition:     *w.OriginalPartition,
		OriginalOffset:        *w.OriginalOffset,
		OriginalKey:           w.OriginalKey,
		OriginalKeyBase64:     w.OriginalKeyBase64,
		OriginalHeaders:       w.OriginalHeaders,
		OriginalHeadersBase64: w.OriginalHeadersBase64,
		OriginalHeaderList:    w.OriginalHeaderList,
		OriginalMessage:       w.OriginalMessage,
		OriginalMessageBase64: w.OriginalMessageBase64,
		Error:                 w.Error,
		ErrorKind:             w.ErrorKind,
		Attempts:              w.Attempts,
		CorrelationID:         w.CorrelationID,
		ConsumerGroup:         w.ConsumerGroup,
		ReplayCount:           w.ReplayCount,
	}
	if string(e.OriginalMessage) == "null" {
		e.OriginalMessage = nil
	}
	if len(e.OriginalHeaders) == 0 {
		e.OriginalHeaders = nil
	}
	if len(e.OriginalHeadersBase64) == 0 {
		e.OriginalHeadersBase64 = nil
	}
	if len(e.OriginalHeaderList) == 0 {
		e.OriginalHeaderList = nil
	}
	var err error
	if e.OriginalTimestamp, err = parseTime("original_timestamp", w.OriginalTimestamp); err != nil {
		return Envelope{}, err
	}
	if e.FailedAt, err = parseTime("failed_at", w.FailedAt); err != nil {
		return Envelope{}, err
	}
	if e.FirstFailedAt, err = parseTime("first_failed_at", w.FirstFailedAt); err != nil {
		return Envelope{}, err
	}
	if err := e.Validate(); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// corrupt turns a JSON error into an ErrCorruptEnvelope that says where.
func corrupt(err error) error {
	if typeErr, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		if typeErr.Field == "" {
			return fieldErr("", ErrCorruptEnvelope, "the value is a JSON %s, not an envelope object", typeErr.Value)
		}
		return fieldErr(typeErr.Field, ErrCorruptEnvelope, "is a JSON %s, want %s", typeErr.Value, jsonKind(typeErr.Type))
	}
	if syntaxErr, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fieldErr("", ErrCorruptEnvelope, "not valid JSON at byte %d (%v); was the record cut short, or is it a raw-mode dead letter (read it with Read)?", syntaxErr.Offset, err)
	}
	return fieldErr("", ErrCorruptEnvelope, "%v", err)
}

// jsonKind names the JSON type that a Go type decodes from.
func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.String:
		return "a string"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	}
	return t.String()
}

// MarshalJSON is Encode, so an Envelope inside another JSON document keeps
// the envelope's field names. Note that json.Marshal escapes <, > and & in
// original_message; write dead letters with Encode.
func (e Envelope) MarshalJSON() ([]byte, error) { return Encode(e) }

// UnmarshalJSON is Decode; JSON null leaves e unchanged.
func (e *Envelope) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	d, err := Decode(data)
	if err != nil {
		return err
	}
	*e = d
	return nil
}
