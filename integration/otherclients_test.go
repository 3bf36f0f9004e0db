package integration_test

// Other clients on the same topics: kcat (librdkafka) and franz-go's kgo,
// Kafka clients nobody here wrote, read what the relay publishes, and
// produce records the consumer retries and dead-letters and dlq.Replay
// puts back, byte for byte; jq reads the dead letters kcat prints. The
// wire-format guide (docs/wire-format.md) documents each of these contracts.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
	"github.com/courierkit/courier/retrytopics"
)

// wire is a record's bytes as every client must see them: a nil Key or
// Value is null, distinct from an empty one, and so is a header's nil
// Value.
type wire struct {
	Key, Value []byte
	Headers    []record.Header
}

// String shows w with every byte quoted and nulls named, so that two
// records compare as their strings and a difference reads plainly.
func (w wire) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "key=%s value=%s headers=[", quoteBytes(w.Key), quoteBytes(w.Value))
	for i, h := range w.Headers {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%q=%s", h.Key, quoteBytes(h.Value))
	}
	b.WriteString("]")
	return b.String()
}

func quoteBytes(b []byte) string {
	if b == nil {
		return "null"
	}
	return strconv.Quote(string(b))
}

// withHeader is w with one more header at the end.
func (w wire) withHeader(name, value string) wire {
	w.Headers = append(slices.Clip(w.Headers), record.Header{Key: []byte(name), Value: []byte(value)})
	return w
}

// kcatFormat is what kcat prints of a record with the -f format
// "%K|%k|%S|%s|%h\n": key length (-1 for null), key, value length, value
// and the headers as name=value,….
func (w wire) kcatFormat() string {
	headers := make([]string, len(w.Headers))
	for i, h := range w.Headers {
		headers[i] = string(h.Key) + "=" + string(h.Value)
	}
	length := func(b []byte) int {
		if b == nil {
			return -1
		}
		return len(b)
	}
	return fmt.Sprintf("%d|%s|%d|%s|%s\n", length(w.Key), w.Key, length(w.Value), w.Value, strings.Join(headers, ","))
}

// wireOfKgo is what kgo read.
func wireOfKgo(r *kgo.Record) wire {
	w := wire{Key: r.Key, Value: r.Value}
	for _, h := range r.Headers {
		w.Headers = append(w.Headers, record.Header{Key: []byte(h.Key), Value: h.Value})
	}
	return w
}

// wireOfHandled copies what the handler was given, which it may not keep:
// the consumer hands it the record's own bytes.
func wireOfHandled(key, value []byte, headers []*record.Header) wire {
	w := wire{Key: bytes.Clone(key), Value: bytes.Clone(value)}
	for _, h := range headers {
		w.Headers = append(w.Headers, record.Header{Key: bytes.Clone(h.Key), Value: bytes.Clone(h.Value)})
	}
	return w
}

// kgoClient is a franz-go client of the test's brokers, closed when the
// test ends.
func kgoClient(t *testing.T, k *testkit.Kafka, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(k.Brokers...)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// kgoRead reads the first n records of partition 0 of topic with kgo.
func kgoRead(t *testing.T, k *testkit.Kafka, topic string, n int) []*kgo.Record {
	t.Helper()
	cl := kgoClient(t, k, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("kgo read %d of the %d records of %s within 10s", len(out), n, topic)
		}
		for _, e := range fetches.Errors() {
			t.Fatalf("kgo fetch of %s[%d]: %v", e.Topic, e.Partition, e.Err)
		}
		out = append(out, fetches.Records()...)
	}
	return out[:n]
}

// kgoProduce writes records to partition 0 of topic with kgo.
func kgoProduce(t *testing.T, k *testkit.Kafka, topic string, records ...wire) {
	t.Helper()
	cl := kgoClient(t, k, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	var rs []*kgo.Record
	for _, w := range records {
		r := &kgo.Record{Topic: topic, Partition: 0, Key: w.Key, Value: w.Value}
		for _, h := range w.Headers {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: string(h.Key), Value: h.Value})
		}
		rs = append(rs, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("kgo produce to %s: %v", topic, err)
	}
}

