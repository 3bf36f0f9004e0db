package producer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/courierkit/courier/internal/pgname"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/migrations"
	"github.com/courierkit/courier/producer"
)

// setup gives a test a migrated schema and an Outbox writing to it.
func setup(t *testing.T) (*testkit.PG, *producer.Outbox) {
	t.Helper()
	pg := testkit.Postgres(t)
	pg.Migrate(t)
	out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	return pg, out
}

// newAdmin returns an Admin of pg's outbox.
func newAdmin(t testing.TB, pg *testkit.PG) *producer.Admin {
	t.Helper()
	admin, err := producer.NewAdmin(pg.Pool, producer.AdminConfig{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	return admin
}

func orderCreated(id string) producer.Event {
	return producer.Event{
		Topic:   "orders",
		Key:     id,
		Type:    "OrderCreated",
		Payload: fmt.Appendf(nil, `{"order_id":%q}`, id),
	}
}

func countRows(t *testing.T, db producer.DBTX, where string, args ...any) int {
	t.Helper()
	var n int
	if err := db.QueryRow(context.Background(), "SELECT count(*) FROM courier_events WHERE "+where, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCommitPublishesRollbackRemoves(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()

	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	committed, err := out.Enqueue(ctx, tx, orderCreated("o-1"))
	if err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pg.Pool, "id = $1", committed.ID); n != 0 {
		t.Fatalf("another connection sees %d rows before commit, want 0", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pg.Pool, "id = $1 AND status = 'pending' AND next_attempt_at <= now()", committed.ID); n != 1 {
		t.Fatalf("after commit: %d due pending rows for %s, want 1", n, committed.ID)
	}

	tx, err = pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rolledBack, err := out.Enqueue(ctx, tx, orderCreated("o-2"))
	if err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, tx, "id = $1", rolledBack.ID); n != 1 {
		t.Fatalf("the enqueuing transaction sees %d rows, want its own 1", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pg.Pool, "true"); n != 1 {
		t.Fatalf("after rollback the outbox holds %d rows, want only the committed one", n)
	}
}

func TestEnqueueStoresEveryField(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	notBefore := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	ev := producer.Event{
		Topic:          "payments.v1",
		Key:            "acct-9",
		Type:           "PaymentCaptured",
		Payload:        []byte{0x00, 0xff, 0x10},
		ContentType:    "application/octet-stream",
		Headers:        map[string]string{"x-source-region": "eu-1", "baggage": "a=b"},
		AggregateType:  "Payment",
		AggregateID:    "pay-1",
		TenantID:       "tenant-7",
		CorrelationID:  "corr-1",
		CausationID:    "cause-1",
		IdempotencyKey: "capture-pay-1",
		MaxAttempts:    2,
		NotBefore:      notBefore,
	}
	res, err := out.Enqueue(ctx, pg.Pool, ev)
	if err != nil {
		t.Fatal(err)
	}
	if res.Duplicate || res.ID.Version() != 7 {
		t.Fatalf("Enqueue = %+v, want a new UUIDv7", res)
	}

	var got producer.Event
	var status string
	var retryCount int
	var createdAt time.Time
	err = pg.Pool.QueryRow(ctx, `
		SELECT id, topic, partition_key, event_type, payload, content_type, headers, aggregate_type, aggregate_id,
		       tenant_id, correlation_id, causation_id, idempotency_key, max_retries, next_attempt_at,
		       status, retry_count, created_at
		FROM courier_events`).Scan(&got.ID, &got.Topic, &got.Key, &got.Type, &got.Payload, &got.ContentType, &got.Headers,
		&got.AggregateType, &got.AggregateID, &got.TenantID, &got.CorrelationID, &got.CausationID, &got.IdempotencyKey,
		&got.MaxAttempts, &got.NotBefore, &status, &retryCount, &createdAt)
	if err != nil {
		t.Fatal(err)
	}
	want := ev
	want.ID = res.ID
	if !eventsEqual(got, want) {
		t.Fatalf("stored event:\n got %+v\nwant %+v", got, want)
	}
	if status != "pending" || retryCount != 0 || time.Since(createdAt) > time.Minute {
		t.Fatalf("status %q, retry_count %d, created_at %v: want pending, 0, now", status, retryCount, createdAt)
	}
}

func eventsEqual(a, b producer.Event) bool {
	if len(a.Headers) != len(b.Headers) {
		return false
	}
	for k, v := range a.Headers {
		if b.Headers[k] != v {
			return false
		}
	}
	a.Headers, b.Headers = nil, nil
	pa, pb := a.Payload, b.Payload
	a.Payload, b.Payload = nil, nil
	na, nb := a.NotBefore, b.NotBefore
	a.NotBefore, b.NotBefore = time.Time{}, time.Time{}
	return bytes.Equal(pa, pb) && na.Equal(nb) && fmt.Sprint(a) == fmt.Sprint(b)
}

func TestOptionalFieldsAreStoredAsNull(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	res, err := out.Enqueue(ctx, pg.Pool, producer.Event{Topic: "orders", Type: "OrderCreated", Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	n := countRows(t, pg.Pool, `id = $1 AND partition_key IS NULL AND aggregate_type IS NULL AND aggregate_id IS NULL
		AND tenant_id IS NULL AND correlation_id IS NULL AND causation_id IS NULL AND idempotency_key IS NULL
		AND max_retries IS NULL AND headers = '{}'::jsonb AND content_type = 'application/json'
		AND next_attempt_at = created_at`, res.ID)
	if n != 1 {
		t.Fatal("optional fields were not stored as NULL / defaults")
	}
}

func TestCallerChosenIDIsKept(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	id := uuid.New()
	ev := orderCreated("o-1")
	ev.ID = id
	res, err := out.Enqueue(context.Background(), pg.Pool, ev)
	if err != nil || res.ID != id {
		t.Fatalf("Enqueue = %+v, %v; want the caller's id %s", res, err, id)
	}
}

// TestEnqueueAcceptsEveryPgxHandle runs Enqueue through a transaction, a
// pool, a pooled connection and a plain pgx.Conn.
func TestEnqueueAcceptsEveryPgxHandle(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	pooled, err := pg.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pooled.Release()
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, db := range map[string]producer.DBTX{"pgx.Tx": tx, "pgxpool.Pool": pg.Pool, "pgxpool.Conn": pooled, "pgx.Conn": conn} {
		if _, err := out.Enqueue(ctx, db, orderCreated(name)); err != nil {
			t.Errorf("Enqueue through %s: %v", name, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pg.Pool, "true"); n != 4 {
		t.Fatalf("outbox holds %d rows, want 4", n)
	}
}

// countingDB counts the statements sent through it.
type countingDB struct {
	producer.DBTX
	queries int
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.queries++
	return c.DBTX.Query(ctx, sql, args...)
}

func (c *countingDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.queries++
	return c.DBTX.Exec(ctx, sql, args...)
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.queries++
	return c.DBTX.QueryRow(ctx, sql, args...)
}

func TestEnqueueBatchIsOneRoundTripInSliceOrder(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	var events []producer.Event
	for i := range 500 {
		ev := orderCreated(fmt.Sprintf("o-%d", i%10))
		ev.Payload = fmt.Appendf(nil, `{"n":%d}`, i)
		events = append(events, ev)
	}
	db := &countingDB{DBTX: pg.Pool}
	res, err := out.EnqueueBatch(ctx, db, events)
	if err != nil {
		t.Fatal(err)
	}
	if db.queries != 1 {
		t.Fatalf("EnqueueBatch of 500 new events sent %d statements, want 1", db.queries)
	}
	rows, err := pg.Pool.Query(ctx, "SELECT id, payload FROM courier_events ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	i := 0
	var id uuid.UUID
	var payload []byte
	if _, err := pgx.ForEachRow(rows, []any{&id, &payload}, func() error {
		if id != res[i].ID || !bytes.Equal(payload, events[i].Payload) || res[i].Duplicate {
			return fmt.Errorf("row %d by seq: id %s payload %s; want id %s payload %s", i, id, payload, res[i].ID, events[i].Payload)
		}
		i++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if i != len(events) {
		t.Fatalf("outbox holds %d rows, want %d", i, len(events))
	}
}

func TestIdempotencyKeySequentialAndInBatch(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	withKey := func(topic, key string) producer.Event {
		ev := orderCreated(key)
		ev.Topic, ev.IdempotencyKey = topic, key
		return ev
	}
	first, err := out.Enqueue(ctx, pg.Pool, withKey("orders", "k1"))
	if err != nil {
		t.Fatal(err)
	}
	db := &countingDB{DBTX: pg.Pool}
	res, err := out.EnqueueBatch(ctx, db, []producer.Event{
		withKey("orders", "k1"),   // duplicate of an earlier enqueue
		withKey("invoices", "k1"), // same key, other topic: new
		withKey("orders", "k2"),   // new
		withKey("orders", "k2"),   // duplicate within the batch
		orderCreated("no-key"),    // no idempotency key: always new
	})
	if err != nil {
		t.Fatal(err)
	}
	if db.queries != 2 {
		t.Fatalf("a batch with duplicates sent %d statements, want 2", db.queries)
	}
	if res[0] != (producer.Enqueued{ID: first.ID, Duplicate: true}) {
		t.Errorf("repeat of k1: %+v, want duplicate of %s", res[0], first.ID)
	}
	if res[1].Duplicate || res[1].ID == first.ID {
		t.Errorf("k1 on another topic: %+v, want a new event", res[1])
	}
	if res[2].Duplicate || res[3] != (producer.Enqueued{ID: res[2].ID, Duplicate: true}) {
		t.Errorf("k2 twice in one batch: %+v then %+v, want new then duplicate of the first", res[2], res[3])
	}
	if res[4].Duplicate {
		t.Errorf("event without idempotency key: %+v, want new", res[4])
	}
	if n := countRows(t, pg.Pool, "true"); n != 4 {
		t.Fatalf("outbox holds %d rows, want 4", n)
	}
}

// TestIdempotencyUnderConcurrentTransactions opens 20 transactions that
// enqueue the same (topic, idempotency key) at once: exactly one row is
// written and every transaction learns its id.
func TestIdempotencyUnderConcurrentTransactions(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	const n = 20
	pool := pg.NewPool(t, n)
	var ready, wg sync.WaitGroup
	ready.Add(n)
	start := make(chan struct{})
	results := make([]producer.Enqueued, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			tx, err := pool.Begin(ctx)
			ready.Done()
			if err != nil {
				errs[i] = err
				return
			}
			defer tx.Rollback(ctx)
			<-start
			ev := orderCreated("o-1")
			ev.IdempotencyKey = "create-o-1"
			ev.Payload = fmt.Appendf(nil, `{"writer":%d}`, i)
			if results[i], errs[i] = out.Enqueue(ctx, tx, ev); errs[i] == nil {
				errs[i] = tx.Commit(ctx)
			}
		})
	}
	ready.Wait() // all 20 transactions are open before any enqueues
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if c := countRows(t, pg.Pool, "idempotency_key = 'create-o-1'"); c != 1 {
		t.Fatalf("%d rows for the key, want exactly 1", c)
	}
	var winner uuid.UUID
	if err := pg.Pool.QueryRow(ctx, "SELECT id FROM courier_events").Scan(&winner); err != nil {
		t.Fatal(err)
	}
	fresh := 0
	for i, r := range results {
		if r.ID != winner {
			t.Errorf("transaction %d reported id %s, want the stored %s", i, r.ID, winner)
		}
		if !r.Duplicate {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d transactions reported a new event, want exactly 1", fresh)
	}
}

// TestIdempotencyKeyFreedByRollback: a transaction waiting on a concurrent
// holder of the same key writes the event itself when the holder rolls back.
func TestIdempotencyKeyFreedByRollback(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	ev := orderCreated("o-1")
	ev.IdempotencyKey = "create-o-1"

	holder, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.Enqueue(ctx, holder, ev); err != nil {
		t.Fatal(err)
	}
	waiterConn, err := pgx.Connect(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	waiterPID := waiterConn.PgConn().PID()
	done := make(chan producer.Enqueued, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		res, err := out.Enqueue(ctx, waiterConn, ev)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	defer func() { // also when the test fails: free the waiter before closing its connection
		_ = holder.Rollback(ctx)
		<-finished
		_ = waiterConn.Close(ctx)
	}()
	// Wait until the waiter blocks on the holder's row lock.
	deadline := time.Now().Add(time.Minute)
	for {
		var waiting bool
		err := pg.Pool.QueryRow(ctx, "SELECT COALESCE(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", waiterPID).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second enqueue never waited on the first transaction")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.Duplicate {
		t.Fatalf("after the holder rolled back: %+v, want a new event", res)
	}
	if n := countRows(t, pg.Pool, "id = $1", res.ID); n != 1 {
		t.Fatalf("the waiter's event is not stored (%d rows)", n)
	}
}

func TestCustomTable(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	ctx := context.Background()
	schema := pg.FreshSchema(t)
	m, err := migrations.New(migrations.Config{Schema: schema, Table: "billing_events"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx, pg.Pool); err != nil {
		t.Fatal(err)
	}
	out, err := producer.NewOutbox(producer.Config{Schema: schema, Table: "billing_events"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := out.Enqueue(ctx, pg.Pool, orderCreated("o-1"))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".billing_events WHERE id = $1", res.ID).Scan(&n); err != nil || n != 1 {
		t.Fatalf("event not in %s.billing_events: %d rows, %v", schema, n, err)
	}

	wrong, err := producer.NewOutbox(producer.Config{Schema: schema, Table: "no_such_table"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = wrong.Enqueue(ctx, pg.Pool, orderCreated("o-2"))
	if err == nil || !strings.Contains(err.Error(), "no_such_table") || !strings.Contains(err.Error(), "courier migrate up --schema "+schema+" --table no_such_table") {
		t.Fatalf("Enqueue into a missing table = %v, want an error naming it and how to create it", err)
	}
}

func TestNewOutboxRejectsInvalidConfig(t *testing.T) {
	for _, cfg := range []producer.Config{
		{Schema: "Public"},
		{Table: "outbox; DROP TABLE orders"},
		{MaxPayloadBytes: -1},
	} {
		if _, err := producer.NewOutbox(cfg); !errors.Is(err, producer.ErrInvalidConfig) {
			t.Errorf("NewOutbox(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := producer.NewOutbox(producer.Config{Table: "Bad"}); !errors.Is(err, pgname.ErrInvalidName) {
		t.Errorf("a bad table name does not match pgname.ErrInvalidName: %v", err)
	}
}

// TestEnqueueBatchCopiesLargeBatches: a batch large enough goes in with COPY
// through a handle that can copy, and stores exactly what the INSERT of a
// handle that cannot stores, in slice order; in a transaction, rollback
// removes it.
func TestEnqueueBatchCopiesLargeBatches(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	batch := func(tag string) []producer.Event {
		var events []producer.Event
		for i := range 100 {
			ev := orderCreated(fmt.Sprintf("o-%d", i%7))
			ev.Topic, ev.Payload = "copy-"+tag, fmt.Appendf(nil, `{"n":%d}`, i)
			if i%3 == 0 {
				ev.Key, ev.AggregateType, ev.AggregateID, ev.TenantID = "", "Order", fmt.Sprint(i), "acme"
				ev.Headers = map[string]string{"x-n": fmt.Sprint(i)}
				ev.MaxAttempts, ev.NotBefore = 2, time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)
			}
			events = append(events, ev)
		}
		return events
	}
	read := func(topic string) []string {
		t.Helper()
		rows, err := pg.Pool.Query(ctx, `SELECT concat_ws('|', partition_key, event_type, aggregate_type, aggregate_id, tenant_id,
			convert_from(payload, 'UTF8'), content_type, headers::text, max_retries, CASE WHEN next_attempt_at > now() THEN next_attempt_at END, status)
			FROM courier_events WHERE topic = $1 ORDER BY seq`, topic)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	if _, err := out.EnqueueBatch(ctx, &countingDB{DBTX: pg.Pool}, batch("insert")); err != nil {
		t.Fatal(err)
	}
	copied, err := out.EnqueueBatch(ctx, pg.Pool, batch("copy"))
	if err != nil {
		t.Fatal(err)
	}
	inserted, got := read("copy-insert"), read("copy-copy")
	if len(got) != 100 || !slices.Equal(got, inserted) {
		t.Fatalf("COPY stored %d rows, unlike the INSERT's %d:\n%v\n%v", len(got), len(inserted), got[:min(3, len(got))], inserted[:min(3, len(inserted))])
	}
	if n := countRows(t, pg.Pool, "id = $1", copied[99].ID); n != 1 {
		t.Fatalf("the last copied event's id %s is stored %d times", copied[99].ID, n)
	}

	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.EnqueueBatch(ctx, tx, batch("rolled-back")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, pg.Pool, "topic = 'copy-rolled-back'"); n != 0 {
		t.Fatalf("%d copied events survived the rollback", n)
	}
}
