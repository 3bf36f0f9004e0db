package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
)

// awkward is a record whose key, value and headers need every byte-exact
// path of the envelope: a binary key, compact JSON, a binary header value, a
// null header value and a repeated name.
func awkward() *sarama.ProducerMessage {
	return &sarama.ProducerMessage{
		Key:   sarama.ByteEncoder([]byte{0xff, 't', 'x'}),
		Value: sarama.StringEncoder(`{"payout_id":"p-1","amount_cents":1999}`),
		Headers: []sarama.RecordHeader{
			{Key: []byte("ce_id"), Value: []byte("0195f3c4-0000-7000-8000-000000000001")},
			{Key: []byte("ce_correlationid"), Value: []byte("tx_xyz")},
			{Key: []byte("bin"), Value: []byte{0x00, 0xfe}},
			{Key: []byte("null"), Value: nil},
			{Key: []byte("bin"), Value: []byte("again")},
		},
	}
}

// onlyDeadLetter reads the one dead letter of the fixture's topic and
// checks that its envelope restores, byte for byte, the record awkward()
// made, read from partition 0 offset 0.
func (f *fixture) onlyDeadLetter(t *testing.T) (*sarama.ConsumerMessage, dlq.Envelope) {
	t.Helper()
	letters := f.readAll(t, f.dlq)
	if len(letters) != 1 {
		t.Fatalf("%d dead letters, want 1", len(letters))
	}
	rec := letters[0]
	env, err := dlq.Read(rec.Key, rec.Value, dlqHeaders(rec))
	if err != nil {
		t.Fatal(err)
	}
	o, err := env.Original()
	if err != nil {
		t.Fatal(err)
	}
	checkOriginal(t, o, f.topic)
	return rec, env
}

// checkOriginal fails unless o holds exactly the record awkward() made,
// read back from partition 0 offset 0 of topic.
func checkOriginal(t *testing.T, o dlq.Original, topic string) {
	t.Helper()
	want := awkward()
	key, _ := want.Key.Encode()
	value, _ := want.Value.Encode()
	if o.Topic != topic || o.Partition != 0 || o.Offset != 0 {
		t.Errorf("original at %s/%d@%d, want %s/0@0", o.Topic, o.Partition, o.Offset, topic)
	}
	if !bytes.Equal(o.Key, key) || !bytes.Equal(o.Value, value) {
		t.Errorf("original key %q value %q, want %q %q", o.Key, o.Value, key, value)
	}
	if len(o.Headers) != len(want.Headers) {
		t.Fatalf("original has %d headers, want %d", len(o.Headers), len(want.Headers))
	}
	for i, h := range want.Headers {
		got := o.Headers[i]
		if !bytes.Equal(got.Key, h.Key) || !bytes.Equal(got.Value, h.Value) || (got.Value == nil) != (h.Value == nil) {
			t.Errorf("original header %d = %q:%q, want %q:%q", i, got.Key, got.Value, h.Key, h.Value)
		}
	}
}

// requestLog records, in the broker's order, the produce requests to one
// topic and the offset commits of partition 0 of another.
type requestLog struct {
	mu     sync.Mutex
	events []string
}

func (l *requestLog) add(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *requestLog) index(e string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Index(l.events, e)
}

func (f *fixture) logRequests(t *testing.T) *requestLog {
	t.Helper()
	l := &requestLog{}
	commits := f.watchCommits(t)
	f.k.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		for _, topic := range req.(*kmsg.ProduceRequest).Topics {
			if topic.Topic == f.dlq {
				l.add("dlq produce")
			}
		}
		return nil, nil, false
	})
	commits.onCommit = func(offset int64) { l.add(fmt.Sprint("commit ", offset)) }
	return l
}

