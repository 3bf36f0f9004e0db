package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/migrations"
)

// redisDedupe is a Redis store on the test's own key prefix, scoped to the
// fixture's group.
func (f *fixture) redisDedupe(t *testing.T, client redis.UniversalClient, prefix string) *dedupe.Redis {
	t.Helper()
	store, err := dedupe.NewRedis(client, dedupe.RedisConfig{Scope: f.group, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// dedupeMetrics counts what the consumer reports about deduplication.
type dedupeMetrics struct {
	hits, errors, failedOpen atomic.Int64
}

func (m *dedupeMetrics) Hits(n int)                            { m.hits.Add(int64(n)) }
func (m *dedupeMetrics) Error(dedupe.Op)                       { m.errors.Add(1) }
func (m *dedupeMetrics) FailedOpen(n int)                      { m.failedOpen.Add(int64(n)) }
func (m *dedupeMetrics) Latency(dedupe.Op, int, time.Duration) {}

// withID is a record with the given ce_id.
func withID(key, value, id string) *sarama.ProducerMessage {
	m := record(key, value)
	m.Headers[0].Value = []byte(id)
	return m
}

func TestDedupeHandlesTheSameMessageOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	r := testkit.NewRedis(t)
	var seen calls
	var metrics dedupeMetrics
	cfg := f.config(t, failingOnMain(&seen, "flaky")) // handled from its retry tier
	f.withRetry(t, &cfg, 10*time.Millisecond)
	cfg.Dedupe = consumer.DedupeConfig{Store: f.redisDedupe(t, r.Client, r.Prefix), Hooks: []dedupe.Hook{&metrics}, Lease: 10 * time.Second}
	// The same event three times: published, published again (a producer
	// retry), and replayed from a dead-letter topic (with a replay header).
	replayed := withID("k", "replay", "event-1")
	replayed.Headers = append(replayed.Headers, sarama.RecordHeader{Key: []byte("replay_count"), Value: []byte("1")})
	f.produce(t, f.topic, withID("k", "first", "event-1"), withID("k", "duplicate", "event-1"), replayed,
		withID("k", "flaky", "event-2"), withID("k", "other", "event-3"))
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "every offset committed", func() bool { return f.committed(t, 0) == 5 })
	testkit.WaitFor(t, 20*time.Second, "the flaky event handled from its tier", func() bool { return seen.count("flaky") == 2 })
	stop()

	// Redelivery after a crash: the group's offsets are gone, so a new
	// consumer reads everything again.
	admin, err := sarama.NewClusterAdmin(f.k.Brokers, f.k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if err := admin.DeleteConsumerGroup(f.group); err != nil {
		t.Fatal(err)
	}
	stop = run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "every offset committed again", func() bool { return f.committed(t, 0) == 5 })
	stop()

	for value, want := range map[string]int{"first": 1, "duplicate": 0, "replay": 0, "flaky": 2, "other": 1} {
		if n := seen.count(value); n != want {
			t.Errorf("%q handled %d times, want %d", value, n, want)
		}
	}
	// 2 copies of event-1 the first time; 5 records the second time, and
	// the retry record of event-2 (its tier is read again too).
	if n := metrics.hits.Load(); n != 2+5+1 {
		t.Errorf("%d dedupe hits, want 8", n)
	}
}

// signalingStore passes calls to a Store and reports a Busy answer.
type signalingStore struct {
	dedupe.Store
	busy chan struct{}
	once sync.Once
}

func (s *signalingStore) Claim(ctx context.Context, owner string, ids []string, lease time.Duration) ([]dedupe.Status, error) {
	statuses, err := s.Store.Claim(ctx, owner, ids, lease)
	for _, st := range statuses {
		if st == dedupe.Busy {
			s.once.Do(func() { close(s.busy) })
		}
	}
	return statuses, err
}

func TestDedupeRacingConsumersHandleOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	r := testkit.NewRedis(t)
	store := &signalingStore{Store: f.redisDedupe(t, r.Client, r.Prefix), busy: make(chan struct{})}
	var handled atomic.Int32
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		handled.Add(1)
		// Hold the claim until the other copy has been found busy.
		select {
		case <-store.busy:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	cfg.Dedupe = consumer.DedupeConfig{Store: store, BusyWait: 20 * time.Millisecond, Lease: 10 * time.Second}
	// The same event on both partitions, for two members of the group.
	f.produceTo(t, 0, withID("a", "copy-0", "event-1"))
	f.produceTo(t, 1, withID("b", "copy-1", "event-1"))
	stopA := run(t, newConsumer(t, cfg))
	stopB := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "both copies committed", func() bool { return f.committed(t, 0) == 1 && f.committed(t, 1) == 1 })
	stopA()
	stopB()
	if n := handled.Load(); n != 1 {
		t.Errorf("event handled %d times by the two consumers, want 1", n)
	}
}

