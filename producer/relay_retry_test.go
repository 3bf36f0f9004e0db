package producer_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"
	"github.com/google/uuid"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// eventRow is the delivery state of one outbox row.
type eventRow struct {
	Status        string
	Attempts      int
	LastError     *string
	LastAttemptAt *time.Time
	NextAttemptAt time.Time
}

func rowOf(t *testing.T, pg *testkit.PG, id uuid.UUID) eventRow {
	t.Helper()
	var r eventRow
	err := pg.Pool.QueryRow(context.Background(),
		"SELECT status, retry_count, last_error, last_attempt_at, next_attempt_at FROM courier_events WHERE id = $1", id).
		Scan(&r.Status, &r.Attempts, &r.LastError, &r.LastAttemptAt, &r.NextAttemptAt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func enqueue(t *testing.T, pg *testkit.PG, out *producer.Outbox, ev producer.Event) uuid.UUID {
	t.Helper()
	res, err := out.Enqueue(context.Background(), pg.Pool, ev)
	if err != nil {
		t.Fatal(err)
	}
	return res.ID
}

func runOnce(t *testing.T, r *producer.Relay) producer.BatchResult {
	t.Helper()
	res, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// failID makes every record with the given ce_id fail with err.
func failID(id uuid.UUID, err error) func(*record.Record) error {
	return func(m *record.Record) error {
		if recordHeader(m, producer.HeaderID) == id.String() {
			return err
		}
		return nil
	}
}

// TestBackoffScheduleAndDeadLetter drives the relay with an injected clock:
// a failing event waits 1, 2, 4, 8 and 16 s between attempts, is never tried
// early, holds back only its own key, and after the 6th failure is
// dead-lettered, written to orders.dlq and reported to OnDeadLetter — and
// then its key moves on.
func TestBackoffScheduleAndDeadLetter(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	clock := newFakeClock()
	pub := &fakePublisher{}
	var mu sync.Mutex
	var letters []producer.DeadLetter
	relay := newRelay(t, pg, nil, producer.RelayConfig{
		Publisher: pub, Now: clock.Now, PublishDeadLetters: true, MaxAttempts: 6,
		OnDeadLetter: func(_ context.Context, d producer.DeadLetter) {
			mu.Lock()
			defer mu.Unlock()
			letters = append(letters, d)
		},
	})
	ev := orderCreated("o-1")
	ev.CorrelationID = "corr-1"
	failing := enqueue(t, pg, out, ev)
	behind := enqueue(t, pg, out, orderCreated("o-1")) // same key, enqueued later
	other := enqueue(t, pg, out, orderCreated("o-2"))
	pub.setFail(failID(failing, sarama.ErrInvalidMessage))

	res := runOnce(t, relay)
	if res.Failed != 1 || res.Published != 1 || res.Released != 1 {
		t.Fatalf("first batch %+v: want 1 failed, the other key published, the same key released", res)
	}
	if got := pub.ackedIDs("orders"); !slices.Equal(got, []string{other.String()}) {
		t.Fatalf("published %v, want only the other key's event", got)
	}

	wantDelays := []time.Duration{1, 2, 4, 8, 16}
	for attempt, delay := range wantDelays {
		row := rowOf(t, pg, failing)
		if row.Status != producer.StatusFailed || row.Attempts != attempt+1 {
			t.Fatalf("after failure %d: status %s retry_count %d", attempt+1, row.Status, row.Attempts)
		}
		if got := row.NextAttemptAt.Sub(*row.LastAttemptAt); got != delay*time.Second {
			t.Fatalf("after failure %d: next attempt in %v, want %v", attempt+1, got, delay*time.Second)
		}
		if row.LastError == nil || *row.LastError != sarama.ErrInvalidMessage.Error() {
			t.Fatalf("last_error = %v, want %q", row.LastError, sarama.ErrInvalidMessage.Error())
		}
		clock.Advance(delay*time.Second - time.Millisecond)
		if res := runOnce(t, relay); res.Claimed != 0 {
			t.Fatalf("1ms before the retry is due the relay claimed %+v", res)
		}
		clock.Advance(time.Millisecond)
		res := runOnce(t, relay)
		if res.Claimed != 2 {
			t.Fatalf("retry %d: claimed %d, want the failing event and the one behind it", attempt+1, res.Claimed)
		}
	}

	// The 6th failure dead-letters it. The event behind it failed with it
	// (one record batch) and was released: it goes out in the next batch.
	row := rowOf(t, pg, failing)
	if row.Status != producer.StatusDeadLettered || row.Attempts != 6 {
		t.Fatalf("after 6 failures: status %s retry_count %d, want dead_lettered 6", row.Status, row.Attempts)
	}
	if res := runOnce(t, relay); res.Published != 1 {
		t.Fatalf("the batch after the dead letter %+v, want the event behind it published", res)
	}
	if got := pub.ackedIDs("orders"); !slices.Equal(got, []string{other.String(), behind.String()}) {
		t.Fatalf("published %v, want %s then %s", got, other, behind)
	}
	mu.Lock()
	if len(letters) != 1 || letters[0].EventID != failing || letters[0].Attempts != 6 || letters[0].Permanent ||
		letters[0].CorrelationID != "corr-1" || letters[0].Key != "o-1" {
		t.Fatalf("OnDeadLetter got %+v, want one retries-exhausted letter for %s", letters, failing)
	}
	mu.Unlock()

	dlqRecords := pub.ackedOn("orders.dlq")
	if len(dlqRecords) != 1 {
		t.Fatalf("%d records on orders.dlq, want 1", len(dlqRecords))
	}
	env, err := dlq.Decode(dlqRecords[0].Value)
	if err != nil {
		t.Fatalf("orders.dlq holds a bad envelope: %v", err)
	}
	original, err := env.Original()
	if err != nil {
		t.Fatal(err)
	}
	if env.ErrorKind != dlq.KindRetriesExhausted || env.Attempts != 6 || env.OriginalTopic != "orders" ||
		env.OriginalPartition != dlq.NoPartition || string(original.Value) != string(ev.Payload) || string(original.Key) != "o-1" ||
		env.CorrelationID != "corr-1" || !env.FirstFailedAt.Before(env.FailedAt) {
		t.Fatalf("envelope %+v does not describe the dead letter", env)
	}
	var ceID string
	for _, h := range original.Headers {
		if string(h.Key) == producer.HeaderID {
			ceID = string(h.Value)
		}
	}
	if ceID != failing.String() {
		t.Fatalf("envelope's original ce_id = %q, want %s", ceID, failing)
	}
}

func TestPerEventMaxAttempts(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	clock := newFakeClock()
	pub := &fakePublisher{}
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, Now: clock.Now})
	ev := orderCreated("o-1")
	ev.MaxAttempts = 2
	id := enqueue(t, pg, out, ev)
	pub.setFail(failID(id, sarama.ErrInvalidMessage))
	runOnce(t, relay)
	clock.Advance(time.Second)
	if res := runOnce(t, relay); res.DeadLettered != 1 {
		t.Fatalf("second failure with MaxAttempts 2: %+v, want dead-lettered", res)
	}
	if row := rowOf(t, pg, id); row.Status != producer.StatusDeadLettered || row.Attempts != 2 {
		t.Fatalf("row %+v, want dead_lettered after 2", row)
	}
}

func TestHoldKeyOnDeadLetterUntilRequeued(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	clock := newFakeClock()
	pub := &fakePublisher{}
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, Now: clock.Now, HoldKeyOnDeadLetter: true})
	poison := enqueue(t, pg, out, orderCreated("o-1"))
	behind := enqueue(t, pg, out, orderCreated("o-1"))
	pub.setFail(failID(poison, sarama.ErrInvalidTopic)) // permanent: dead-letters at once

	res := runOnce(t, relay)
	if res.DeadLettered != 1 || res.Published != 0 {
		t.Fatalf("batch %+v: want the poison dead-lettered and nothing published", res)
	}
	clock.Advance(time.Hour)
	if res := runOnce(t, relay); res.Claimed != 0 {
		t.Fatalf("with the key held, the relay claimed %+v", res)
	}

	admin := newAdmin(t, pg)
	n, err := admin.Requeue(context.Background(), producer.Filter{IDs: []uuid.UUID{poison}})
	if err != nil || n != 1 {
		t.Fatalf("Requeue = %d, %v", n, err)
	}
	pub.setFail(nil) // fixed
	clock.Advance(time.Hour)
	runOnce(t, relay)
	if got := pub.ackedIDs("orders"); !slices.Equal(got, []string{poison.String(), behind.String()}) {
		t.Fatalf("published %v, want the requeued event then the one behind it", got)
	}
}