func TestAlwaysFailingHandlerDeadLetters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess())
	requests := f.logRequests(t)
	f.produce(t, f.topic, awkward())

	var attempts counter
	var hooked []consumer.DeadLetter
	var mu sync.Mutex
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		attempts.add(m.ID)
		return errors.New("psp timeout after 30s")
	}))
	cfg.OnDeadLetter = func(_ context.Context, dl consumer.DeadLetter) {
		mu.Lock()
		defer mu.Unlock()
		hooked = append(hooked, dl)
	}
	start := time.Now()
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "offset 1 committed", func() bool { return f.committed(t, 0) == 1 })
	stop()

	if n := attempts.get("0195f3c4-0000-7000-8000-000000000001"); n != consumer.DefaultMaxAttempts {
		t.Errorf("%d attempts, want %d", n, consumer.DefaultMaxAttempts)
	}
	rec, env := f.onlyDeadLetter(t)
	if key, _ := awkward().Key.Encode(); !bytes.Equal(rec.Key, key) {
		t.Errorf("dead letter key %q, want the original %q", rec.Key, key)
	}
	if env.Error != "psp timeout after 30s" || env.ErrorKind != dlq.KindRetriesExhausted || env.Attempts != consumer.DefaultMaxAttempts ||
		env.ConsumerGroup != f.group || env.CorrelationID != "tx_xyz" {
		t.Errorf("envelope error %q kind %s retries %d group %q correlation %q", env.Error, env.ErrorKind, env.Attempts, env.ConsumerGroup, env.CorrelationID)
	}
	if env.FirstFailedAt.Before(start.Truncate(time.Millisecond)) || env.FailedAt.Before(env.FirstFailedAt) {
		t.Errorf("first failed at %v, failed at %v; want start (%v) ≤ first ≤ last", env.FirstFailedAt, env.FailedAt, start)
	}
	headers := map[string]string{}
	for _, h := range rec.Headers {
		headers[string(h.Key)] = string(h.Value)
	}
	for name, want := range map[string]string{
		dlq.HeaderOriginalTopic: f.topic, dlq.HeaderOriginalPartition: "0", dlq.HeaderOriginalOffset: "0",
		dlq.HeaderRetryCount: strconv.Itoa(consumer.DefaultMaxAttempts), dlq.HeaderConsumerGroup: f.group, dlq.HeaderError: "psp timeout after 30s",
		dlq.HeaderFormat: dlq.FormatEnvelope,
	} {
		if headers[name] != want {
			t.Errorf("header %s = %q, want %q", name, headers[name], want)
		}
	}

	produced, committed := requests.index("dlq produce"), requests.index("commit 1")
	if produced < 0 || committed < produced {
		t.Errorf("requests %q: want the dead-letter produce before the commit of offset 1", requests.events)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hooked) != 1 || hooked[0].Written.Topic != f.dlq || hooked[0].Message.Offset != 0 || hooked[0].Err == nil {
		t.Errorf("OnDeadLetter got %+v, want one call for offset 0 on %s", hooked, f.dlq)
	}
}

func dlqHeaders(m *sarama.ConsumerMessage) []dlq.Header {
	out := make([]dlq.Header, len(m.Headers))
	for i, h := range m.Headers {
		out[i] = dlq.Header{Key: h.Key, Value: h.Value}
	}
	return out
}

func TestRawModeDeadLetters(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.produce(t, f.topic, awkward())
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		return consumer.Permanent(errors.New("schema mismatch"))
	}))
	cfg.DeadLetterRaw = true
	run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "offset 1 committed", func() bool { return f.committed(t, 0) == 1 })

	rec, env := f.onlyDeadLetter(t)
	if value, _ := awkward().Value.Encode(); !bytes.Equal(rec.Value, value) {
		t.Errorf("raw dead letter value %q, want the original %q", rec.Value, value)
	}
	if env.ErrorKind != dlq.KindPermanent || env.Attempts != 1 {
		t.Errorf("kind %s, retry count %d; want permanent after 1 attempt", env.ErrorKind, env.Attempts)
	}
}

// TestReplayedMessageFailingAgainKeepsItsReplayCount: a message replayed
// from a dead-letter topic carries replay_count; when it fails again, its
// new envelope says how often it was replayed, so replay can refuse loops.
func TestReplayedMessageFailingAgainKeepsItsReplayCount(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	replayed := awkward()
	replayed.Headers = append(replayed.Headers, sarama.RecordHeader{Key: []byte(dlq.ReplayCountHeader), Value: []byte("2")})
	f.produce(t, f.topic, replayed)
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		return consumer.Permanent(errors.New("still invalid"))
	}))
	run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "offset 1 committed", func() bool { return f.committed(t, 0) == 1 })

	recs := f.readAll(t, f.dlq)
	if len(recs) != 1 {
		t.Fatalf("%d dead letters, want 1", len(recs))
	}
	rec := recs[0]
	env, err := dlq.Read(rec.Key, rec.Value, dlqHeaders(rec))
	if err != nil {
		t.Fatal(err)
	}
	if env.ReplayCount != 2 {
		t.Errorf("envelope replay_count %d, want the message's 2", env.ReplayCount)
	}
	var counts []string
	for _, h := range rec.Headers {
		if string(h.Key) == dlq.HeaderReplayCount {
			counts = append(counts, string(h.Value))
		}
	}
	if len(counts) != 1 || counts[0] != "2" {
		t.Errorf("%s headers %q, want one, of 2", dlq.HeaderReplayCount, counts)
	}
}

