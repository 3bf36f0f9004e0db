package consumer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/testkit"
)

// The trace context of the producer of the test's message.
const (
	producerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan   = "00f067aa0ba902b7"
	producerParent = "00-" + producerTrace + "-" + producerSpan + "-01"
	producerState  = "vendor=kept"
)

// newTracing returns a tracer provider that exports each span to the
// returned exporter as it ends.
func newTracing(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exporter
}

// tracedRun is what a traced message that always fails left behind: the
// span contexts its handler saw, and the records of its retry tier and
// dead-letter topic.
type tracedRun struct {
	handlerSpans []trace.SpanContext
	retried      *sarama.ConsumerMessage
	deadLetter   *sarama.ConsumerMessage
	retryTopic   string
}

// failThroughRetryTier sends a message with a traceparent through a
// consumer (with tp unless nil) whose handler always fails: two attempts
// on the main topic, a move to the retry tier, two attempts there, then
// the dead-letter topic, written in raw mode if raw. With exporter, it
// waits for the 6 spans too.
func failThroughRetryTier(t *testing.T, tp trace.TracerProvider, exporter *tracetest.InMemoryExporter, raw bool) tracedRun {
	t.Helper()
	f := newFixture(t, 1)
	var (
		mu   sync.Mutex
		seen []trace.SpanContext
	)
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, trace.SpanContextFromContext(ctx))
		return fmt.Errorf("psp down on attempt %d", m.Attempt)
	}))
	topo := f.withRetry(t, &cfg, 50*time.Millisecond)
	cfg.MaxAttempts = 2
	cfg.DeadLetterRaw = raw
	cfg.TracerProvider = tp
	msg := record("k", "v")
	msg.Headers = append(msg.Headers, sarama.RecordHeader{Key: []byte("traceparent"), Value: []byte(producerParent)},
		sarama.RecordHeader{Key: []byte("tracestate"), Value: []byte(producerState)})
	f.produce(t, f.topic, msg)
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "a dead letter", func() bool { return len(f.readAll(t, f.dlq)) == 1 })
	if exporter != nil {
		// The dead-letter write's span ends once the write returned.
		testkit.WaitFor(t, 10*time.Second, "6 spans", func() bool { return len(exporter.GetSpans()) >= 6 })
	}
	stop()
	retried := f.readAll(t, topo.Tiers[0].Topic)
	if len(retried) != 1 {
		t.Fatalf("the retry tier holds %d records, want 1", len(retried))
	}
	mu.Lock()
	defer mu.Unlock()
	return tracedRun{handlerSpans: slices.Clone(seen), retried: retried[0], deadLetter: f.readAll(t, f.dlq)[0], retryTopic: topo.Tiers[0].Topic}
}

// header returns the values of the headers of m named name.
func header(m *sarama.ConsumerMessage, name string) []string {
	var values []string
	for _, h := range m.Headers {
		if string(h.Key) == name {
			values = append(values, string(h.Value))
		}
	}
	return values
}

// traceparentOf is the traceparent header a span context makes.
func traceparentOf(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}

