package console_test

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/courierkit/courier/cmd/courier/internal/console"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// rig is a console on a test's own outbox and Kafka.
type rig struct {
	pg     *testkit.PG
	kafka  *testkit.Kafka
	client sarama.Client
	out    *producer.Outbox
	admin  *producer.Admin
	srv    *console.Server
	// url is the console's address, http://127.0.0.1:port.
	url string
}

// newRig migrates a fresh outbox, connects to Kafka and serves a console
// on 127.0.0.1; adjust changes its config first.
func newRig(t testing.TB, adjust func(*console.Config)) *rig {
	t.Helper()
	r := &rig{pg: testkit.Postgres(t), kafka: testkit.NewKafka(t)}
	r.pg.Migrate(t)
	client, err := sarama.NewClient(r.kafka.Brokers, r.kafka.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	r.client = client
	if r.out, err = producer.NewOutbox(producer.Config{Schema: r.pg.Schema}); err != nil {
		t.Fatal(err)
	}
	if r.admin, err = producer.NewAdmin(r.pg.Pool, producer.AdminConfig{Schema: r.pg.Schema}); err != nil {
		t.Fatal(err)
	}
	cfg := console.Config{DB: r.pg.Pool, Schema: r.pg.Schema, Kafka: client, Brokers: r.kafka.Brokers, Sarama: r.kafka.Config(),
		ReplayGroup: "console-replay-" + testkit.UniqueName(t, 40), Logger: testkit.Logger(t)}
	if adjust != nil {
		adjust(&cfg)
	}
	if r.srv, err = console.New(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.srv.Close)
	r.url = httptestServe(t, r.srv)
	return r
}

// enqueue commits events to the outbox and returns their ids.
func (r *rig) enqueue(t testing.TB, events ...producer.Event) []uuid.UUID {
	t.Helper()
	ctx := context.Background()
	var out []producer.Enqueued
	err := pgx.BeginFunc(ctx, r.pg.Pool, func(tx pgx.Tx) error {
		var err error
		out, err = r.out.EnqueueBatch(ctx, tx, events)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uuid.UUID, len(out))
	for i, e := range out {
		ids[i] = e.ID
	}
	return ids
}

// relay runs a relay on the rig's outbox until stop is called or the
// test ends.
func (r *rig) relay(t testing.TB, adjust func(*producer.RelayConfig)) (stop func()) {
	t.Helper()
	// The rig dead-letters events of a topic that does not exist: its
	// failures count from their first.
	cfg := producer.RelayConfig{Schema: r.pg.Schema, Brokers: r.kafka.Brokers, Sarama: r.kafka.Config(), Workers: 1,
		PollInterval: 20 * time.Millisecond, MissingTopicGrace: time.Nanosecond, Logger: testkit.Logger(t)}
	cfg.Backoff.Base = 50 * time.Millisecond
	if adjust != nil {
		adjust(&cfg)
	}
	relay, err := producer.NewRelay(r.pg.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("relay: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// status is an event's status now.
func (r *rig) status(t testing.TB, id uuid.UUID) string {
	t.Helper()
	rec, err := r.admin.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec.Status
}

// deadLettered enqueues events for a topic that does not exist, each with
// one attempt, and runs a relay until it has dead-lettered them.
func (r *rig) deadLettered(t testing.TB, events ...producer.Event) []uuid.UUID {
	t.Helper()
	for i := range events {
		events[i].MaxAttempts = 1
	}
	ids := r.enqueue(t, events...)
	stop := r.relay(t, nil)
	defer stop()
	testkit.WaitFor(t, 30*time.Second, "the events to be dead-lettered", func() bool {
		for _, id := range ids {
			if r.status(t, id) != producer.StatusDeadLettered {
				return false
			}
		}
		return true
	})
	return ids
}

// httptestServe serves srv on 127.0.0.1 until the test ends and returns
// its address.
func httptestServe(t testing.TB, srv *console.Server) string {
	t.Helper()
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}
