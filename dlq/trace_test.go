package dlq_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/record"
)

// tracedDeadLetter writes the dead letter of o as the consumer does, the
// record carrying traceparent (none when empty) besides what the writer
// puts in it: in envelope mode beside the dlq_* headers, in raw mode in
// place of the original's.
func (f *replayFixture) tracedDeadLetter(t *testing.T, o dlq.Original, traceparent string, raw bool) {
	t.Helper()
	o.Topic = f.topic
	env, err := dlq.New(o, dlq.Failure{Error: "boom", Kind: dlq.KindRetriesExhausted})
	if err != nil {
		t.Fatal(err)
	}
	writer, err := dlq.NewWriter(record.NewSyncPublisher(f.producer), dlq.WriterConfig{Raw: raw})
	if err != nil {
		t.Fatal(err)
	}
	format := dlq.FormatEnvelope
	if raw {
		format = dlq.FormatRaw
	}
	rec, err := writer.Record(env, format)
	if err != nil {
		t.Fatal(err)
	}
	if traceparent != "" {
		rec.Headers = slices.DeleteFunc(rec.Headers, func(h dlq.Header) bool { return string(h.Key) == "traceparent" })
		rec.Headers = append(rec.Headers, dlq.Header{Key: []byte("traceparent"), Value: []byte(traceparent)})
	}
	if _, _, err := f.producer.SendMessage(record.Message(rec)); err != nil {
		t.Fatal(err)
	}
}

func hdr(k, v string) dlq.Header { return dlq.Header{Key: []byte(k), Value: []byte(v)} }

func TestTracingReplaySpansLinkToTheDeadLetters(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	const (
		deadLetter = "00-11111111111111111111111111111111-2222222222222222-01" // the consumer's dead-letter write
		original   = "00-33333333333333333333333333333333-4444444444444444-01" // the original's producer
		rawLetter  = "00-55555555555555555555555555555555-6666666666666666-01"
	)
	f.tracedDeadLetter(t, dlq.Original{Partition: 0, Offset: 1, Key: []byte("linked"),
		Headers: []dlq.Header{hdr("ce_id", "evt-linked"), hdr("traceparent", original), hdr("tracestate", "o=1"), hdr("x", "1")}}, deadLetter, false)
	f.tracedDeadLetter(t, dlq.Original{Partition: 0, Offset: 2, Key: []byte("malformed"),
		Headers: []dlq.Header{hdr("ce_id", "evt-malformed")}}, "00-zz-not-a-trace", false)
	f.tracedDeadLetter(t, dlq.Original{Partition: 0, Offset: 3, Key: []byte("fallback"),
		Headers: []dlq.Header{hdr("ce_id", "evt-fallback"), hdr("traceparent", original)}}, "", false)
	f.tracedDeadLetter(t, dlq.Original{Partition: 0, Offset: 4, Key: []byte("raw"),
		Headers: []dlq.Header{hdr("ce_id", "evt-raw"), hdr("traceparent", original)}}, rawLetter, true)

	exporter := tracetest.NewInMemoryExporter()
	var started startCounter
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter), sdktrace.WithSpanProcessor(&started))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, job := tp.Tracer("test").Start(context.Background(), "replay job")
	cfg := dlq.ReplayConfig{Brokers: f.k.Brokers, Sarama: f.k.Config(), Topic: f.dlqTopic, Group: f.group, TracerProvider: tp, DryRun: true}
	if report, err := dlq.Replay(ctx, cfg); err != nil || report.Moved != 4 {
		t.Fatalf("dry run: %+v, %v", report, err)
	}
	if n := started.n.Load(); n != 1 { // the job's
		t.Fatalf("a dry run started %d spans, want none", n-1)
	}
	cfg.DryRun = false
	if report, err := dlq.Replay(ctx, cfg); err != nil || report.Moved != 4 {
		t.Fatalf("replay: %+v, %v", report, err)
	}
	job.End()
	if n := started.n.Load(); n != 5 || len(exporter.GetSpans()) != 5 {
		t.Errorf("%d spans started, %d ended, want 5 (the job's and 4 replays)", n, len(exporter.GetSpans()))
	}

	replayed := map[string]*sarama.ConsumerMessage{}
	for _, m := range f.k.ReadAll(t, f.topic) {
		replayed[string(m.Key)] = m
	}
	spans := map[string]tracetest.SpanStub{}
	for _, s := range exporter.GetSpans() {
		if s.Name == "replay job" {
			continue
		}
		attrs := attributeSet(s)
		id, _ := attrs.Value("messaging.message.id")
		spans[id.AsString()] = s
		if op, _ := attrs.Value("courier.operation"); op.AsString() != "replay" || s.Name != "send "+f.topic || s.SpanKind != trace.SpanKindProducer ||
			s.InstrumentationScope.Name != "github.com/courierkit/courier/dlq" {
			t.Errorf("span %q kind %v scope %q attributes %v", s.Name, s.SpanKind, s.InstrumentationScope.Name, s.Attributes)
		}
		if s.Parent.SpanID() != job.SpanContext().SpanID() || s.SpanContext.TraceID() != job.SpanContext().TraceID() {
			t.Errorf("span of %s: parent %s in trace %s, want Replay's context's span %s", id.AsString(), s.Parent.SpanID(), s.SpanContext.TraceID(), job.SpanContext().SpanID())
		}
	}
	for _, c := range []struct {
		key, link string
		headers   []string // the replayed record's, in order
	}{
		{"linked", deadLetter, []string{"ce_id", "traceparent", "x", "replay_count"}}, // the original's tracestate is dropped: the replay span has none
		{"malformed", "", []string{"ce_id", "replay_count", "traceparent"}},
		{"fallback", original, []string{"ce_id", "traceparent", "replay_count"}},
		{"raw", rawLetter, []string{"ce_id", "traceparent", "replay_count"}},
	} {
		s, ok := spans["evt-"+c.key]
		m := replayed[c.key]
		if !ok || m == nil {
			t.Errorf("%s: span %v, record %v; want both", c.key, ok, m != nil)
			continue
		}
		var links []string
		for _, l := range s.Links {
			links = append(links, traceparentOf(l.SpanContext))
		}
		if want := []string{c.link}; c.link == "" && len(links) != 0 || c.link != "" && !slices.Equal(links, want) {
			t.Errorf("%s: links %q, want %q", c.key, links, c.link)
		}
		var names []string
		for _, h := range m.Headers {
			names = append(names, string(h.Key))
			if string(h.Key) == "traceparent" && string(h.Value) != traceparentOf(s.SpanContext) {
				t.Errorf("%s: the replayed record's traceparent is %q, want the replay span's %q", c.key, h.Value, traceparentOf(s.SpanContext))
			}
		}
		if !slices.Equal(names, c.headers) {
			t.Errorf("%s: headers %q, want %q", c.key, names, c.headers)
		}
		if offset, _ := attributeSet(s).Value("messaging.kafka.offset"); offset.AsInt64() != m.Offset {
			t.Errorf("%s: offset attribute %d, want %d", c.key, offset.AsInt64(), m.Offset)
		}
	}
}