// attrs returns the attributes of s by key.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestTracingSpansFollowAMessageThroughARetryTierToTheDeadLetterTopic(t *testing.T) {
	t.Parallel()
	for _, raw := range []bool{false, true} {
		t.Run(fmt.Sprintf("raw=%v", raw), func(t *testing.T) {
			t.Parallel()
			tp, exporter := newTracing(t)
			got := failThroughRetryTier(t, tp, exporter, raw)
			topic := got.retried.Topic[:len(got.retried.Topic)-len(".retry.50ms")]
			spans := exporter.GetSpans()
			slices.SortStableFunc(spans, func(a, b tracetest.SpanStub) int { return a.StartTime.Compare(b.StartTime) })
			var names []string
			for _, s := range spans {
				names = append(names, s.Name)
			}
			want := []string{"process " + topic, "process " + topic, "send " + got.retryTopic,
				"process " + got.retryTopic, "process " + got.retryTopic, "send " + topic + ".dlq"}
			if !slices.Equal(names, want) {
				t.Fatalf("spans %q, want %q", names, want)
			}
			producer, _ := trace.SpanIDFromHex(producerSpan)
			move := spans[2].SpanContext
			for i, s := range spans {
				wantParent, wantKind := producer, trace.SpanKindConsumer
				switch i {
				case 2:
					wantKind = trace.SpanKindProducer
				case 3, 4:
					wantParent = move.SpanID() // the retry record carries the move's trace context
				case 5:
					wantParent, wantKind = move.SpanID(), trace.SpanKindProducer
				}
				if s.SpanContext.TraceID().String() != producerTrace || s.Parent.SpanID() != wantParent || s.SpanKind != wantKind {
					t.Errorf("span %d %s: trace %s parent %s kind %v; want trace %s parent %s kind %v", i, s.Name,
						s.SpanContext.TraceID(), s.Parent.SpanID(), s.SpanKind, producerTrace, wantParent, wantKind)
				}
				if s.InstrumentationScope.Name != "github.com/courierkit/courier/consumer" {
					t.Errorf("span %d: tracer %q", i, s.InstrumentationScope.Name)
				}
			}
			// The attempts: failed, with the messaging attributes, and the
			// context the handler saw.
			for i, s := range []tracetest.SpanStub{spans[0], spans[1], spans[3], spans[4]} {
				a := attrs(s)
				dest, round := topic, int64(0)
				if i >= 2 {
					dest, round = got.retryTopic, 1
				}
				if a["messaging.system"].AsString() != "kafka" || a["messaging.operation.type"].AsString() != "process" ||
					a["messaging.operation.name"].AsString() != "process" || a["messaging.destination.name"].AsString() != dest ||
					a["messaging.destination.partition.id"].AsString() != "0" || a["messaging.kafka.offset"].AsInt64() != 0 ||
					a["messaging.message.id"].AsString() != "id-v" || a["messaging.kafka.message.key"].AsString() != "k" ||
					a["courier.attempt"].AsInt64() != int64(i+1) || a["courier.retry_round"].AsInt64() != round {
					t.Errorf("attempt %d: attributes %v", i+1, s.Attributes)
				}
				msg := fmt.Sprintf("psp down on attempt %d", i+1)
				if s.Status.Code != codes.Error || s.Status.Description != msg || len(s.Events) != 1 || s.Events[0].Name != "exception" {
					t.Errorf("attempt %d: status %+v events %v, want the error %q", i+1, s.Status, s.Events, msg)
				}
				if i < len(got.handlerSpans) && !got.handlerSpans[i].Equal(s.SpanContext) {
					t.Errorf("attempt %d: the handler's context carries span %s, want its attempt's %s", i+1, got.handlerSpans[i].SpanID(), s.SpanContext.SpanID())
				}
			}
			if len(got.handlerSpans) != 4 {
				t.Errorf("%d handler calls, want 4", len(got.handlerSpans))
			}
			// The moves: where to, and the trace context of the records
			// written.
			for i, c := range []struct {
				s     tracetest.SpanStub
				to    string
				route string
				rec   *sarama.ConsumerMessage
			}{{spans[2], got.retryTopic, "retry", got.retried}, {spans[5], topic + ".dlq", "dead_letter", got.deadLetter}} {
				a := attrs(c.s)
				if a["messaging.system"].AsString() != "kafka" || a["messaging.operation.type"].AsString() != "send" ||
					a["messaging.destination.name"].AsString() != c.to || a["messaging.message.id"].AsString() != "id-v" ||
					a["courier.route"].AsString() != c.route || a["messaging.kafka.offset"].AsInt64() != c.rec.Offset {
					t.Errorf("move %d: attributes %v", i, c.s.Attributes)
				}
				if c.s.Status.Code != codes.Unset {
					t.Errorf("move %d: status %+v, want unset (written at once)", i, c.s.Status)
				}
				if tp := header(c.rec, "traceparent"); !slices.Equal(tp, []string{traceparentOf(c.s.SpanContext)}) {
					t.Errorf("move %d: the record's traceparent headers are %q, want the move's span %q alone", i, tp, traceparentOf(c.s.SpanContext))
				}
				if ts := header(c.rec, "tracestate"); !slices.Equal(ts, []string{producerState}) {
					t.Errorf("move %d: the record's tracestate headers are %q, want %q", i, ts, producerState)
				}
			}
		})
	}
}

