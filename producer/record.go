package producer

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"time"

	"github.com/courierkit/courier/internal/ceheader"
	"github.com/courierkit/courier/record"
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
// value, the attributes as ce_ headers. The key and the header values share
// one allocation: this runs for every event the relay publishes.
func (e *claimedEvent) binaryRecord(source string) *record.Record {
	exts := e.extensions()
	size := uuidLen + len(e.Type) + len(source) + len(time.RFC3339Nano) + len(e.ContentType) + len(specVersion)
	if e.Key != nil {
		size += len(*e.Key)
	}
	for _, x := range exts {
		size += len(x[1])
	}
	hs := headerValues{buf: make([]byte, 0, size)}
	var key []byte
	if e.Key != nil {
		key = hs.text(*e.Key)
	}
	hs.add(keySpecVersion, specVersion)
	hs.add(keyID, e.ID.String())
	hs.add(keyType, e.Type)
	hs.add(keySource, source)
	hs.addTime(keyTime, e.CreatedAt)
	hs.add(keyContentType, e.ContentType)
	for _, x := range exts {
		hs.headers = append(hs.headers, header("ce_"+x[0], x[1]))
	}
	return &record.Record{Topic: e.Topic, Key: key, Value: e.Payload, Headers: append(hs.headers, e.userHeaders()...)}
}

// The names of the headers every binary-mode record has, converted once;
// records share them (publishers only read header bytes).
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

// recordSize is r's size as Sarama reckons it in a record batch: the
// ByteSize(2) of record.Message(r).
func recordSize(r *record.Record) int {
	size := saramaRecordOverhead + len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		size += len(h.Key) + len(h.Value) + saramaHeaderOverhead
	}
	return size
}

// recordBytes is the size of the record the relay publishes for e (which
// is normalized) in binary mode, as it counts it against Sarama's
// Producer.MaxMessageBytes (recordSize and the header of the record batch,
// see batchPublisher.partition), with a ce_source of
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
		if name != HeaderTraceParent {
			add(name, len(value))
		}
	}
	// Room for the traceparent of the relay's span, when it traces, or
	// for the stored one when it is longer.
	add(HeaderTraceParent, max(len(e.Headers[HeaderTraceParent]), traceParentLen))
	return size
}

// traceParentLen is the length of a W3C traceparent of version 00.
const traceParentLen = len("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")

// headerValues builds headers whose values are cut from one buffer, which
// must be allocated large enough for all of them: a value never moves once
// a header holds it.
type headerValues struct {
	buf     []byte
	headers []record.Header
}

// text appends value to the buffer and returns its bytes there.
func (h *headerValues) text(value string) []byte {
	start := len(h.buf)
	h.buf = append(h.buf, value...)
	end := len(h.buf)
	return h.buf[start:end:end]
}

func (h *headerValues) add(key []byte, value string) {
	h.headers = append(h.headers, record.Header{Key: key, Value: h.text(value)})
}

func (h *headerValues) addTime(key []byte, t time.Time) {
	start := len(h.buf)
	h.buf = t.UTC().AppendFormat(h.buf, time.RFC3339Nano)
	end := len(h.buf)
	h.headers = append(h.headers, record.Header{Key: key, Value: h.buf[start:end:end]})
}

// structuredRecord is the event in CloudEvents structured mode: the value is
// a JSON CloudEvent holding the payload as data (JSON) or data_base64.
func (e *claimedEvent) structuredRecord(source string) (*record.Record, error) {
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
	if tp, ok := e.published(HeaderTraceParent); ok {
		doc[HeaderTraceParent] = tp // the Distributed Tracing extension
	}
	value, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	rec := &record.Record{Topic: e.Topic, Value: value,
		Headers: append([]record.Header{header(HeaderContentType, structuredContentType)}, e.userHeaders()...)}
	if e.Key != nil {
		rec.Key = []byte(*e.Key)
	}
	return rec, nil
}

// userHeaders are the event's own headers (and trace context), by name.
func (e *claimedEvent) userHeaders() []record.Header {
	names := make([]string, 0, len(e.Headers)+1)
	for name := range e.Headers {
		names = append(names, name)
	}
	if e.traceParent != "" {
		// The relay's span replaces the stored trace context, tracestate
		// included (none when its span has none).
		names = slices.DeleteFunc(names, func(name string) bool { return name == HeaderTraceParent || name == HeaderTraceState })
		names = append(names, HeaderTraceParent)
		if e.traceState != "" {
			names = append(names, HeaderTraceState)
		}
	}
	slices.Sort(names)
	out := make([]record.Header, len(names))
	for i, name := range names {
		value, _ := e.published(name)
		out[i] = header(name, value)
	}
	return out
}

// published is the value of the event's header name as the relay
// publishes it: the relay's span's traceparent and tracestate when it made
// one, else the stored header.
func (e *claimedEvent) published(name string) (string, bool) {
	switch {
	case e.traceParent == "":
	case name == HeaderTraceParent:
		return e.traceParent, true
	case name == HeaderTraceState:
		return e.traceState, e.traceState != ""
	}
	value, ok := e.Headers[name]
	return value, ok
}

func header(name, value string) record.Header {
	return record.Header{Key: []byte(name), Value: []byte(value)}
}