func TestDedupeRedisStoppedMidRun(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	server := testkit.StartRedisServer(t)
	client := server.Client()
	defer client.Close()
	const total = 600
	var (
		mu      sync.Mutex
		handled = map[string]int{}
	)
	var metrics dedupeMetrics
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		handled[m.ID]++
		return nil
	}))
	cfg.Dedupe = consumer.DedupeConfig{Store: f.redisDedupe(t, client, "courier:test:"), Hooks: []dedupe.Hook{&metrics}, Lease: 10 * time.Second}
	cfg.TakeBatch = 16
	produce := func(from, to int) {
		var msgs []*sarama.ProducerMessage
		for i := from; i < to; i++ {
			msgs = append(msgs, withID("key-"+strconv.Itoa(i%11), strconv.Itoa(i), fmt.Sprintf("event-%d", i)))
		}
		f.produce(t, f.topic, msgs...)
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(handled)
	}
	produce(0, total/2)
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "a first share handled", func() bool { return count() >= 50 })
	server.Stop(t)
	// Every event again (a producer that retried everything), and new ones.
	produce(0, total)
	testkit.WaitFor(t, 20*time.Second, "the consumer to meet the outage", func() bool { return metrics.errors.Load() >= 3 })
	before := count()
	server.Start(t)
	testkit.WaitFor(t, 30*time.Second, "every event handled once Redis is back", func() bool { return count() == total })
	testkit.WaitFor(t, 30*time.Second, "every offset committed", func() bool {
		return f.committed(t, 0)+f.committed(t, 1)+f.committed(t, 2) == total/2+total
	})
	stop()

	if before == total {
		t.Error("every message was handled during the outage: the consumer did not wait for Redis")
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range handled {
		if n != 1 {
			t.Errorf("%s handled %d times", id, n)
		}
	}
	if n := metrics.failedOpen.Load(); n != 0 {
		t.Errorf("%d messages failed open under the default policy", n)
	}
}

func TestDedupeFailOpen(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	defer down.Close()
	var metrics dedupeMetrics
	var handled atomic.Int32
	cfg := f.config(t, counting(&handled))
	cfg.Dedupe = consumer.DedupeConfig{Store: f.redisDedupe(t, down, "courier:test:"), FailOpen: true, Hooks: []dedupe.Hook{&metrics}, Lease: 10 * time.Second}
	f.produce(t, f.topic, record("k", "1"), record("k", "2"), record("k", "3"))
	f.consumeAll(t, cfg, 3)
	if handled.Load() != 3 || metrics.failedOpen.Load() != 3 || metrics.errors.Load() == 0 {
		t.Errorf("handled %d, failed open %d, errors %d; want 3, 3 and some", handled.Load(), metrics.failedOpen.Load(), metrics.errors.Load())
	}
}