// setupMaxPayload is setup with an outbox that takes payloads up to maxPayload
// bytes, to enqueue events larger than a broker accepts.
func setupMaxPayload(t *testing.T, maxPayload int) (*testkit.PG, *producer.Outbox) {
	t.Helper()
	pg := testkit.Postgres(t)
	pg.Migrate(t)
	out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema, MaxPayloadBytes: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	return pg, out
}

// TestPoisonEventIsDeadLetteredAtOnce sends a record larger than the broker
// accepts among ordinary ones: the broker's refusal dead-letters it on its
// first attempt, and every other event — of other keys sharing its
// partitions, and the next event of its own key — is published in the same
// batch.
func TestPoisonEventIsDeadLetteredAtOnce(t *testing.T) {
	t.Parallel()
	pg, out := setupMaxPayload(t, 4<<20)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 2)
	saramaCfg := producer.NewSaramaConfig()
	saramaCfg.Producer.MaxMessageBytes = 8 << 20 // let the broker be the judge
	var letters []producer.DeadLetter
	relay := newRelay(t, pg, k, producer.RelayConfig{Sarama: saramaCfg,
		OnDeadLetter: func(_ context.Context, d producer.DeadLetter) { letters = append(letters, d) }})

	var ids []uuid.UUID
	for i := range 20 {
		ev := orderCreated(fmt.Sprintf("o-%d", i))
		ev.Topic = topic
		ids = append(ids, enqueue(t, pg, out, ev))
		if i == 10 {
			poison := producer.Event{Topic: topic, Key: "o-poison", Type: "Blob", ContentType: "application/octet-stream",
				Payload: make([]byte, 2<<20)}
			poisonID := enqueue(t, pg, out, poison)
			next := orderCreated("o-poison")
			next.Topic = topic
			ids = append(ids, enqueue(t, pg, out, next))
			defer func() {
				row := rowOf(t, pg, poisonID)
				if row.Status != producer.StatusDeadLettered || row.Attempts != 1 || row.LastError == nil {
					t.Errorf("poison row %+v, want dead_lettered on its first attempt", row)
				} else {
					t.Logf("poison dead-lettered with: %s", *row.LastError)
				}
			}()
		}
	}
	res := runOnce(t, relay)
	if res.Published != len(ids) || res.DeadLettered != 1 || res.Failed != 0 {
		t.Fatalf("batch %+v: want all %d others published and the poison dead-lettered", res, len(ids))
	}
	if len(letters) != 1 || !letters[0].Permanent || letters[0].Key != "o-poison" {
		t.Fatalf("OnDeadLetter got %+v, want one permanent letter", letters)
	}
	msgs := consume(t, k, topic).waitDistinct(len(ids), 20*time.Second)
	if len(distinctIDs(msgs)) != len(ids) {
		t.Fatalf("%d distinct events on Kafka, want %d", len(distinctIDs(msgs)), len(ids))
	}
}