// TestDeadLetterTopicUnavailable: while the broker refuses every write to
// the dead-letter topic, no offset is committed past the failed message,
// and the partition takes no new message; once writes succeed again, the
// dead letter is written and everything after it handled and committed.
func TestDeadLetterTopicUnavailable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess())
	commits := f.watchCommits(t)
	f.produce(t, f.topic, record("a", "poison"), record("b", "fine-1"), record("c", "fine-2"))

	var handled counter
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if string(m.Value) == "poison" {
			return consumer.Permanent(errors.New("cannot parse"))
		}
		handled.add(string(m.Value))
		return nil
	}))
	fault := f.k.Cluster.Fault(kfake.Fault{
		Keys:  []kmsg.Key{kmsg.Produce},
		Topic: f.dlq,
		Err:   kerr.NotEnoughReplicas,
		Count: -1,
	})
	run(t, newConsumer(t, cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Sarama sends the write at least 51 times (its idempotent producer
	// retries 50 times, see Config.WithoutIdempotentWrites) before the
	// consumer sees it fail.
	if err := fault.Wait(ctx, 51+10); err != nil {
		t.Fatalf("waiting for 61 refused dead-letter writes: %v", err)
	}
	// fine-1 and fine-2 may have been handled while the first write was in
	// flight; a message produced now, with the write failing, must wait.
	f.produce(t, f.topic, record("d", "fine-3"))
	if err := fault.Wait(ctx, fault.Hits()+10); err != nil {
		t.Fatalf("waiting for 10 more refused dead-letter writes: %v", err)
	}
	if got := commits.list(); len(got) != 0 {
		t.Errorf("offsets %v committed while the dead letter could not be written, want none", got)
	}
	if n := handled.get("fine-3"); n != 0 {
		t.Errorf("fine-3 handled %d times while the dead-letter write was failing, want the partition to wait", n)
	}

	fault.Remove()
	testkit.WaitFor(t, 10*time.Second, "offset 4 committed", func() bool { return f.committed(t, 0) == 4 })
	for _, v := range []string{"fine-1", "fine-2", "fine-3"} {
		if handled.get(v) == 0 {
			t.Errorf("%s never handled (handled %v)", v, handled.n)
		}
	}
	letters := f.readAll(t, f.dlq)
	if len(letters) == 0 {
		t.Fatal("no dead letter written after the fault cleared")
	}
	for _, rec := range letters {
		env, err := dlq.Read(rec.Key, rec.Value, dlqHeaders(rec))
		if err != nil {
			t.Fatal(err)
		}
		if env.OriginalOffset != 0 || env.ErrorKind != dlq.KindPermanent {
			t.Errorf("dead letter of offset %d kind %s, want offset 0 permanent", env.OriginalOffset, env.ErrorKind)
		}
	}
	if got := commits.list(); slices.ContainsFunc(got, func(o int64) bool { return o < 1 }) {
		t.Errorf("commits %v, want none below 1 (nothing before the dead letter was written)", got)
	}
}

// holdDeadLetters makes the in-process broker hold every produce request to
// the fixture's dead-letter topic until the returned release is called:
// defer it, so that a failing test releases the writes before it stops its
// consumer. held counts the requests that arrived.
func (f *fixture) holdDeadLetters(t *testing.T) (held *atomic.Int32, release func()) {
	t.Helper()
	held = &atomic.Int32{}
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	f.k.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		for _, topic := range req.(*kmsg.ProduceRequest).Topics {
			if topic.Topic == f.dlq {
				held.Add(1)
				f.k.Cluster.SleepControl(func() { <-released })
				break
			}
		}
		return nil, nil, false // then the broker handles it
	})
	return held, release
}

// TestSlowDeadLetterWriteOverlapsHandling: while the broker holds the
// dead-letter write of the first message, the partition handles the
// messages after it but marks and commits no offset past the unwritten one,
// and OnDeadLetter waits for the write; once it goes through, every offset
// is committed.
func TestSlowDeadLetterWriteOverlapsHandling(t *testing.T) {
	t.Parallel()
	const later = 5
	f := newFixture(t, 1, testkit.InProcess())
	commits := f.watchCommits(t)
	msgs := []*sarama.ProducerMessage{record("a", "poison")}
	for i := range later {
		msgs = append(msgs, record(fmt.Sprint("k", i), fmt.Sprint("fine-", i)))
	}
	f.produce(t, f.topic, msgs...)
	held, release := f.holdDeadLetters(t)
	defer release()

	var handled counter
	var hooked atomic.Int32
	metrics := &recorder{}
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if string(m.Value) == "poison" {
			return consumer.Permanent(errors.New("cannot parse"))
		}
		handled.add(string(m.Value))
		return nil
	}))
	cfg.OnDeadLetter = func(context.Context, consumer.DeadLetter) { hooked.Add(1) }
	cfg.Hooks = []consumer.Hook{metrics}
	run(t, newConsumer(t, cfg))

	testkit.WaitFor(t, 10*time.Second, "the dead-letter write at the broker", func() bool { return held.Load() > 0 })
	testkit.WaitFor(t, 10*time.Second, "the later messages handled while the write is held", func() bool { return handled.len() == later })
	if n := metrics.marks(); n != 0 {
		t.Errorf("%d offsets marked while the dead letter of offset 0 is unwritten, want none", n)
	}
	if got := commits.list(); len(got) != 0 {
		t.Errorf("commits %v while the dead letter of offset 0 is unwritten, want none", got)
	}
	if n, dl := hooked.Load(), metrics.count(consumer.OutcomeDeadLettered); n != 0 || dl != 0 {
		t.Errorf("OnDeadLetter called %d times, %d dead letters counted, before the write went through; want none", n, dl)
	}

	release()
	testkit.WaitFor(t, 10*time.Second, "every offset committed", func() bool { return f.committed(t, 0) == later+1 })
	if got := commits.list(); slices.ContainsFunc(got, func(o int64) bool { return o != later+1 }) {
		t.Errorf("commits %v, want only %d: nothing settles past offset 0 before its dead letter", got, later+1)
	}
	if n := hooked.Load(); n != 1 {
		t.Errorf("OnDeadLetter called %d times, want 1", n)
	}
	if n := len(f.readAll(t, f.dlq)); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
}

