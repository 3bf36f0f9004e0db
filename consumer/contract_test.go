package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	courierrecord "github.com/courierkit/courier/record"
)

// consumeAll runs cfg until the group has committed n offsets on partition
// 0, then stops it.
func (f *fixture) consumeAll(t *testing.T, cfg consumer.Config, n int64) {
	t.Helper()
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "every offset committed", func() bool { return f.committed(t, 0) == n })
	stop()
}

// deadLetters returns the envelopes on the fixture's dead-letter topic.
func (f *fixture) deadLetters(t *testing.T) []dlq.Envelope {
	t.Helper()
	var out []dlq.Envelope
	for _, rec := range f.readAll(t, f.dlq) {
		env, err := dlq.Read(rec.Key, rec.Value, dlqHeaders(rec))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, env)
	}
	return out
}

var (
	errDeclined  = errors.New("card declined")
	errTransient = errors.New("psp 503")
)

func TestPermanentAndRetryablePredicate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.produce(t, f.topic, record("a", "permanent"), record("b", "declined"), record("c", "transient"))
	var attempts counter
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		attempts.add(string(m.Value))
		switch string(m.Value) {
		case "permanent":
			return consumer.Permanent(errors.New("malformed payload"))
		case "declined":
			return errDeclined
		}
		return errTransient
	}))
	cfg.Retryable = func(err error) bool { return !errors.Is(err, errDeclined) }
	f.consumeAll(t, cfg, 3)

	for value, want := range map[string]int{"permanent": 1, "declined": 1, "transient": consumer.DefaultMaxAttempts} {
		if got := attempts.get(value); got != want {
			t.Errorf("%s: %d attempts, want %d", value, got, want)
		}
	}
	kinds := map[string]dlq.ErrorKind{}
	for _, env := range f.deadLetters(t) {
		v, _ := env.OriginalValue()
		kinds[string(v)] = env.ErrorKind
	}
	want := map[string]dlq.ErrorKind{"permanent": dlq.KindPermanent, "declined": dlq.KindPermanent, "transient": dlq.KindRetriesExhausted}
	for v, k := range want {
		if kinds[v] != k {
			t.Errorf("dead letter of %s has kind %q, want %q", v, kinds[v], k)
		}
	}
}

func TestRetryAfterPicksTheDelay(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.produce(t, f.topic, record("a", "v"))
	const asked = 300 * time.Millisecond
	var mu sync.Mutex
	var times []time.Time
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		times = append(times, time.Now())
		if m.Attempt == 1 {
			return consumer.RetryAfter(errors.New("429 too many requests"), asked)
		}
		return nil
	}))
	f.consumeAll(t, cfg, 1)
	mu.Lock()
	defer mu.Unlock()
	if len(times) != 2 {
		t.Fatalf("%d attempts, want 2", len(times))
	}
	if gap := times[1].Sub(times[0]); gap < asked {
		t.Errorf("second attempt %v after the first, want at least the %v RetryAfter asked (Backoff would wait 5ms)", gap, asked)
	}
}

func TestHandlerPanicsAreRecovered(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.produce(t, f.topic, record("a", "panic-once"), record("b", "panic-always"), record("c", "fine"))
	var handled counter
	var letters []consumer.DeadLetter
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		switch {
		case string(m.Value) == "panic-always", string(m.Value) == "panic-once" && m.Attempt == 1:
			var nilMap map[string]int
			nilMap["boom"]++ // a runtime error panic
		}
		handled.add(string(m.Value))
		return nil
	}))
	cfg.OnDeadLetter = func(_ context.Context, dl consumer.DeadLetter) { letters = append(letters, dl) }
	f.consumeAll(t, cfg, 3)

	if handled.get("panic-once") != 1 || handled.get("fine") != 1 {
		t.Errorf("handled %v, want panic-once (on its retry) and fine", handled.n)
	}
	if len(letters) != 1 {
		t.Fatalf("%d dead letters, want 1", len(letters))
	}
	pe, ok := errors.AsType[*consumer.PanicError](letters[0].Err)
	if !ok || string(letters[0].Message.Value) != "panic-always" || len(pe.Stack) == 0 {
		t.Fatalf("dead letter %q with error %v, want panic-always with a *PanicError and its stack", letters[0].Message.Value, letters[0].Err)
	}
	if env := letters[0].Envelope; env.Attempts != consumer.DefaultMaxAttempts || env.Error != "handler panicked: assignment to entry in nil map" {
		t.Errorf("envelope retry count %d error %q", env.Attempts, env.Error)
	}
}