// TestUnreachableKafkaCountsNoAttempt: errors that mean no broker answered —
// no broker, Sarama's own breaker, a refused connection, a publish cut short
// — defer the event without counting an attempt.
func TestUnreachableKafkaCountsNoAttempt(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	clock := newFakeClock()
	for _, cause := range []error{sarama.ErrOutOfBrokers, breaker.ErrBreakerOpen, syscall.ECONNREFUSED, context.DeadlineExceeded} {
		pub := &fakePublisher{}
		pub.setFail(func(*record.Record) error { return cause })
		relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, Now: clock.Now,
			Breaker: producer.BreakerConfig{ConsecutiveFailures: 1000}})
		id := enqueue(t, pg, out, orderCreated("o-1"))
		res := runOnce(t, relay)
		if res.Deferred != 1 || res.Failed+res.DeadLettered != 0 {
			t.Fatalf("%v: batch %+v, want the event deferred", cause, res)
		}
		row := rowOf(t, pg, id)
		if row.Status != producer.StatusPending || row.Attempts != 0 || row.LastAttemptAt != nil ||
			row.NextAttemptAt.Sub(clock.Now()) != time.Second {
			t.Fatalf("%v: row %+v: want pending, no attempt counted, retried in 1s", cause, row)
		}
		for range 10 { // however long it lasts, it is never dead-lettered
			clock.Advance(time.Second)
			runOnce(t, relay)
		}
		if row := rowOf(t, pg, id); row.Status != producer.StatusPending || row.Attempts != 0 {
			t.Fatalf("%v: after 10 deferrals the row is %+v", cause, row)
		}
		pub.setFail(nil)
		clock.Advance(time.Second)
		runOnce(t, relay)
		if row := rowOf(t, pg, id); row.Status != producer.StatusPublished {
			t.Fatalf("%v: after Kafka came back the row is %+v", cause, row)
		}
	}
}