func TestInboxGivesEffectivelyOnceResults(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	db := inboxDB(t)
	if _, err := db.Pool.Exec(context.Background(), "CREATE TABLE "+db.Schema+".payouts (event_id text, amount int)"); err != nil {
		t.Fatal(err)
	}
	inbox, err := dedupe.NewInbox(db.Pool, dedupe.InboxConfig{Schema: db.Schema, Scope: f.group})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		n := calls.Add(1)
		return pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			first, err := inbox.Record(ctx, tx, m.ID)
			if err != nil || !first {
				return err // processed already: nothing to do
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+db.Schema+".payouts VALUES ($1, 100)", m.ID); err != nil {
				return err
			}
			if n == 1 {
				return errors.New("the PSP failed after the insert: the transaction rolls back, id and all")
			}
			return nil
		})
	}))
	cfg.Dedupe = consumer.DedupeConfig{Store: inbox}
	f.produce(t, f.topic, withID("k", "payout", "event-1"), withID("k", "again", "event-1"))
	f.consumeAll(t, cfg, 2)

	var rows int
	if err := db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM "+db.Schema+".payouts").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Errorf("%d payouts written, want 1", rows)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("handler called %d times, want 2 (a rolled-back attempt and its retry; the duplicate skipped by the inbox)", n)
	}
}

// blockingDone is a Store whose Done of the id "id-blocked" closes
// entered, then waits until release is closed.
type blockingDone struct {
	dedupe.Store
	release, entered chan struct{}
	once             sync.Once
}

func (s *blockingDone) Done(ctx context.Context, owner string, ids []string) error {
	if slices.Contains(ids, "id-blocked") {
		s.once.Do(func() { close(s.entered) })
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.Done(ctx, owner, ids)
}

func TestDedupeMarksBeforeCommitting(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	r := testkit.NewRedis(t)
	store := &blockingDone{Store: f.redisDedupe(t, r.Client, r.Prefix), release: make(chan struct{}), entered: make(chan struct{})}
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error { return nil }))
	cfg.Dedupe = consumer.DedupeConfig{Store: store, Lease: 10 * time.Second}
	f.produceTo(t, 0, record("k", "blocked"))
	stop := run(t, newConsumer(t, cfg))
	select {
	case <-store.entered: // partition 0's message is handled; its mark is held
	case <-time.After(10 * time.Second):
		t.Fatal("the blocked message's mark was never written")
	}
	// A commit of partition 1 after that shows a commit round went by while
	// partition 0's mark was held; a commit of partition 0 now would let a
	// crash lose the mark and handle the message again.
	f.produceTo(t, 1, record("k", "free"))
	testkit.WaitFor(t, 10*time.Second, "partition 1 committed", func() bool { return f.committed(t, 1) == 1 })
	if got := f.committed(t, 0); got != -1 {
		t.Fatalf("partition 0 committed %d before its dedupe mark was stored", got)
	}
	close(store.release)
	testkit.WaitFor(t, 10*time.Second, "partition 0 committed once marked", func() bool { return f.committed(t, 0) == 1 })
	stop()
	statuses, err := store.Claim(context.Background(), "another", []string{"id-blocked", "id-free"}, time.Second)
	if err != nil || statuses[0] != dedupe.Processed || statuses[1] != dedupe.Processed {
		t.Errorf("after the commits the ids are %v (%v), want processed", statuses, err)
	}
}

// lostReply is a Store whose first Claim reaches the store but fails, as
// when the reply is lost on the way back.
type lostReply struct {
	dedupe.Store
	once sync.Once
}

func (s *lostReply) Claim(ctx context.Context, owner string, ids []string, lease time.Duration) ([]dedupe.Status, error) {
	statuses, err := s.Store.Claim(ctx, owner, ids, lease)
	lost := false
	s.once.Do(func() { lost = true })
	if lost {
		return nil, errors.New("i/o timeout (the claims were made)")
	}
	return statuses, err
}