// TestPanickingHooksAreRecovered: a panic in Config.Retryable or
// Config.OnDeadLetter is logged and recovered; the consumer carries on, the
// error counts as retryable, and the dead letter stays written and committed.
func TestPanickingHooksAreRecovered(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.produce(t, f.topic, record("a", "fails-once"), record("b", "declined"), record("c", "fine"))
	var handled counter
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		switch {
		case string(m.Value) == "fails-once" && m.Attempt == 1:
			return errTransient
		case string(m.Value) == "declined":
			return consumer.Permanent(errDeclined)
		}
		handled.add(string(m.Value))
		return nil
	}))
	cfg.Retryable = func(error) bool { panic("bug in Retryable") }
	cfg.OnDeadLetter = func(context.Context, consumer.DeadLetter) { panic("bug in OnDeadLetter") }
	f.consumeAll(t, cfg, 3)

	if handled.get("fails-once") != 1 || handled.get("fine") != 1 {
		t.Errorf("handled %v, want fails-once (on its retry) and fine", handled.n)
	}
	if letters := f.deadLetters(t); len(letters) != 1 || letters[0].OriginalOffset != 1 {
		t.Fatalf("dead letters %+v, want the declined message", letters)
	}
}

func TestAttemptTimeout(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.produce(t, f.topic, record("a", "slow-once"))
	var mu sync.Mutex
	var ctxErr, cause error
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if m.Attempt > 1 {
			return nil
		}
		<-ctx.Done() // the attempt's deadline ends it
		mu.Lock()
		defer mu.Unlock()
		ctxErr, cause = ctx.Err(), context.Cause(ctx)
		return ctx.Err()
	}))
	cfg.AttemptTimeout = 100 * time.Millisecond
	seen := lastRetried(&cfg)
	f.consumeAll(t, cfg, 1)
	mu.Lock()
	defer mu.Unlock()
	if !errors.Is(ctxErr, context.DeadlineExceeded) {
		t.Errorf("the slow attempt's context ended with %v, want context.DeadlineExceeded", ctxErr)
	}
	if !errors.Is(cause, consumer.ErrAttemptTimeout) {
		t.Errorf("the slow attempt's context ended with cause %v, want ErrAttemptTimeout", cause)
	}
	if err := seen(); !errors.Is(err, consumer.ErrAttemptTimeout) {
		t.Errorf("the failed attempt's error is %v, want ErrAttemptTimeout", err)
	}
}

// TestAttemptTimeoutIgnoredContext: an attempt that ignores its context and
// returns nil after AttemptTimeout still failed, with ErrAttemptTimeout.
func TestAttemptTimeoutIgnoredContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.produce(t, f.topic, record("a", "late-once"))
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if m.Attempt == 1 {
			time.Sleep(200 * time.Millisecond) // a handler deaf to ctx, past AttemptTimeout
		}
		return nil
	}))
	cfg.AttemptTimeout = 50 * time.Millisecond
	seen := lastRetried(&cfg)
	f.consumeAll(t, cfg, 1)
	if err := seen(); !errors.Is(err, consumer.ErrAttemptTimeout) {
		t.Errorf("the late attempt's error is %v, want ErrAttemptTimeout", err)
	}
}

// lastRetried makes cfg.Retryable record each error it is asked about (and
// retry them all); the func it returns gives the last one.
func lastRetried(cfg *consumer.Config) func() error {
	var mu sync.Mutex
	var last error
	cfg.Retryable = func(err error) bool {
		mu.Lock()
		defer mu.Unlock()
		last = err
		return true
	}
	return func() error {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

// TestMalformedHeaders: messages without headers, with a binary ce_id, a
// null correlation id, an empty header name or a malformed traceparent are
// handled like any other; a valid traceparent continues its trace.
func TestMalformedHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	h := func(k string, v []byte) sarama.RecordHeader { return sarama.RecordHeader{Key: []byte(k), Value: v} }
	records := []*sarama.ProducerMessage{
		{Value: sarama.StringEncoder("no-headers")},
		{Value: sarama.StringEncoder("binary-id"), Headers: []sarama.RecordHeader{h("ce_id", []byte{0xff, 0x00}), h("ce_correlationid", nil)}},
		{Value: sarama.StringEncoder("empty-name"), Headers: []sarama.RecordHeader{h("", []byte("x")), h("ce_id", []byte(""))}},
		{Value: sarama.StringEncoder("bad-trace"), Headers: []sarama.RecordHeader{h("traceparent", []byte("00-zz-not-a-trace"))}},
		{Value: sarama.StringEncoder("good-trace"), Headers: []sarama.RecordHeader{
			h("ce_id", []byte("id-1")), h("ce_correlationid", []byte("corr-1")),
			h("traceparent", []byte("00-"+traceID+"-00f067aa0ba902b7-01")),
		}},
		{Value: nil, Key: sarama.StringEncoder("tombstone")},
	}
	f.produce(t, f.topic, records...)
	type seenMsg struct {
		id, corr string
		span     trace.SpanContext
		headers  int
		value    []byte
	}
	var mu sync.Mutex
	seen := map[int64]seenMsg{}
	f.consumeAll(t, f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		seen[m.Offset] = seenMsg{m.ID, m.CorrelationID, trace.SpanContextFromContext(ctx), len(m.Headers), m.Value}
		return nil
	})), int64(len(records)))

	mu.Lock()
	defer mu.Unlock()
	if got := seen[0]; got.id != "" || got.headers != 0 || got.span.IsValid() {
		t.Errorf("no headers: %+v", got)
	}
	if got := seen[1]; got.id != "\xff\x00" || got.corr != "" {
		t.Errorf("binary id: id %q corr %q", got.id, got.corr)
	}
	if got := seen[3]; got.span.IsValid() {
		t.Errorf("a malformed traceparent gave span %v, want none", got.span)
	}
	if got := seen[4]; got.id != "id-1" || got.corr != "corr-1" || got.span.TraceID().String() != traceID || !got.span.IsRemote() {
		t.Errorf("good trace: id %q corr %q span %v, want the producer's trace as remote parent", got.id, got.corr, got.span)
	}
	if got := seen[5]; got.value != nil && !bytes.Equal(got.value, []byte{}) {
		t.Errorf("tombstone value %q", got.value)
	}
	if n := len(f.readAll(t, f.dlq)); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}