// TestUnavailablePartitionDoesNotStarveOthers: a topic whose records Kafka
// keeps refusing for now (too few in-sync replicas) does not hold the
// claims of other topics, does not open the breaker, and counts its events
// no attempt: the cluster's condition is not the events'.
func TestUnavailablePartitionDoesNotStarveOthers(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	clock := newFakeClock()
	pub := &fakePublisher{}
	pub.setFail(func(m *record.Record) error {
		if m.Topic == "stuck" {
			return sarama.ErrNotEnoughReplicas
		}
		return nil
	})
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, Now: clock.Now, BatchSize: 2})
	for i := range 4 {
		ev := orderCreated(fmt.Sprintf("s-%d", i))
		ev.Topic = "stuck"
		enqueue(t, pg, out, ev)
	}
	orders := []uuid.UUID{enqueue(t, pg, out, orderCreated("o-1")), enqueue(t, pg, out, orderCreated("o-2"))}
	for range 4 { // the clock stands still: deferred events are not due again
		runOnce(t, relay)
	}
	if got := pub.ackedIDs("orders"); !slices.Equal(got, []string{orders[0].String(), orders[1].String()}) {
		t.Fatalf("orders published %v, want both while the stuck topic waits", got)
	}
	if n := countRows(t, pg.Pool, "topic = 'stuck' AND status = 'pending' AND retry_count = 0 AND last_error LIKE '%in-sync replicas%'"); n != 4 {
		t.Fatalf("%d stuck events held with no attempt counted, want 4: too few in-sync replicas is the cluster's condition", n)
	}
	if relay.Breaker() != producer.BreakerClosed {
		t.Fatalf("breaker %v after a broker's refusals, want closed", relay.Breaker())
	}
}

