package dlq

import (
	"bytes"
	"strconv"
	"strings"
	"time"

	"github.com/courierkit/courier/record"
)

// DefaultSuffix makes the dead-letter topic of a topic: "orders" →
// "orders.dlq".
const DefaultSuffix = ".dlq"

// Topic returns the dead-letter topic of original: original + suffix. An
// empty suffix means DefaultSuffix, since a dead-letter topic equal to the
// original would feed failures back into the consumer.
func Topic(original, suffix string) string {
	if suffix == "" {
		suffix = DefaultSuffix
	}
	return original + suffix
}

// Context headers of a dead-letter record, so tools can filter without
// parsing the value. Envelope.Headers returns them.
const (
	// HeaderEnvelopeVersion is the envelope version, "1".
	HeaderEnvelopeVersion = "dlq_envelope_version"
	// HeaderOriginalTopic is the original topic.
	HeaderOriginalTopic = "dlq_original_topic"
	// HeaderOriginalPartition is the original partition in decimal, "-1"
	// when the record never reached Kafka.
	HeaderOriginalPartition = "dlq_original_partition"
	// HeaderOriginalOffset is the original offset in decimal, "-1" when the
	// record never reached Kafka.
	HeaderOriginalOffset = "dlq_original_offset"
	// HeaderOriginalTimestamp is the original record's timestamp (RFC 3339,
	// milliseconds); absent when unknown.
	HeaderOriginalTimestamp = "dlq_original_timestamp"
	// HeaderError is the error text, cut to MaxHeaderValueBytes.
	HeaderError = "dlq_error"
	// HeaderErrorKind is the ErrorKind.
	HeaderErrorKind = "dlq_error_kind"
	// HeaderRetryCount is Envelope.Attempts (retry_count) in decimal.
	HeaderRetryCount = "dlq_retry_count"
	// HeaderFailedAt is when the record was given up on (RFC 3339,
	// milliseconds).
	HeaderFailedAt = "dlq_failed_at"
	// HeaderFirstFailedAt is when the record first failed (RFC 3339,
	// milliseconds); absent when unknown.
	HeaderFirstFailedAt = "dlq_first_failed_at"
	// HeaderCorrelationID is the correlation id; absent when empty.
	HeaderCorrelationID = "dlq_correlation_id"
	// HeaderConsumerGroup is the consumer group; absent when empty (the
	// relay).
	HeaderConsumerGroup = "dlq_consumer_group"
	// HeaderReplayCount is the replay count in decimal.
	HeaderReplayCount = "dlq_replay_count"
	// HeaderFormat says how the record holds the original: FormatEnvelope
	// or FormatRaw. A record without it is in envelope mode.
	HeaderFormat = "dlq_format"
)

// Values of HeaderFormat.
const (
	// FormatEnvelope: the record value is the JSON envelope.
	FormatEnvelope = "envelope"
	// FormatRaw: the record value is the original value, untouched.
	FormatRaw = "raw"
)

// MaxHeaderValueBytes caps the value of every dlq_* context header. It
// never applies to the original headers.
const MaxHeaderValueBytes = 1024

// contextPrefix starts the names of the context headers; matched without
// regard to case, as the producer reserves it.
const contextPrefix = "dlq_"

func isContextHeader(name []byte) bool {
	return len(name) >= len(contextPrefix) && bytes.EqualFold(name[:len(contextPrefix)], []byte(contextPrefix))
}