func TestDedupeClaimWhoseReplyWasLost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	r := testkit.NewRedis(t)
	var handled atomic.Int32
	cfg := f.config(t, counting(&handled))
	const lease = time.Minute
	cfg.Dedupe = consumer.DedupeConfig{Store: &lostReply{Store: f.redisDedupe(t, r.Client, r.Prefix)}, Lease: lease}
	f.produce(t, f.topic, record("k", "1"), record("k", "2"))
	stop := run(t, newConsumer(t, cfg))
	// Not waiting out the lost call's claims: they are released before the
	// next try.
	testkit.WaitFor(t, lease/2, "both messages handled", func() bool { return handled.Load() == 2 })
	stop()
}

// firstDoneHangs is a Store whose first Done waits until its context ends.
type firstDoneHangs struct {
	dedupe.Store
	once    sync.Once
	waiting chan struct{}
}

func (s *firstDoneHangs) Done(ctx context.Context, owner string, ids []string) error {
	first := false
	s.once.Do(func() { first = true })
	if first {
		close(s.waiting)
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Done(ctx, owner, ids)
}

func TestDedupeMarksLeftAtShutdownAreStoredOnTheWayOut(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	r := testkit.NewRedis(t)
	store := &firstDoneHangs{Store: f.redisDedupe(t, r.Client, r.Prefix), waiting: make(chan struct{})}
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error { return nil }))
	cfg.Dedupe = consumer.DedupeConfig{Store: store, Lease: 10 * time.Second}
	cfg.ShutdownTimeout = 100 * time.Millisecond
	f.produce(t, f.topic, record("k", "1"))
	stop := run(t, newConsumer(t, cfg))
	select {
	case <-store.waiting:
	case <-time.After(20 * time.Second):
		t.Fatal("the handled message's mark was never written")
	}
	stop() // the mark's write runs past ShutdownTimeout
	if got := f.committed(t, 0); got != 1 {
		t.Errorf("committed %d, want 1: the mark was stored on the way out, then the offset", got)
	}
	statuses, err := store.Claim(context.Background(), "another", []string{"id-1"}, time.Second)
	if err != nil || statuses[0] != dedupe.Processed {
		t.Errorf("the handled message's id is %v (%v), want processed", statuses, err)
	}
}

// TestDedupeWithKeyedWorkers: keyed workers of one partition claim ids at
// the same time (a copy found busy is claimed again by its worker); each
// event is handled once, and the race detector finds nothing.
func TestDedupeWithKeyedWorkers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	r := testkit.NewRedis(t)
	const events = 100
	var (
		mu      sync.Mutex
		handled = map[string]int{}
	)
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		handled[m.ID]++
		return nil
	}))
	cfg.Workers = 4
	cfg.Dedupe = consumer.DedupeConfig{Store: f.redisDedupe(t, r.Client, r.Prefix), BusyWait: 5 * time.Millisecond}
	var msgs []*sarama.ProducerMessage
	for i := range events { // each event twice, under two keys: two workers
		id := fmt.Sprintf("event-%d", i)
		msgs = append(msgs, withID(fmt.Sprintf("a-%d", i), "v", id), withID(fmt.Sprintf("b-%d", i), "v", id))
	}
	f.produce(t, f.topic, msgs...)
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "every copy committed", func() bool { return f.committed(t, 0) == 2*events })
	stop()
	mu.Lock()
	defer mu.Unlock()
	for i := range events {
		if n := handled[fmt.Sprintf("event-%d", i)]; n != 1 {
			t.Errorf("event-%d handled %d times, want 1", i, n)
		}
	}
}