// TestFailedDeadLetterWriteKeepsKeyOrder: when the dead-letter topic refuses
// an envelope for now, the event stays failed, its key stops, and the next
// batch writes the dead letter without publishing the event again before
// the key moves on.
func TestFailedDeadLetterWriteKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		cause error
	}{
		{"retries exhausted", sarama.ErrInvalidMessage},
		{"refused for good", sarama.ErrInvalidRecord}, // resent alone first, then given up on at once
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pg, out := setup(t)
			clock := newFakeClock()
			pub := &fakePublisher{}
			relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, Now: clock.Now, PublishDeadLetters: true, MaxAttempts: 1})
			first := enqueue(t, pg, out, orderCreated("o-1"))
			second := enqueue(t, pg, out, orderCreated("o-1"))
			mainAttempts := 0
			pub.setFail(func(m *record.Record) error {
				switch {
				case m.Topic == "orders" && recordHeader(m, producer.HeaderID) == first.String():
					return c.cause
				case m.Topic == "orders.dlq":
					return sarama.ErrNotEnoughReplicas
				}
				return nil
			})
			res := runOnce(t, relay)
			if res.Published != 0 || res.Failed != 1 {
				t.Fatalf("batch %+v: the key must stop while its dead letter is not written", res)
			}
			if row := rowOf(t, pg, first); row.Status != producer.StatusFailed || row.Attempts != 1 {
				t.Fatalf("first event %+v, want failed with its one attempt", row)
			}

			pub.setFail(func(m *record.Record) error {
				if m.Topic == "orders" && recordHeader(m, producer.HeaderID) == first.String() {
					mainAttempts++
					return c.cause
				}
				return nil
			})
			clock.Advance(time.Minute)
			res = runOnce(t, relay)
			if res.DeadLettered != 1 || res.Published != 1 || mainAttempts != 0 {
				t.Fatalf("batch %+v after %d new main attempts: want the dead letter written without a new attempt, then the key moving on", res, mainAttempts)
			}
			if row := rowOf(t, pg, first); row.Status != producer.StatusDeadLettered || row.Attempts != 1 {
				t.Fatalf("first event %+v, want dead_lettered with retry_count 1", row)
			}
			if got := pub.ackedIDs("orders"); !slices.Equal(got, []string{second.String()}) {
				t.Fatalf("main topic got %v, want only the second event", got)
			}
		})
	}
}

// TestRefusedEventHoldsItsKeyWhenKeysHold: with HoldKeyOnDeadLetter, an
// event the relay itself refuses (larger than Producer.MaxMessageBytes) is
// dead-lettered and the event behind it, of the same key, is not published.
func TestRefusedEventHoldsItsKeyWhenKeysHold(t *testing.T) {
	t.Parallel()
	pg, out := setupMaxPayload(t, 1<<20)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	saramaCfg := producer.NewSaramaConfig()
	saramaCfg.Producer.MaxMessageBytes = 10_000
	relay := newRelay(t, pg, k, producer.RelayConfig{Sarama: saramaCfg, HoldKeyOnDeadLetter: true})
	big := producer.Event{Topic: topic, Key: "o-1", Type: "Blob", ContentType: "application/octet-stream", Payload: make([]byte, 20_000)}
	poison := enqueue(t, pg, out, big)
	next := orderCreated("o-1")
	next.Topic = topic
	behind := enqueue(t, pg, out, next)

	if res := runOnce(t, relay); res.DeadLettered != 1 || res.Published != 0 {
		t.Fatalf("batch %+v: want the oversized event dead-lettered and nothing published", res)
	}
	if row := rowOf(t, pg, poison); row.Status != producer.StatusDeadLettered {
		t.Fatalf("oversized event %+v, want dead_lettered", row)
	}
	if row := rowOf(t, pg, behind); row.Status != producer.StatusPending || row.Attempts != 0 {
		t.Fatalf("event behind it %+v, want pending and untried", row)
	}
}

