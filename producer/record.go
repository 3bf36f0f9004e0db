package producer

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/ceheader"
)

// CloudEvents Kafka protocol binding header names (binary mode).
const (
	HeaderSpecVersion   = ceheader.SpecVersion   // ce_specversion
	HeaderID            = ceheader.ID            // ce_id
	HeaderType          = ceheader.Type          // ce_type
	HeaderSource        = ceheader.Source        // ce_source
	HeaderTime          = ceheader.Time          // ce_time
	HeaderContentType   = ceheader.ContentType   // content-type
	HeaderCorrelationID = ceheader.CorrelationID // ce_correlationid
	HeaderCausationID   = ceheader.CausationID   // ce_causationid
	HeaderTenantID      = ceheader.TenantID      // ce_tenantid
	HeaderAggregateType = ceheader.AggregateType // ce_aggregatetype
	HeaderAggregateID   = ceheader.AggregateID   // ce_aggregateid
)

// specVersion is the CloudEvents version courier writes.
const specVersion = "1.0"

// structuredContentType marks a record whose value is a whole CloudEvent.
const structuredContentType = "application/cloudevents+json; charset=UTF-8"

// extensions lists the optional CloudEvents attributes of an event by their
// structured-mode names.
func (e *claimedEvent) extensions() [][2]string {
	var out [][2]string
	for _, x := range []struct {
		name  string
		value *string
	}{
		{"correlationid", e.CorrelationID}, {"causationid", e.CausationID}, {"tenantid", e.TenantID},
		{"aggregatetype", e.AggregateType}, {"aggregateid", e.AggregateID},
	} {
		if x.value != nil {
			out = append(out, [2]string{x.name, *x.value})
		}
	}
	return out
}

// binaryRecord is the event in CloudEvents binary mode: the payload as the
// value, the attributes as ce_ headers. The header values share one
// allocation: this runs for every event the relay publishes.
func (e *claimedEvent) binaryRecord(source string) *sarama.ProducerMessage {
	exts := e.extensions()
	size := uuidLen + len(e.Type) + len(source) + len(time.RFC3339Nano) + len(e.ContentType) + len(specVersion)
	for _, x := range exts {
		size += len(x[1])
	}
	hs := headerValues{buf: make([]byte, 0, size)}
	hs.add(keySpecVersion, specVersion)
	hs.add(keyID, e.ID.String())
	hs.add(keyType, e.Type)
	hs.add(keySource, source)
	hs.addTime(keyTime, e.CreatedAt)
	hs.add(keyContentType, e.ContentType)
	for _, x := range exts {
		hs.headers = append(hs.headers, header("ce_"+x[0], x[1]))
	}
	return e.message(sarama.ByteEncoder(e.Payload), append(hs.headers, e.userHeaders()...))
}

// The names of the headers every binary-mode record has, converted once;
// records share them (Sarama only reads header bytes).
var (
	keySpecVersion = []byte(HeaderSpecVersion)
	keyID          = []byte(HeaderID)
	keyType        = []byte(HeaderType)
	keySource      = []byte(HeaderSource)
	keyTime        = []byte(HeaderTime)
	keyContentType = []byte(HeaderContentType)
)

// uuidLen is the length of a UUID's text form.
const uuidLen = 36

// MaxSourceBytes bounds RelayConfig.Source: Enqueue counts a ce_source
// header of this size in the record it checks (see Config.MaxPayloadBytes),
// whichever relay publishes the event.
const MaxSourceBytes = 256

// maxTimeLen is the longest ce_time the relay writes: RFC 3339 in UTC with
// nanoseconds, of a four-digit year.
const maxTimeLen = len("2006-01-02T15:04:05.999999999Z")

// Sarama's reckoning of a record's size (sarama.ProducerMessage.ByteSize of
// a record batch, version 2): the record's framing at its largest, and two
// varints per header.
const (
	saramaRecordOverhead = 5*binary.MaxVarintLen32 + binary.MaxVarintLen64 + 1
	saramaHeaderOverhead = 2 * binary.MaxVarintLen32
)