// Headers returns the context headers of e (not HeaderFormat, which
// Record and RawRecord add): numbers in decimal, times in RFC 3339 with
// milliseconds, every value cut to MaxHeaderValueBytes. Headers for unknown
// times and empty ids are left out.
func (e Envelope) Headers() []Header {
	type header struct{ name, value string }
	list := make([]header, 0, 13)
	add := func(name, value string) { list = append(list, header{name, truncate(value, MaxHeaderValueBytes)}) }
	addTime := func(name string, t time.Time) {
		if s := formatTime(t); s != nil {
			add(name, *s)
		}
	}
	add(HeaderEnvelopeVersion, strconv.Itoa(e.Version))
	add(HeaderOriginalTopic, e.OriginalTopic)
	add(HeaderOriginalPartition, strconv.FormatInt(int64(e.OriginalPartition), 10))
	add(HeaderOriginalOffset, strconv.FormatInt(e.OriginalOffset, 10))
	addTime(HeaderOriginalTimestamp, e.OriginalTimestamp)
	add(HeaderError, e.Error)
	add(HeaderErrorKind, string(e.ErrorKind))
	add(HeaderRetryCount, strconv.Itoa(e.Attempts))
	addTime(HeaderFailedAt, e.FailedAt)
	addTime(HeaderFirstFailedAt, e.FirstFailedAt)
	if e.CorrelationID != "" {
		add(HeaderCorrelationID, e.CorrelationID)
	}
	if e.ConsumerGroup != "" {
		add(HeaderConsumerGroup, e.ConsumerGroup)
	}
	add(HeaderReplayCount, strconv.Itoa(e.ReplayCount))
	// Every name and value in one allocation: a dead letter's headers are
	// written for each of them.
	size := 0
	for _, h := range list {
		size += len(h.name) + len(h.value)
	}
	buf := make([]byte, 0, size)
	headers := make([]Header, len(list))
	for i, h := range list {
		start := len(buf)
		buf = append(buf, h.name...)
		mid := len(buf)
		buf = append(buf, h.value...)
		headers[i] = Header{Key: buf[start:mid:mid], Value: buf[mid:len(buf):len(buf)]}
	}
	return headers
}

// Record returns the envelope-mode dead-letter record of e: the original
// key, the encoded envelope as value, and Headers plus
// dlq_format=envelope. Its Topic is left empty for the writer to set
// (Writer.Record sets Topic(e.OriginalTopic, suffix)), as are its timestamp
// (the producer's clock) and place.
func (e Envelope) Record() (*record.Record, error) {
	value, err := Encode(e) // validates e
	if err != nil {
		return nil, err
	}
	key, err := decodeText("original_key", e.OriginalKey, e.OriginalKeyBase64)
	if err != nil {
		return nil, err
	}
	headers := append(e.Headers(), Header{Key: []byte(HeaderFormat), Value: []byte(FormatEnvelope)})
	return &record.Record{Key: key, Value: value, Headers: headers}, nil
}

// RawRecord returns the raw-mode dead-letter record of e: the original key
// and value untouched, the original headers in order without those named
// dlq_*, then Headers and dlq_format=raw. Error, correlation id and consumer
// group are cut to MaxHeaderValueBytes, so FromRaw gives them back shorter
// than the envelope holds them. Its Topic is left empty, as Record's is.
func (e Envelope) RawRecord() (*record.Record, error) {
	o, err := e.Original()
	if err != nil {
		return nil, err
	}
	var headers []Header
	for _, h := range o.Headers {
		if !isContextHeader(h.Key) {
			headers = append(headers, h)
		}
	}
	headers = append(headers, e.Headers()...)
	headers = append(headers, Header{Key: []byte(HeaderFormat), Value: []byte(FormatRaw)})
	return &record.Record{Key: o.Key, Value: o.Value, Headers: headers}, nil
}

// Read returns the envelope of any dead-letter record: FromRaw when its
// dlq_format header says raw, Decode of the value otherwise.
func Read(key, value []byte, headers []Header) (Envelope, error) {
	format := ""
	for _, h := range headers {
		if strings.EqualFold(string(h.Key), HeaderFormat) {
			format = string(h.Value)
		}
	}
	switch format {
	case "", FormatEnvelope:
		return Decode(value)
	case FormatRaw:
		return FromRaw(key, value, headers)
	}
	return Envelope{}, fieldErr(HeaderFormat, ErrUnsupportedVersion,
		"is %q; this courier knows %q and %q, upgrade courier to read this dead letter", short(format), FormatEnvelope, FormatRaw)
}