// Not parallel: it sets the global tracer provider, which the consumer must
// not fall back to.
func TestTracingWithoutAProviderMakesNoSpansAndKeepsTheTraceparent(t *testing.T) {
	global, exporter := newTracing(t)
	before := otel.GetTracerProvider()
	otel.SetTracerProvider(global)
	t.Cleanup(func() { otel.SetTracerProvider(before) })
	got := failThroughRetryTier(t, nil, nil, true)
	if spans := exporter.GetSpans(); len(spans) != 0 {
		t.Errorf("the global provider got %d spans, want none", len(spans))
	}
	for _, rec := range []*sarama.ConsumerMessage{got.retried, got.deadLetter} {
		if tp := header(rec, "traceparent"); !slices.Equal(tp, []string{producerParent}) {
			t.Errorf("%s: traceparent headers %q, want the producer's %q", rec.Topic, tp, producerParent)
		}
	}
	producer, _ := trace.SpanIDFromHex(producerSpan)
	for i, sc := range got.handlerSpans {
		if !sc.IsRemote() || sc.SpanID() != producer {
			t.Errorf("attempt %d: the handler's context carries span %s (remote %v), want the producer's %s", i+1, sc.SpanID(), sc.IsRemote(), producerSpan)
		}
	}
}

// A handler error whose Error panics (a typed nil pointer) fails its
// attempt's span without taking the consumer down, and an id that is not
// UTF-8 is made UTF-8 for the exporters.
func TestTracingSpanOfAnErrorWhoseErrorPanics(t *testing.T) {
	t.Parallel()
	tp, exporter := newTracing(t)
	f := newFixture(t, 1)
	cfg := f.config(t, consumer.HandlerFunc(func(context.Context, *consumer.Message) error {
		var e *panickyError
		return consumer.Permanent(e)
	}))
	cfg.TracerProvider = tp
	f.produce(t, f.topic, record("k", "\xff"))
	run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "2 spans", func() bool { return len(exporter.GetSpans()) == 2 })
	processed := false
	for _, s := range exporter.GetSpans() {
		for _, kv := range s.Attributes {
			if kv.Value.Type() == attribute.STRING && !utf8.ValidString(kv.Value.AsString()) {
				t.Errorf("%s: attribute %s is %q, not UTF-8", s.Name, kv.Key, kv.Value.AsString())
			}
		}
		if s.Name != "process "+f.topic {
			continue
		}
		processed = true
		if s.Status.Code != codes.Error || !strings.Contains(s.Status.Description, "PANIC") || len(s.Events) != 1 {
			t.Errorf("status %+v events %v, want the error as fmt prints it", s.Status, s.Events)
		}
	}
	if !processed {
		t.Errorf("no span named %q among %d", "process "+f.topic, len(exporter.GetSpans()))
	}
}

type panickyError struct{ text string }

func (e *panickyError) Error() string { return e.text }

// A dead-letter write whose first try the broker refuses: one span covers
// the tries, failed, and the record written at last carries it.
func TestTracingSpanOfADeadLetterWriteThatFailedOnce(t *testing.T) {
	t.Parallel()
	tp, exporter := newTracing(t)
	f := newFixture(t, 1, testkit.InProcess())
	var refused atomic.Bool
	f.k.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.k.Cluster.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) != 1 || pr.Topics[0].Topic != f.dlq || !refused.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = f.dlq
		for _, p := range pr.Topics[0].Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.ErrorCode = p.Partition, kerr.InvalidRecord.Code // no retry of Sarama's helps
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
	cfg := f.config(t, consumer.HandlerFunc(func(context.Context, *consumer.Message) error {
		return consumer.Permanent(fmt.Errorf("cannot parse"))
	}))
	cfg.TracerProvider = tp
	f.produce(t, f.topic, record("k", "poison"))
	run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "2 spans", func() bool { return len(exporter.GetSpans()) == 2 })
	var send tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		if s.Name == "send "+f.dlq {
			send = s
		}
	}
	if !refused.Load() || send.Status.Code != codes.Error || len(send.Events) != 1 || !strings.Contains(send.Status.Description, "failed the validation") {
		t.Errorf("refused %v; the write's span: %q status %+v events %v; want one failed try", refused.Load(), send.Name, send.Status, send.Events)
	}
	letters := f.readAll(t, f.dlq)
	if len(letters) != 1 || !slices.Equal(header(letters[0], "traceparent"), []string{traceparentOf(send.SpanContext)}) {
		t.Fatalf("%d dead letters; want one, carrying the write's span %s", len(letters), traceparentOf(send.SpanContext))
	}
}