// kcatProduce writes w to partition 0 of topic with the kcat at path,
// from its standard input: the key and value split by \x1f, the record
// ended by \x1e, each header given with -H, and -Z making an empty key and
// value null. kcat cannot write a null header value.
func kcatProduce(t *testing.T, path string, k *testkit.Kafka, topic string, w wire) {
	t.Helper()
	args := []string{"-P", "-b", strings.Join(k.Brokers, ","), "-t", topic, "-p", "0", "-D", `\x1e`, "-K", `\x1f`}
	if w.Key == nil || w.Value == nil {
		args = append(args, "-Z")
	}
	for _, h := range w.Headers {
		args = append(args, "-H", string(h.Key)+"="+string(h.Value))
	}
	runTool(t, path, string(w.Key)+"\x1f"+string(w.Value)+"\x1e", args...)
}

// TestKcatAndKgoReadTheRelaysEvents: what the relay publishes, in binary
// and structured mode, reads the same in kcat and in kgo, and is what the
// wire-format guide's promises: the key, the value byte for byte, and
// every ce_ header in its order.
func TestKcatAndKgoReadTheRelaysEvents(t *testing.T) {
	t.Parallel()
	kc := lookKcat(t)
	pg, out := outbox(t)
	s := newStack(t, 1)
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled}))
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	full := producer.Event{Topic: s.topic, Key: "order-42", Type: "OrderCreated", Payload: []byte(`{"order_id":"order-42"}`),
		Headers:       map[string]string{"x-region": "eu"},
		CorrelationID: "corr-42", CausationID: "cmd-42", TenantID: "t-1", AggregateType: "Order", AggregateID: "order-42"}
	blob := producer.Event{Topic: s.topic, Type: "BlobStored", ContentType: "application/octet-stream", Payload: []byte("\x00\x01\xfe\xff,|\n")}
	relayed := func(cfg producer.RelayConfig, events ...producer.Event) (ids []string) {
		for _, ev := range events {
			res, err := out.Enqueue(ctx, pg.Pool, ev)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.ID.String())
		}
		cfg.Source = "orders-service"
		batch, err := s.relay(t, pg, cfg).RunOnce(context.Background())
		if err != nil || batch.Published != len(events) {
			t.Fatalf("RunOnce = %+v, %v; want %d published", batch, err, len(events))
		}
		return ids
	}
	binaryIDs := relayed(producer.RelayConfig{}, full, blob)
	structuredIDs := relayed(producer.RelayConfig{Structured: true}, full, blob)

	records := kgoRead(t, s.k, s.topic, 4)
	header := func(r *kgo.Record, name string) string {
		for _, h := range r.Headers {
			if h.Key == name {
				return string(h.Value)
			}
		}
		return ""
	}
	ceTime := func(r *kgo.Record) string {
		v := header(r, "ce_time")
		if tm, err := time.Parse(time.RFC3339Nano, v); err != nil || time.Since(tm) > time.Minute || tm.Location() != time.UTC {
			t.Errorf("ce_time %q is not an RFC 3339 time in UTC of the last minute (%v)", v, err)
		}
		return v
	}
	ce := func(id, typ string, r *kgo.Record, contentType string) wire {
		return wire{}.withHeader("ce_specversion", "1.0").withHeader("ce_id", id).withHeader("ce_type", typ).
			withHeader("ce_source", "orders-service").withHeader("ce_time", ceTime(r)).withHeader("content-type", contentType)
	}
	want := []wire{ce(binaryIDs[0], "OrderCreated", records[0], "application/json"), ce(binaryIDs[1], "BlobStored", records[1], "application/octet-stream")}
	want[0] = want[0].withHeader("ce_correlationid", "corr-42").withHeader("ce_causationid", "cmd-42").withHeader("ce_tenantid", "t-1").
		withHeader("ce_aggregatetype", "Order").withHeader("ce_aggregateid", "order-42").
		withHeader("traceparent", traceparent).withHeader("x-region", "eu") // the event's headers, by name
	want[0].Key, want[0].Value = []byte(full.Key), full.Payload
	want[1] = want[1].withHeader("traceparent", traceparent) // Enqueue's context carries the span
	want[1].Value = blob.Payload                             // and no key: Key "" is none

	// Structured mode: the value is the CloudEvent, which kcat must print
	// as kgo read it and whose attributes are the wire-format guide's.
	const structured = "application/cloudevents+json; charset=UTF-8"
	for i, r := range records[2:] {
		var doc map[string]any
		if err := json.Unmarshal(r.Value, &doc); err != nil {
			t.Fatalf("structured record %d: the value is not JSON: %v\n%q", i, err, r.Value)
		}
		tm, _ := doc["time"].(string)
		if parsed, err := time.Parse(time.RFC3339Nano, tm); err != nil || time.Since(parsed) > time.Minute {
			t.Errorf("structured record %d: time %q is not an RFC 3339 time of the last minute (%v)", i, tm, err)
		}
		attrs := map[string]any{"specversion": "1.0", "id": structuredIDs[i], "source": "orders-service", "time": tm, "traceparent": traceparent}
		w := wire{Value: r.Value}.withHeader("content-type", structured).withHeader("traceparent", traceparent)
		if i == 0 {
			for k, v := range map[string]any{"type": "OrderCreated", "datacontenttype": "application/json", "data": map[string]any{"order_id": "order-42"},
				"correlationid": "corr-42", "causationid": "cmd-42", "tenantid": "t-1", "aggregatetype": "Order", "aggregateid": "order-42"} {
				attrs[k] = v
			}
			w = w.withHeader("x-region", "eu")
			w.Key = []byte(full.Key)
		} else {
			attrs["type"], attrs["datacontenttype"], attrs["data_base64"] = "BlobStored", "application/octet-stream", base64.StdEncoding.EncodeToString(blob.Payload)
		}
		if got, wantDoc := fmt.Sprint(doc), fmt.Sprint(attrs); got != wantDoc {
			t.Errorf("structured record %d holds\n%s\nwant\n%s", i, got, wantDoc)
		}
		want = append(want, w)
	}

	var wantKcat strings.Builder
	for i, r := range records {
		if got := wireOfKgo(r).String(); got != want[i].String() {
			t.Errorf("kgo read record %d as\n%s\nwant\n%s", i, got, want[i])
		}
		wantKcat.WriteString(want[i].kcatFormat())
	}
	got := runTool(t, kc, "", "-C", "-b", strings.Join(s.k.Brokers, ","), "-t", s.topic, "-p", "0", "-o", "beginning", "-e", "-q",
		"-f", `%K|%k|%S|%s|%h\n`)
	if got != wantKcat.String() {
		t.Errorf("kcat printed\n%q\nwant\n%q", got, wantKcat.String())
	}
}

