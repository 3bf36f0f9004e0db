package producer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// listening reports whether any session of the relay's test LISTENs.
func listening(t *testing.T, pg *testkit.PG) bool {
	t.Helper()
	var n int
	err := pg.Pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE application_name LIKE $1 || '%' AND query LIKE 'LISTEN %'`, pg.Schema).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// TestIdleRelayWakesWithoutNotify: the outbox has no trigger and the relay
// no LISTEN session, yet with a one-minute poll interval an event committed
// while the relay idles is published within seconds (within ProbeInterval,
// 100ms by default, plus the publish), and a burst of 200 commits costs a
// handful of claims, not 200.
func TestIdleRelayWakesWithoutNotify(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	var triggers int
	if err := pg.Pool.QueryRow(context.Background(), "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'courier_outbox'::regclass").Scan(&triggers); err != nil {
		t.Fatal(err)
	}
	if triggers != 0 {
		t.Fatalf("courier_outbox has %d triggers, want none: a trigger runs in every enqueuing transaction", triggers)
	}
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	metrics := &recordedMetrics{}
	relay := newRelay(t, pg, k, producer.RelayConfig{PollInterval: time.Minute, Hooks: []producer.Hook{metrics}, StatsInterval: time.Hour})
	runRelay(t, relay)
	c := consume(t, k, topic)
	// The relay's first claims (at start) are behind it once it idles.
	testkit.WaitFor(t, 10*time.Second, "the relay's first claim", func() bool {
		claims, _ := metrics.snapshot()
		return len(claims) > 0
	})

	ev := orderCreated("o-1")
	ev.Topic = topic
	start := time.Now()
	enqueue(t, pg, out, ev)
	c.waitDistinct(1, 10*time.Second)
	t.Logf("idle relay published a committed event after %v (poll interval 1m, no NOTIFY)", time.Since(start))
	if listening(t, pg) {
		t.Fatal("the relay opened a LISTEN session")
	}

	claimsBefore, _ := metrics.snapshot()
	var wg sync.WaitGroup
	for w := range 10 {
		wg.Go(func() {
			for i := range 20 {
				ev := orderCreated(fmt.Sprintf("o-%d-%d", w, i))
				ev.Topic = topic
				if _, err := out.Enqueue(context.Background(), pg.Pool, ev); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	c.waitDistinct(201, 20*time.Second)
	claimsAfter, _ := metrics.snapshot()
	claims := len(claimsAfter) - len(claimsBefore)
	t.Logf("200 commits in a burst caused %d claim queries", claims)
	// A wake-up wakes every worker: 30 wake-ups for the burst at most.
	if most := 30 * producer.DefaultWorkers; claims > most {
		t.Fatalf("200 commits caused %d claim queries (%d workers), over %d; wake-ups are not coalesced", claims, producer.DefaultWorkers, most)
	}
}

// TestWakeUpFollowsACommitThatComesLate: an enqueue advances the sequence
// when it inserts, and its transaction commits later; the relay must see
// the commit (the transaction leaving the ones in progress) and publish the
// event soon after, not at its next poll a minute later.
func TestWakeUpFollowsACommitThatComesLate(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	metrics := &recordedMetrics{}
	relay := newRelay(t, pg, k, producer.RelayConfig{PollInterval: time.Minute, Hooks: []producer.Hook{metrics}, StatsInterval: time.Hour})
	runRelay(t, relay)
	c := consume(t, k, topic)
	ctx := context.Background()
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	ev := orderCreated("o-1")
	ev.Topic = topic
	if _, err := out.Enqueue(ctx, tx, ev); err != nil {
		t.Fatal(err)
	}
	// Wait until the relay has seen the sequence move and claimed for it:
	// the claim found nothing, the transaction being open.
	claimed := func() int { claims, _ := metrics.snapshot(); return len(claims) }
	before := claimed()
	testkit.WaitFor(t, 10*time.Second, "a claim after the enqueue", func() bool { return claimed() > before })
	if n := len(c.messages()); n != 0 {
		t.Fatalf("%d records on Kafka before the commit", n)
	}
	start := time.Now()
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	c.waitDistinct(1, 10*time.Second)
	t.Logf("published %v after a late commit (poll interval 1m)", time.Since(start))
}

func TestPollOnlyRelayNeedsNoListen(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	relay := newRelay(t, pg, k, producer.RelayConfig{PollOnly: true, PollInterval: 50 * time.Millisecond})
	runRelay(t, relay)
	c := consume(t, k, topic)
	for i := range 3 {
		ev := orderCreated(fmt.Sprintf("o-%d", i))
		ev.Topic = topic
		enqueue(t, pg, out, ev)
		c.waitDistinct(i+1, 10*time.Second)
	}
	if listening(t, pg) {
		t.Fatal("a poll-only relay opened a LISTEN session")
	}
}

// TestBreakerOpensWhileBrokerIsDown: with every request to the broker
// failing, the breaker opens, the relay stops claiming while it is open,
// no attempt is counted, and everything flows once the broker is back.
func TestBreakerOpensWhileBrokerIsDown(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	k := testkit.NewKafka(t, testkit.InProcess()) // the test takes the broker down
	topic := k.Topic(t, 2)
	var down atomic.Bool
	down.Store(true)
	k.Cluster.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		if !down.Load() {
			return nil, nil, false
		}
		k.Cluster.KeepControl()
		return nil, errors.New("broker down"), true // closes the connection
	})
	for i := range 50 {
		ev := orderCreated(fmt.Sprintf("o-%d", i%5))
		ev.Topic = topic
		enqueue(t, pg, out, ev)
	}
	saramaCfg := producer.NewSaramaConfig()
	saramaCfg.Metadata.Retry.Max = 0
	saramaCfg.Producer.Retry.Max = 0
	metrics := &recordedMetrics{}
	// One worker, so that the claims and breaker changes the metrics record
	// come from one loop, in order. (With several, a claim another worker
	// started before the breaker opened completes, but publishes nothing.)
	relay := newRelay(t, pg, k, producer.RelayConfig{Sarama: saramaCfg, Hooks: []producer.Hook{metrics}, PollInterval: 20 * time.Millisecond,
		Workers: 1, Breaker: producer.BreakerConfig{OpenFor: 300 * time.Millisecond}})
	runRelay(t, relay)

	testkit.WaitFor(t, 30*time.Second, "the breaker to open and then probe again", func() bool {
		_, events := metrics.snapshot()
		opened := 0
		for _, e := range events {
			if e == "open" {
				opened++
			}
		}
		return opened >= 2
	})
	if n := countRows(t, pg.Pool, "retry_count > 0 OR status <> 'pending' OR last_attempt_at IS NOT NULL"); n != 0 {
		t.Fatalf("%d events counted an attempt while the broker was down", n)
	}
	_, events := metrics.snapshot()
	open := false
	for _, e := range events {
		switch e {
		case "open":
			open = true
		case "half-open", "closed":
			open = false
		case "claim":
			if open {
				t.Fatalf("the relay claimed while the breaker was open: %v", events)
			}
		}
	}

	down.Store(false)
	c := consume(t, k, topic)
	c.waitDistinct(50, 30*time.Second)
	testkit.WaitFor(t, 10*time.Second, "the breaker to close", func() bool { return relay.Breaker() == producer.BreakerClosed })
	testkit.WaitFor(t, 10*time.Second, "every event marked published", func() bool {
		return countRows(t, pg.Pool, "status <> 'published'") == 0
	})
	if n := countRows(t, pg.Pool, "retry_count > 0"); n != 0 {
		t.Fatalf("%d events counted an attempt for the outage", n)
	}
}

// blockingPublisher holds every Publish until released.
type blockingPublisher struct {
	started chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingPublisher) Publish(ctx context.Context, records []*record.Record) []error {
	b.once.Do(func() { close(b.started) })
	errs := make([]error, len(records))
	select {
	case <-b.release:
	case <-ctx.Done():
		for i := range errs {
			errs[i] = ctx.Err()
		}
	}
	return errs
}

func (b *blockingPublisher) Close() error { return nil }

func TestShutdownFinishesTheBatchInFlight(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	id := enqueue(t, pg, out, orderCreated("o-1"))
	pub := &blockingPublisher{started: make(chan struct{}), release: make(chan struct{})}
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, ShutdownTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	<-pub.started
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while its batch was still publishing", err)
	case <-time.After(100 * time.Millisecond): // Run must still be waiting for the batch
	}
	close(pub.release)
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if row := rowOf(t, pg, id); row.Status != producer.StatusPublished {
		t.Fatalf("after shutdown the in-flight event is %s, want published", row.Status)
	}
}

func TestShutdownTimeoutLeavesTheEventPending(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	id := enqueue(t, pg, out, orderCreated("o-1"))
	pub := &blockingPublisher{started: make(chan struct{}), release: make(chan struct{})}
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, ShutdownTimeout: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	<-pub.started
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if row := rowOf(t, pg, id); row.Status != producer.StatusPending || row.Attempts != 0 {
		t.Fatalf("an event cut off by the shutdown timeout is %+v, want pending with no attempt counted", row)
	}
}