func TestMessageFields(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	rec := awkward()
	f.produce(t, f.topic, record("k0", "first"), rec)
	var got *consumer.Message
	var mu sync.Mutex
	f.consumeAll(t, f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if m.Offset == 1 {
			got = m
		}
		return nil
	})), 2)
	mu.Lock()
	defer mu.Unlock()
	if got == nil {
		t.Fatal("offset 1 never handled")
	}
	key, _ := rec.Key.Encode()
	value, _ := rec.Value.Encode()
	if got.Topic != f.topic || got.Partition != 0 || got.Offset != 1 || !bytes.Equal(got.Key, key) || !bytes.Equal(got.Value, value) ||
		got.Attempt != 1 || got.ID != "0195f3c4-0000-7000-8000-000000000001" || got.CorrelationID != "tx_xyz" ||
		got.OriginalTopic != f.topic || got.RetryRound != 0 ||
		time.Since(got.Timestamp) > time.Minute {
		t.Errorf("message %+v", got)
	}
	if len(got.Headers) != 5 || string(got.Headers[2].Key) != "bin" || string(got.Headers[4].Value) != "again" {
		var names []string
		for _, h := range got.Headers {
			names = append(names, string(h.Key))
		}
		t.Errorf("headers %q, want the record's five in order", names)
	}
	if v, ok := got.Headers.Lookup("bin"); !ok || string(v) != "again" {
		t.Errorf("Lookup(bin) = %q, %t; want the last one, again", v, ok)
	}
	if v, ok := got.Headers.Lookup("null"); !ok || v != nil {
		t.Errorf("Lookup(null) = %q, %t; want a nil value that is there", v, ok)
	}
	if _, ok := got.Headers.Lookup("missing"); ok {
		t.Error("Lookup(missing) found something")
	}
}

// TestMessageHeaders checks that a message's headers are courier's own
// record.Header values, equal to the headers produced: names, values and
// order, a repeated name, and a nil value told from an empty one.
func TestMessageHeaders(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	want := []courierrecord.Header{
		{Key: []byte("ce_id"), Value: []byte("h-1")},
		{Key: []byte("dup"), Value: []byte("1")},
		{Key: []byte("null"), Value: nil},
		{Key: []byte("empty"), Value: []byte{}},
		{Key: []byte("dup"), Value: []byte("2")},
		{Key: []byte("bin"), Value: []byte{0xff, 0x00}},
	}
	produced := make([]sarama.RecordHeader, len(want))
	for i, h := range want {
		produced[i] = sarama.RecordHeader(h)
	}
	f.produce(t, f.topic, &sarama.ProducerMessage{Value: sarama.StringEncoder("v"), Headers: produced})
	var (
		mu  sync.Mutex
		got []courierrecord.Header
	)
	f.consumeAll(t, f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		for _, h := range m.Headers {
			var own *courierrecord.Header = h // courier's type, not Sarama's
			got = append(got, *own)
		}
		return nil
	})), 1)
	mu.Lock()
	defer mu.Unlock()
	same := func(a, b []byte) bool { return bytes.Equal(a, b) && (a == nil) == (b == nil) }
	if !slices.EqualFunc(got, want, func(g, w courierrecord.Header) bool { return same(g.Key, w.Key) && same(g.Value, w.Value) }) {
		show := func(hs []courierrecord.Header) (out []string) {
			for _, h := range hs {
				v := fmt.Sprintf("%q", h.Value)
				if h.Value == nil {
					v = "null"
				}
				out = append(out, fmt.Sprintf("%q=%s", h.Key, v))
			}
			return out
		}
		t.Errorf("headers %s, want %s", show(got), show(want))
	}
}