// TestDeadLettersInFlightBound: with MaxWritesInFlight 2 and the
// broker holding every dead-letter write, the partition starts two writes,
// handles the third failing message and then waits for a write to end
// before it takes another message. Once the writes go through, everything
// settles, and no handler call ever saw more than 2 writes unfinished.
func TestDeadLettersInFlightBound(t *testing.T) {
	t.Parallel()
	const bound, poisons = 2, 6
	f := newFixture(t, 1, testkit.InProcess())
	var msgs []*sarama.ProducerMessage
	for i := range poisons {
		msgs = append(msgs, record(fmt.Sprint("k", i), fmt.Sprint("poison-", i)))
	}
	msgs = append(msgs, record("k", "fine"))
	f.produce(t, f.topic, msgs...)
	held, release := f.holdDeadLetters(t)
	defer release()

	var (
		mu                  sync.Mutex
		calls, failed, peak int
		written             int
	)
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		peak = max(peak, failed-written) // writes started and not yet ended
		if strings.HasPrefix(string(m.Value), "poison") {
			failed++
			return consumer.Permanent(errors.New("cannot parse"))
		}
		return nil
	}))
	cfg.OnDeadLetter = func(context.Context, consumer.DeadLetter) {
		mu.Lock()
		defer mu.Unlock()
		written++
	}
	cfg.MaxWritesInFlight = bound
	run(t, newConsumer(t, cfg))

	testkit.WaitFor(t, 10*time.Second, "the third failing message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls >= bound+1
	})
	testkit.WaitFor(t, 10*time.Second, "the dead-letter writes at the broker", func() bool { return held.Load() > 0 })
	mu.Lock()
	if calls != bound+1 || peak > bound {
		t.Errorf("%d messages handled (peak %d writes in flight) while %d writes are held, want %d: the partition must wait at the bound",
			calls, peak, bound, bound+1)
	}
	mu.Unlock()

	release()
	testkit.WaitFor(t, 10*time.Second, "every offset committed", func() bool { return f.committed(t, 0) == poisons+1 })
	mu.Lock()
	defer mu.Unlock()
	if calls != poisons+1 || written != poisons || peak > bound {
		t.Errorf("%d handler calls, %d dead letters, peak %d writes in flight; want %d, %d, at most %d",
			calls, written, peak, poisons+1, poisons, bound)
	}
}

// TestDeadLetterWriteFailingAtShutdown: a dead-letter write still failing
// when the consumer stops is given up, and its offset stays uncommitted
// even though the message after it was handled; the next run writes it.
func TestDeadLetterWriteFailingAtShutdown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess())
	f.produce(t, f.topic, record("a", "poison"), record("b", "fine"))
	var handled counter
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if string(m.Value) == "poison" {
			return consumer.Permanent(errors.New("cannot parse"))
		}
		handled.add(string(m.Value))
		return nil
	}))
	fault := f.k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: f.dlq, Err: kerr.NotEnoughReplicas, Count: -1})
	stop := run(t, newConsumer(t, cfg))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := fault.Wait(ctx, 10); err != nil {
		t.Fatalf("waiting for 10 refused dead-letter writes: %v", err)
	}
	stop()
	if got := f.committed(t, 0); got > 0 {
		t.Errorf("committed %d after stopping with the dead letter of offset 0 unwritten, want nothing", got)
	}

	fault.Remove()
	run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "offset 2 committed", func() bool { return f.committed(t, 0) == 2 })
	if n := len(f.readAll(t, f.dlq)); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
	if handled.get("fine") == 0 {
		t.Error("fine never handled")
	}
}