// recordBytes is the size of the record the relay publishes for e (which
// is normalized) in binary mode, as it counts it against Sarama's
// Producer.MaxMessageBytes (sarama.ProducerMessage.ByteSize and the header
// of the record batch, see batchPublisher.partition), with a ce_source of
// MaxSourceBytes and a ce_time of its longest: binaryRecord's headers.
func recordBytes(e *Event) int {
	size := recordBatchOverhead + saramaRecordOverhead + len(e.Key) + len(e.Payload)
	add := func(name string, value int) { size += len(name) + value + saramaHeaderOverhead }
	add(HeaderSpecVersion, len(specVersion))
	add(HeaderID, uuidLen)
	add(HeaderType, len(e.Type))
	add(HeaderSource, MaxSourceBytes)
	add(HeaderTime, maxTimeLen)
	add(HeaderContentType, len(e.ContentType))
	for _, x := range []struct{ name, value string }{
		{HeaderCorrelationID, e.CorrelationID}, {HeaderCausationID, e.CausationID}, {HeaderTenantID, e.TenantID},
		{HeaderAggregateType, e.AggregateType}, {HeaderAggregateID, e.AggregateID},
	} {
		if x.value != "" {
			add(x.name, len(x.value))
		}
	}
	for name, value := range e.Headers {
		add(name, len(value))
	}
	return size
}

// headerValues builds headers whose values are cut from one buffer, which
// must be allocated large enough for all of them: a value never moves once
// a header holds it.
type headerValues struct {
	buf     []byte
	headers []sarama.RecordHeader
}

func (h *headerValues) cut(key []byte, start int) {
	end := len(h.buf)
	h.headers = append(h.headers, sarama.RecordHeader{Key: key, Value: h.buf[start:end:end]})
}

func (h *headerValues) add(key []byte, value string) {
	start := len(h.buf)
	h.buf = append(h.buf, value...)
	h.cut(key, start)
}

func (h *headerValues) addTime(key []byte, t time.Time) {
	start := len(h.buf)
	h.buf = t.UTC().AppendFormat(h.buf, time.RFC3339Nano)
	h.cut(key, start)
}

// structuredRecord is the event in CloudEvents structured mode: the value is
// a JSON CloudEvent holding the payload as data (JSON) or data_base64.
func (e *claimedEvent) structuredRecord(source string) (*sarama.ProducerMessage, error) {
	doc := map[string]any{
		"specversion":     specVersion,
		"id":              e.ID.String(),
		"type":            e.Type,
		"source":          source,
		"time":            e.CreatedAt.UTC().Format(time.RFC3339Nano),
		"datacontenttype": e.ContentType,
	}
	if isJSON, _ := jsonContentType(e.ContentType); isJSON && json.Valid(e.Payload) {
		doc["data"] = json.RawMessage(e.Payload)
	} else {
		doc["data_base64"] = e.Payload // encoding/json writes []byte as base64
	}
	for _, x := range e.extensions() {
		doc[x[0]] = x[1]
	}
	if tp, ok := e.Headers[HeaderTraceParent]; ok {
		doc[HeaderTraceParent] = tp // the Distributed Tracing extension
	}
	value, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	headers := append([]sarama.RecordHeader{header(HeaderContentType, structuredContentType)}, e.userHeaders()...)
	return e.message(sarama.ByteEncoder(value), headers), nil
}

// userHeaders are the event's own headers (and trace context), by name.
func (e *claimedEvent) userHeaders() []sarama.RecordHeader {
	names := make([]string, 0, len(e.Headers))
	for name := range e.Headers {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]sarama.RecordHeader, len(names))
	for i, name := range names {
		out[i] = header(name, e.Headers[name])
	}
	return out
}

func (e *claimedEvent) message(value sarama.Encoder, headers []sarama.RecordHeader) *sarama.ProducerMessage {
	msg := &sarama.ProducerMessage{Topic: e.Topic, Value: value, Headers: headers}
	if e.Key != nil {
		msg.Key = sarama.StringEncoder(*e.Key)
	}
	return msg
}

func header(name, value string) sarama.RecordHeader {
	return sarama.RecordHeader{Key: []byte(name), Value: []byte(value)}
}