// envelopeFields are the fields of a dead-letter envelope the wire-format guide
// documents, in their order; a record's envelope has those of its bytes.
var envelopeFields = []string{"envelope_version", "original_topic", "original_partition", "original_offset", "original_timestamp",
	"original_key", "original_key_base64", "original_headers", "original_headers_base64", "original_header_list",
	"original_message", "original_message_base64", "error", "error_kind", "retry_count", "failed_at", "first_failed_at",
	"correlation_id", "consumer_group", "replay_count"}

// TestRecordsOfKcatAndKgoAreRetriedDeadLetteredAndReplayedByteForByte:
// records kcat and kgo produced, with and without the CloudEvents headers,
// with binary keys, values and headers, nulls and empties, reach the
// handler as produced, on the main topic and in the retry tier; their dead
// letters hold those bytes (read by kcat, decoded by dlq and by jq); and
// dlq.Replay puts them back as produced plus replay_count, which kgo reads
// and the fixed handler handles.
func TestRecordsOfKcatAndKgoAreRetriedDeadLetteredAndReplayedByteForByte(t *testing.T) {
	t.Parallel()
	kc := lookKcat(t)
	jq := tool(t, "jq", "apt-get install jq")
	s := newStack(t, 1)
	ce := func(id, correlation string) []record.Header {
		return wire{}.withHeader("ce_specversion", "1.0").withHeader("ce_id", id).withHeader("ce_type", "OrderPaid").
			withHeader("ce_source", "another-service").withHeader("content-type", "application/json").
			withHeader("ce_correlationid", correlation).Headers
	}
	byKcat := []wire{
		{Key: []byte("order-7"), Value: []byte(`{"amount_cents":500}`), Headers: ce("evt-kcat-7", "checkout-7")},
		{Key: []byte("\x00k\xffcat"), Value: []byte("\x00\x01\xfe\xff{"),
			Headers: wire{}.withHeader("x-bin", "\xc3\x28").withHeader("x-dup", "1").withHeader("x-dup", "2").withHeader("x-empty", "").Headers},
		{Key: []byte("kcat-tombstone")}, // a null value
	}
	byKgo := []wire{
		{Key: []byte("order-8"), Value: []byte(`{"amount_cents":800}`), Headers: ce("evt-kgo-8", "checkout-8")},
		{Key: []byte("\xff\x00kgo"), Value: []byte("\x00\xc3\x28\n\x1e"), Headers: []record.Header{{Key: []byte("x-null")},
			{Key: []byte("x-bin"), Value: []byte("\x00\xff")}, {Key: []byte("x-dup"), Value: []byte("a")}, {Key: []byte("x-dup"), Value: []byte("b")},
			{Key: []byte("\xffname"), Value: []byte("v")}, {Key: []byte("x-empty"), Value: []byte{}}}},
		{},                               // null key and value, no headers
		{Key: []byte{}, Value: []byte{}}, // empty key and value
	}
	for _, w := range byKcat {
		kcatProduce(t, kc, s.k, s.topic, w)
	}
	kgoProduce(t, s.k, s.topic, byKgo...)
	produced := append(byKcat, byKgo...) // by offset

	var (
		mu      sync.Mutex
		handled = map[string][]wire{} // by "<attempt>@<topic>": what the handler saw
		fixed   atomic.Bool
		dead    atomic.Int64
	)
	cfg := s.consumerConfig(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		where := strconv.Itoa(m.Attempt) + "@" + m.Topic
		handled[where] = append(handled[where], wireOfHandled(m.Key, m.Value, retrytopics.Strip(m.Headers)))
		mu.Unlock()
		if fixed.Load() {
			return nil
		}
		return errors.New("psp timeout")
	}))
	s.retryTiers(t, &cfg, 10*time.Millisecond)
	cfg.MaxAttempts = 1
	cfg.OnDeadLetter = func(context.Context, consumer.DeadLetter) { dead.Add(1) }
	runConsumer(t, cfg)
	testkit.WaitFor(t, 10*time.Second, "every record dead-lettered", func() bool { return dead.Load() == int64(len(produced)) })

	tier := retrytopics.TopicName(s.topic, "", 10*time.Millisecond)
	sameSet := func(what string, got []wire, want []wire) {
		t.Helper()
		g, w := make([]string, len(got)), make([]string, len(want))
		for i := range got {
			g[i] = got[i].String()
		}
		for i := range want {
			w[i] = want[i].String()
		}
		slices.Sort(g)
		slices.Sort(w)
		if strings.Join(g, "\n") != strings.Join(w, "\n") {
			t.Errorf("%s:\n%s\nwant\n%s", what, strings.Join(g, "\n"), strings.Join(w, "\n"))
		}
	}
	mu.Lock()
	sameSet("the handler saw on the main topic", handled["1@"+s.topic], produced)
	sameSet("the handler saw in the retry tier (its retry_ headers left out)", handled["2@"+tier], produced)
	mu.Unlock()

	// The dead letters, as kcat prints them: dlq decodes each to the bytes
	// produced at its offset, and jq reads the fields the wire-format guide names.
	printed := runTool(t, kc, "", "-C", "-b", strings.Join(s.k.Brokers, ","), "-t", s.deadLetter, "-e", "-q", "-f", `%s\n`)
	lines := strings.Split(strings.TrimSuffix(printed, "\n"), "\n")
	if len(lines) != len(produced) {
		t.Fatalf("kcat printed %d dead letters, want %d", len(lines), len(produced))
	}
	var wantJQ []string
	for _, line := range lines {
		env, err := dlq.Decode([]byte(line))
		if err != nil {
			t.Fatalf("dlq.Decode of a dead letter kcat printed: %v\n%s", err, line)
		}
		o, err := env.Original()
		if err != nil {
			t.Fatal(err)
		}
		if o.Topic != s.topic || o.Partition != 0 || o.Offset < 0 || o.Offset >= int64(len(produced)) {
			t.Fatalf("a dead letter of %s[%d]@%d, want one of %s[0]", o.Topic, o.Partition, o.Offset, s.topic)
		}
		p := produced[o.Offset]
		if got := (wire{Key: o.Key, Value: o.Value, Headers: o.Headers}); got.String() != p.String() {
			t.Errorf("the dead letter of offset %d restores\n%s\nwant\n%s", o.Offset, got, p)
		}
		wantJQ = append(wantJQ, jqLine(s, o.Offset, p))
	}
	doc, _ := json.Marshal(envelopeFields)
	gotJQ := runTool(t, jq, printed, "-r", "--argjson", "documented", string(doc),
		`[.envelope_version, .original_topic, .original_partition, .original_offset, .original_key, .original_key_base64,
		  (.original_header_list // [] | length), .original_message_base64, .error, .error_kind, .retry_count,
		  .correlation_id, .consumer_group, .replay_count, (.failed_at | sub("\\.[0-9]{3}Z$"; "Z") | fromdateiso8601 | type),
		  (keys_unsorted - $documented | join(","))] | map(tostring) | join("|")`)
	slices.Sort(wantJQ)
	gotLines := strings.Split(strings.TrimSuffix(gotJQ, "\n"), "\n")
	slices.Sort(gotLines)
	if strings.Join(gotLines, "\n") != strings.Join(wantJQ, "\n") {
		t.Errorf("jq read the dead letters as\n%s\nwant\n%s", strings.Join(gotLines, "\n"), strings.Join(wantJQ, "\n"))
	}

	// The fix, then the replay: each record is back on its topic as
	// produced, plus replay_count, and handled.
	fixed.Store(true)
	report, err := dlq.Replay(context.Background(), dlq.ReplayConfig{Brokers: s.k.Brokers, Sarama: s.k.Config(),
		Topic: s.deadLetter, Group: "r." + testkit.UniqueName(t, 100)})
	if err != nil || report.Moved != len(produced) {
		t.Fatalf("dlq.Replay = %+v, %v; want %d moved", report, err, len(produced))
	}
	var replayed, back []wire
	for _, p := range produced {
		replayed = append(replayed, p.withHeader(dlq.ReplayCountHeader, "1"))
	}
	for _, r := range kgoRead(t, s.k, s.topic, 2*len(produced))[len(produced):] {
		back = append(back, wireOfKgo(r))
	}
	sameSet("kgo read back on the topic after the replay", back, replayed)
	testkit.WaitFor(t, 10*time.Second, "the replayed records handled and committed", func() bool { return s.settled(t) })
	mu.Lock()
	defer mu.Unlock()
	sameSet("the fixed handler saw", handled["1@"+s.topic][len(produced):], replayed)
}

// jqLine is what the jq program of
// TestRecordsOfKcatAndKgoAreRetriedDeadLetteredAndReplayedByteForByte
// prints of the dead letter of p, produced at offset: its fields as the
// wire-format guide documents them, joined by "|" (null prints as "null").
func jqLine(s *stack, offset int64, p wire) string {
	text := func(b []byte) (text, b64 string) {
		switch {
		case b == nil:
			return "null", "null"
		case utf8.Valid(b):
			return string(b), "null"
		}
		return "null", base64.StdEncoding.EncodeToString(b)
	}
	key, keyB64 := text(p.Key)
	valueB64 := "null"
	if p.Value != nil && !json.Valid(p.Value) {
		valueB64 = base64.StdEncoding.EncodeToString(p.Value)
	}
	correlation := ""
	for _, h := range p.Headers {
		if string(h.Key) == "ce_correlationid" {
			correlation = string(h.Value)
		}
	}
	return strings.Join([]string{"1", s.topic, "0", strconv.FormatInt(offset, 10), key, keyB64, strconv.Itoa(len(p.Headers)), valueB64,
		"psp timeout", "retries_exhausted", "2", correlation, s.group, "0", "number", ""}, "|")
}