// traceparentOf is the traceparent header a span context makes.
func traceparentOf(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

func attributeSet(s tracetest.SpanStub) *attribute.Set {
	set := attribute.NewSet(s.Attributes...)
	return &set
}

// startCounter is a span processor that counts the spans started.
type startCounter struct{ n atomic.Int32 }

func (c *startCounter) OnStart(context.Context, sdktrace.ReadWriteSpan) { c.n.Add(1) }
func (c *startCounter) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (c *startCounter) Shutdown(context.Context) error                  { return nil }
func (c *startCounter) ForceFlush(context.Context) error                { return nil }

// The broker refuses the records of one partition: their replay spans
// fail, those of the other partition's records do not.
func TestTracingReplaySpansOfRefusedWrites(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 2, testkit.InProcess())
	for i := range 4 {
		f.deadLetter(t, dlq.Original{Partition: int32(i % 2), Offset: int64(i), Key: fmt.Appendf(nil, "order-%d", i), Value: []byte("{}"),
			Headers: []dlq.Header{hdr("ce_id", fmt.Sprint("evt-", i))}}, dlq.Failure{Error: "boom", Kind: dlq.KindRetriesExhausted}, false)
	}
	f.refuseWrites(func() bool { return true }, func(p int32) bool { return p == 1 })
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	if report, _, err := f.replay(t, dlq.ReplayConfig{TracerProvider: tp}); err == nil || report.Moved != 2 {
		t.Fatalf("moved %d, err %v; want the 2 of partition 0 and an error", report.Moved, err)
	}
	spans := exporter.GetSpans()
	if len(spans) != 4 {
		t.Fatalf("%d spans, want 4", len(spans))
	}
	for _, s := range spans {
		id, _ := attributeSet(s).Value("messaging.message.id")
		var n int
		fmt.Sscanf(id.AsString(), "evt-%d", &n)
		if wantFailed := n%2 == 1; (s.Status.Code == codes.Error) != wantFailed || wantFailed && len(s.Events) != 1 {
			t.Errorf("span of %s: status %+v events %d; want failed: %v", id.AsString(), s.Status, len(s.Events), wantFailed)
		}
	}
}