// FromRaw rebuilds the envelope of a raw-mode dead-letter record: the key
// and value are the original ones, the dlq_* headers give the context, and
// the other headers, in order, are the original headers. Unknown dlq_*
// headers are ignored; of a repeated one the last wins. Errors name the
// header: ErrCorruptEnvelope when dlq_envelope_version is missing (not a
// dead letter of courier), ErrUnsupportedVersion for another version,
// ErrInvalidEnvelope for a missing or malformed context header.
func FromRaw(key, value []byte, headers []Header) (Envelope, error) {
	context := map[string]string{}
	var originals []Header
	for _, h := range headers {
		if isContextHeader(h.Key) {
			context[strings.ToLower(string(h.Key))] = string(h.Value)
		} else {
			originals = append(originals, h)
		}
	}
	if format, ok := context[HeaderFormat]; ok && format != FormatRaw {
		return Envelope{}, fieldErr(HeaderFormat, ErrInvalidEnvelope, "is %q, not %q; read this record with Read or Decode", short(format), FormatRaw)
	}
	version, ok := context[HeaderEnvelopeVersion]
	if !ok {
		return Envelope{}, fieldErr(HeaderEnvelopeVersion, ErrCorruptEnvelope, "is missing, so this is not a courier dead letter")
	}
	if version != strconv.Itoa(EnvelopeVersion) {
		return Envelope{}, fieldErr(HeaderEnvelopeVersion, ErrUnsupportedVersion,
			"is %q; this courier reads version %d only, upgrade courier to read newer dead letters", short(version), EnvelopeVersion)
	}

	p := rawParser{context: context}
	o := Original{
		Topic:     p.text(HeaderOriginalTopic, true),
		Partition: int32(p.integer(HeaderOriginalPartition, 32, true)),
		Offset:    p.integer(HeaderOriginalOffset, 64, true),
		Timestamp: p.time(HeaderOriginalTimestamp, false),
		Key:       key,
		Value:     value,
		Headers:   originals,
	}
	f := Failure{
		Error:         p.text(HeaderError, false),
		Kind:          ErrorKind(p.text(HeaderErrorKind, true)),
		Attempts:      int(p.integer(HeaderRetryCount, strconv.IntSize, false)),
		FailedAt:      p.time(HeaderFailedAt, true),
		FirstFailedAt: p.time(HeaderFirstFailedAt, false),
		CorrelationID: p.text(HeaderCorrelationID, false),
		ConsumerGroup: p.text(HeaderConsumerGroup, false),
		ReplayCount:   int(p.integer(HeaderReplayCount, strconv.IntSize, false)),
	}
	if p.err != nil {
		return Envelope{}, p.err
	}
	e := build(o, f)
	if err := e.Validate(); err != nil {
		return Envelope{}, err
	}
	return e, nil
}

// rawParser reads context headers, keeping the first error.
type rawParser struct {
	context map[string]string
	err     error
}

// get returns the header's value and whether it is there, and records the
// error of a required header that is missing.
func (p *rawParser) get(name string, required bool) (string, bool) {
	v, ok := p.context[name]
	if !ok && required && p.err == nil {
		p.err = fieldErr(name, ErrInvalidEnvelope, "is missing; a raw-mode dead letter carries every header of Envelope.Headers")
	}
	return v, ok
}

func (p *rawParser) text(name string, required bool) string {
	v, _ := p.get(name, required)
	return v
}

func (p *rawParser) integer(name string, bits int, required bool) int64 {
	v, ok := p.get(name, required)
	if !ok || p.err != nil {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, bits)
	if err != nil {
		p.err = fieldErr(name, ErrInvalidEnvelope, "is %q, want a decimal integer of %d bits", short(v), bits)
	}
	return n
}

func (p *rawParser) time(name string, required bool) time.Time {
	v, ok := p.get(name, required)
	if !ok || p.err != nil {
		return time.Time{}
	}
	t, err := parseTime(name, &v)
	if err != nil {
		p.err = err
	}
	return t
}

// TruncateHeader returns s cut to at most MaxHeaderValueBytes on a UTF-8
// boundary, as the dlq_* context headers are, for other packages' context
// headers (the retry_* headers of package retrytopics).
func TruncateHeader(s string) string { return truncate(s, MaxHeaderValueBytes) }
