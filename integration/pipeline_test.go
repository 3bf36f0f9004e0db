package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/kafkafloor"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// order is the payload of the pipeline's events. Kind says what the
// handler does with it: "ok" succeeds, "slow" fails on its main topic and
// succeeds from the first retry tier, "poison" fails everywhere until the
// handler is fixed.
type order struct {
	ID   string `json:"order_id"`
	Kind string `json:"kind"`
}

// effects records what the handler did, by order: the effect a payment
// would have, which must happen once per order.
type effects struct {
	mu     sync.Mutex
	count  map[string]int    // order id → successful handlings
	events map[string]string // order id → the ce_id it was handled with
	rounds map[string]int    // order id → the retry round it succeeded in
}

func (e *effects) record(o order, m *consumer.Message) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.count[o.ID]++
	e.events[o.ID], e.rounds[o.ID] = m.ID, m.RetryRound
}

// done counts the orders handled at least once.
func (e *effects) done() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.count)
}

// TestPipelineCountsEveryEvent runs the whole pipeline on the public
// packages: orders and their events enqueued in PostgreSQL transactions
// (some rolled back), the relay publishing them, a few published again as
// after a relay crash, a consumer with two retry tiers, Redis dedupe and
// the dead-letter topic, and the dead letters replayed with dlq.Replay once
// the handler is fixed. Every committed event is handled exactly once by
// its effect, none is lost, no rolled-back one appears, the dead-letter
// topic holds the poison events before the replay and nothing is left to
// replay after it. It runs with Sarama's default Version and with the
// oldest courier accepts (kafkafloor.OldestSarama, Kafka 2.1): on the
// in-process broker, which refuses what Kafka 4.0 removed, that proves
// every request the relay, the consumer and the replay send at that
// version is one Kafka 4.0 takes.
func TestPipelineCountsEveryEvent(t *testing.T) {
	t.Parallel()
	for name, version := range map[string]sarama.KafkaVersion{
		"sarama default": sarama.NewConfig().Version,
		"oldest supported, " + kafkafloor.OldestSarama.String(): kafkafloor.OldestSarama,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			countEveryEvent(t, version)
		})
	}
}