// inboxDB is the test's own PostgreSQL schema with the inbox table.
func inboxDB(t *testing.T) *testkit.PG {
	t.Helper()
	db := testkit.Postgres(t)
	migrator, err := migrations.NewInbox(migrations.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrator.Up(context.Background(), db.Pool); err != nil {
		t.Fatal(err)
	}
	return db
}

// claimCounter passes calls to a Store and closes second when a second
// Claim call starts.
type claimCounter struct {
	dedupe.Store
	calls  atomic.Int32
	second chan struct{}
}

func (s *claimCounter) Claim(ctx context.Context, owner string, ids []string, lease time.Duration) ([]dedupe.Status, error) {
	if s.calls.Add(1) == 2 {
		close(s.second)
	}
	return s.Store.Claim(ctx, owner, ids, lease)
}

// TestDedupeClaimsTheNextBatchWhileHandling: with one worker, the ids of
// the next batch are claimed while the current batch is handled (so that
// the store's round trip is not added to the handling), and the messages
// are still handled one at a time, in order.
func TestDedupeClaimsTheNextBatchWhileHandling(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	r := testkit.NewRedis(t)
	store := &claimCounter{Store: f.redisDedupe(t, r.Client, r.Prefix), second: make(chan struct{})}
	var (
		mu      sync.Mutex
		order   []string
		overlap atomic.Bool
	)
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if string(m.Value) == "1" {
			// The first batch is being handled: the second is claimed
			// meanwhile, or not before the attempt times out.
			select {
			case <-store.second:
				overlap.Store(true)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		order = append(order, string(m.Value))
		return nil
	}))
	cfg.TakeBatch = 1
	cfg.MaxAttempts = 1 // without the overlap, "1" times out and is dead-lettered
	cfg.AttemptTimeout = 2 * time.Second
	cfg.Dedupe = consumer.DedupeConfig{Store: store, Lease: 10 * time.Second}
	f.produce(t, f.topic, record("k", "1"), record("k", "2"))
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "both messages committed", func() bool { return f.committed(t, 0) == 2 })
	stop()
	if !overlap.Load() {
		t.Error("the second batch was not claimed while the first was handled")
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(order, []string{"1", "2"}) {
		t.Errorf("handled %v, want [1 2]: each once, in order", order)
	}
}

// leaseLost is a Store whose Extend always finds the lease run out.
type leaseLost struct {
	dedupe.Store
	extends atomic.Int32
}

func (s *leaseLost) Extend(context.Context, string, []string, time.Duration) error {
	s.extends.Add(1)
	return fmt.Errorf("%w (owner %q)", dedupe.ErrLeaseLost, "test")
}

// TestDedupeLeaseLostBetweenAttempts: a message whose claim ran out
// between two attempts is still handled and marked, and the consumer says
// that another consumer may be handling it too.
func TestDedupeLeaseLostBetweenAttempts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	r := testkit.NewRedis(t)
	const lease = 300 * time.Millisecond
	var attempts atomic.Int32
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if attempts.Add(1) < 4 {
			// Work past half the lease, then fail: the next attempt
			// extends the claim first.
			select {
			case <-time.After(lease / 2):
			case <-ctx.Done():
				return ctx.Err()
			}
			return errors.New("flaky")
		}
		return nil
	}))
	cfg.MaxAttempts = 5
	cfg.AttemptTimeout = 200 * time.Millisecond
	cfg.Backoff = backoff.Backoff{Base: time.Millisecond, Max: time.Millisecond}
	store := &leaseLost{Store: f.redisDedupe(t, r.Client, r.Prefix)}
	cfg.Dedupe = consumer.DedupeConfig{Store: store, Lease: lease}
	logs := &testkit.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	f.produce(t, f.topic, withID("k", "v", "event-1"))
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "the message handled and committed", func() bool { return f.committed(t, 0) == 1 })
	stop()
	if n := attempts.Load(); n != 4 {
		t.Errorf("%d attempts, want 4", n)
	}
	if !strings.Contains(logs.String(), "ran out before it was extended; another consumer may be handling it too") {
		t.Errorf("no warning that the claim ran out; logs:\n%s", logs.String())
	}
	if store.extends.Load() == 0 {
		t.Error("no Extend call: the attempts did not outlast half the lease")
	}
	statuses, err := store.Claim(context.Background(), "checker", []string{"event-1"}, time.Minute)
	if err != nil || statuses[0] != dedupe.Processed {
		t.Errorf("after handling, the id is %v (%v), want processed: the mark is stored though the lease was lost", statuses, err)
	}
}