// TestRelayInFlightKeepsOtherRelaysOffItsKeys: while one relay publishes a
// key's event, another relay claims nothing of that key; once the first one
// has recorded a failure, the other sees it, so the key's later event waits
// for the retry instead of overtaking it.
func TestRelayInFlightKeepsOtherRelaysOffItsKeys(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	clock := newFakeClock()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	first := &fakePublisher{}
	first.setFail(func(*record.Record) error {
		once.Do(func() { close(entered) })
		<-release
		return sarama.ErrInvalidMessage
	})
	second := &fakePublisher{}
	a := newRelay(t, pg, nil, producer.RelayConfig{Publisher: first, Now: clock.Now})
	b := newRelay(t, pg, nil, producer.RelayConfig{Publisher: second, Now: clock.Now})
	failing := enqueue(t, pg, out, orderCreated("o-1"))
	behind := enqueue(t, pg, out, orderCreated("o-1"))

	done := make(chan producer.BatchResult, 1)
	go func() {
		res, err := a.RunOnce(context.Background())
		if err != nil {
			t.Errorf("first relay: %v", err)
		}
		done <- res
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the first relay never published")
	}
	// Bounded: a second relay waiting on the first one's rows is a failure too.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	res, err := b.RunOnce(ctx)
	cancel()
	if err != nil || res.Claimed != 0 {
		close(release)
		t.Fatalf("while the first relay published the key, the second claimed %+v, %v", res, err)
	}
	close(release)
	if res := <-done; res.Failed != 1 || res.Released != 1 {
		t.Fatalf("first relay %+v, want its event failed and the one behind it released", res)
	}

	if res := runOnce(t, b); res.Claimed != 0 {
		t.Fatalf("before the retry is due the second relay claimed %+v", res)
	}
	clock.Advance(time.Second)
	if res := runOnce(t, b); res.Published != 2 {
		t.Fatalf("after the backoff the second relay did %+v, want both events published", res)
	}
	if got, want := second.ackedIDs("orders"), []string{failing.String(), behind.String()}; !slices.Equal(got, want) {
		t.Fatalf("second relay published %v, want %v (enqueue order)", got, want)
	}
}

// TestTooLargeEnvelopeIsWrittenRaw: a dead letter whose envelope the
// broker refuses as too large is written raw (the original record with the
// dlq_* headers), as the consumer's dlq.Writer does; when the raw record is
// too large too, the event is dead-lettered in the table only, with both
// refusals in its last error.
func TestTooLargeEnvelopeIsWrittenRaw(t *testing.T) {
	t.Parallel()
	for _, rawFits := range []bool{true, false} {
		t.Run(fmt.Sprintf("raw fits %v", rawFits), func(t *testing.T) {
			t.Parallel()
			pg, out := setup(t)
			pub := &fakePublisher{}
			relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, PublishDeadLetters: true, MaxAttempts: 1})
			id := enqueue(t, pg, out, orderCreated("o-1"))
			pub.setFail(func(m *record.Record) error {
				switch {
				case m.Topic == "orders":
					return sarama.ErrInvalidRecord // refused for good: dead-lettered at once
				case recordHeader(m, dlq.HeaderFormat) == dlq.FormatEnvelope, !rawFits:
					return fmt.Errorf("broker: %w", sarama.ErrMessageSizeTooLarge)
				}
				return nil
			})
			if res := runOnce(t, relay); res.DeadLettered != 1 {
				t.Fatalf("batch %+v, want the event dead-lettered", res)
			}
			row := rowOf(t, pg, id)
			letters := pub.ackedOn("orders.dlq")
			if !rawFits {
				if len(letters) != 0 || row.Status != producer.StatusDeadLettered || row.LastError == nil ||
					!strings.Contains(*row.LastError, "not written to orders.dlq") || !strings.Contains(*row.LastError, "so was the raw record") {
					t.Fatalf("%d dead letters written, row %+v: want none written and both refusals in the last error", len(letters), row)
				}
				return
			}
			if len(letters) != 1 || recordHeader(letters[0], dlq.HeaderFormat) != dlq.FormatRaw {
				t.Fatalf("%d dead letters written, want one raw one", len(letters))
			}
			if got, want := string(letters[0].Value), `{"order_id":"o-1"}`; got != want || string(letters[0].Key) != "o-1" ||
				recordHeader(letters[0], producer.HeaderID) != id.String() {
				t.Errorf("raw dead letter %q=%q (ce_id %s), want the original record o-1=%s (ce_id %s)",
					letters[0].Key, got, recordHeader(letters[0], producer.HeaderID), want, id)
			}
			if row.Status != producer.StatusDeadLettered || row.LastError == nil || strings.Contains(*row.LastError, "not written") {
				t.Errorf("row %+v, want dead_lettered with its dead letter written", row)
			}
		})
	}
}