// countEveryEvent is TestPipelineCountsEveryEvent with courier's Sarama
// clients set to version.
func countEveryEvent(t *testing.T, version sarama.KafkaVersion) {
	const (
		healthy, slow, poison = 40, 3, 3
		committed             = healthy + slow + poison
		rolledBack            = 4
		duplicates            = 6
	)
	ctx := context.Background()
	pg, out := outbox(t)
	s := newStack(t, 3)
	s.version = version
	r := testkit.NewRedis(t)
	if _, err := pg.Pool.Exec(ctx, "CREATE TABLE orders (id text PRIMARY KEY, kind text NOT NULL)"); err != nil {
		t.Fatal(err)
	}

	// Enqueue: each order and its event in one transaction; the
	// rolled-back ones must never reach Kafka.
	errRollback := errors.New("the checkout failed after the enqueue")
	kinds := map[string]string{} // committed order id → kind
	for i := range committed + rolledBack {
		o := order{ID: fmt.Sprintf("order-%03d", i), Kind: "ok"}
		switch {
		case i < poison:
			o.Kind = "poison"
		case i < poison+slow:
			o.Kind = "slow"
		}
		payload, _ := json.Marshal(o)
		err := pgx.BeginFunc(ctx, pg.Pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO orders (id, kind) VALUES ($1, $2)", o.ID, o.Kind); err != nil {
				return err
			}
			if _, err := out.Enqueue(ctx, tx, producer.Event{Topic: s.topic, Key: o.ID, Type: "OrderCreated", Payload: payload, CorrelationID: o.ID}); err != nil {
				return err
			}
			if i >= committed {
				return errRollback
			}
			return nil
		})
		switch {
		case i >= committed && errors.Is(err, errRollback):
		case err != nil:
			t.Fatalf("enqueue %s: %v", o.ID, err)
		default:
			kinds[o.ID] = o.Kind
		}
	}

	// Relay: every committed event reaches the topic, then some are
	// published again, byte for byte, as by a relay killed between its
	// publish and its settle.
	start(t, s.relay(t, pg, producer.RelayConfig{Source: "orders-service"}).Run)
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("the relay to publish %d events", committed), func() bool {
		return len(s.k.ReadAll(t, s.topic)) == committed
	})
	var again []*sarama.ProducerMessage
	for _, m := range s.k.ReadAll(t, s.topic) {
		var o order
		if json.Unmarshal(m.Value, &o) == nil && o.Kind == "ok" && len(again) < duplicates {
			d := &sarama.ProducerMessage{Topic: s.topic, Partition: m.Partition, Key: sarama.ByteEncoder(m.Key), Value: sarama.ByteEncoder(m.Value)}
			for _, h := range m.Headers {
				d.Headers = append(d.Headers, *h)
			}
			again = append(again, d)
		}
	}
	if err := s.k.Producer(t).SendMessages(again); err != nil {
		t.Fatal(err)
	}

	// Consume: two attempts on the main topic and in each of two retry
	// tiers, then the dead-letter topic; Redis dedupe skips the duplicates.
	var fixed atomic.Bool
	e := &effects{count: map[string]int{}, events: map[string]string{}, rounds: map[string]int{}}
	cfg := s.consumerConfig(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		var o order
		if err := json.Unmarshal(m.Value, &o); err != nil {
			return consumer.Permanent(err)
		}
		switch {
		case o.Kind == "poison" && !fixed.Load():
			return errors.New("psp: invalid amount")
		case o.Kind == "slow" && m.RetryRound == 0:
			return errors.New("psp: fraud check pending")
		}
		e.record(o, m)
		return nil
	}))
	cfg.MaxAttempts, cfg.Workers = 2, 4
	s.retryTiers(t, &cfg, 50*time.Millisecond, 100*time.Millisecond)
	cfg.Dedupe = consumer.DedupeConfig{Store: s.redisDedupe(t, r), Lease: 10 * time.Second}
	stop := runConsumer(t, cfg)
	testkit.WaitFor(t, 30*time.Second, "the healthy and slow orders handled, the poison ones dead-lettered", func() bool {
		return e.done() == healthy+slow && len(s.k.ReadAll(t, s.deadLetter)) == poison && s.settled(t)
	})

	// Dead letters before the replay: the poison events, each decodable.
	var deadKeys []string
	for _, m := range s.k.ReadAll(t, s.deadLetter) {
		headers := make([]dlq.Header, len(m.Headers))
		for i, h := range m.Headers {
			headers[i] = dlq.Header{Key: h.Key, Value: h.Value}
		}
		env, err := dlq.Read(m.Key, m.Value, headers)
		if err != nil {
			t.Fatalf("dead letter %d: %v", m.Offset, err)
		}
		if env.OriginalTopic != s.topic || env.ErrorKind != dlq.KindRetriesExhausted || env.ConsumerGroup != s.group || env.Error != "psp: invalid amount" {
			t.Errorf("dead letter %d: %+v", m.Offset, env)
		}
		deadKeys = append(deadKeys, string(m.Key))
	}
	slices.Sort(deadKeys)
	if want := []string{"order-000", "order-001", "order-002"}; !slices.Equal(deadKeys, want) {
		t.Errorf("dead letters of %v, want the poison orders %v", deadKeys, want)
	}

	// Replay once the handler is fixed.
	fixed.Store(true)
	replay := dlq.ReplayConfig{Brokers: s.k.Brokers, Sarama: s.saramaConfig(), Topic: s.deadLetter, Group: "replay." + s.group}
	report, err := dlq.Replay(ctx, replay)
	if err != nil || report.Moved != poison {
		t.Fatalf("replay: %+v, %v; want %d moved", report, err, poison)
	}
	testkit.WaitFor(t, 30*time.Second, "every committed order handled", func() bool {
		return e.done() == committed && s.settled(t)
	})
	stop()

	// Count every event.
	replay.DryRun = true
	if left, err := dlq.Replay(ctx, replay); err != nil || left.Total != 0 || left.Moved != 0 {
		t.Errorf("after the replay a dry run finds %+v (%v), want nothing left to replay", left, err)
	}
	if n := len(s.k.ReadAll(t, s.deadLetter)); n != poison {
		t.Errorf("%d dead letters after the replay, want the %d from before it and no new one", n, poison)
	}
	if n := len(s.k.ReadAll(t, s.topic)); n != committed+duplicates+poison {
		t.Errorf("the topic holds %d records, want %d events, %d duplicates and %d replayed", n, committed, duplicates, poison)
	}
	var published, rows int
	if err := pg.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE status = 'published'), count(*) FROM courier_events").Scan(&published, &rows); err != nil {
		t.Fatal(err)
	}
	if published != committed || rows != committed {
		t.Errorf("the outbox holds %d events, %d published; want the %d committed, all published", rows, published, committed)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	lost, twice := 0, 0
	for id, kind := range kinds {
		switch n := e.count[id]; {
		case n == 0:
			lost++
			t.Errorf("%s (%s) was never handled", id, kind)
		case n > 1:
			twice++
			t.Errorf("%s (%s) was handled %d times", id, kind, n)
		}
		if e.count[id] > 0 && e.events[id] == "" {
			t.Errorf("%s was handled without its ce_id", id)
		}
		if kind == "slow" && e.count[id] > 0 && e.rounds[id] != 1 {
			t.Errorf("slow %s succeeded in retry round %d, want 1 (the first tier)", id, e.rounds[id])
		}
	}
	if len(e.count) != len(kinds) {
		t.Errorf("%d orders handled, want the %d committed: a rolled-back event reached the handler", len(e.count), len(kinds))
	}
	t.Logf("%d enqueued (%d rolled back), %d published, %d published twice, %d dead-lettered and replayed; %d orders handled, %d lost, %d more than once",
		committed+rolledBack, rolledBack, published, len(again), poison, len(e.count), lost, twice)
}
