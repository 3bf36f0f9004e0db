package producer_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// hostileEvent is one bad event of TestHostileEnqueue: what is wrong with
// it, the error and field it must be refused with, and a word the message
// must hold besides the field.
type hostileEvent struct {
	name   string
	change func(*producer.Event)
	want   error
	field  string
	says   string
}

// hostileEvents are events a careless or hostile caller can build, each of
// which PostgreSQL or Kafka would refuse (and PostgreSQL by aborting the
// caller's transaction), or courier's consumers would misread.
func hostileEvents() []hostileEvent {
	header := func(name, value string) func(*producer.Event) {
		return func(e *producer.Event) { e.Headers = map[string]string{"x-ok": "1", name: value} }
	}
	long := strings.Repeat("k", producer.MaxKeyBytes+1)
	return []hostileEvent{
		{"NUL in a quoted content type parameter", func(e *producer.Event) { e.ContentType = "application/json; charset=\"utf\x00-8\"" },
			producer.ErrInvalidText, "ContentType", `\x00`},
		{"content type not UTF-8", func(e *producer.Event) { e.ContentType = "text/plain; name=\xff\xfe" },
			producer.ErrInvalidText, "ContentType", `\xff`},
		{"content type over 2048 bytes", func(e *producer.Event) { e.ContentType = "text/plain; x=" + strings.Repeat("a", 2048) },
			producer.ErrTooLong, "ContentType", "2062 bytes"},
		{"NotBefore past PostgreSQL's end (294277 AD)", func(e *producer.Event) { e.NotBefore = time.Date(294277, 1, 1, 0, 0, 0, 0, time.UTC) },
			producer.ErrInvalidTime, "NotBefore", "294277"},
		{"NotBefore before PostgreSQL's start (4714 BC)", func(e *producer.Event) { e.NotBefore = time.Date(-4713, 11, 23, 0, 0, 0, 0, time.UTC) },
			producer.ErrInvalidTime, "NotBefore", "-4713"},
		{"NotBefore past microseconds in int64", func(e *producer.Event) { e.NotBefore = time.Date(300_000_000, 1, 1, 0, 0, 0, 0, time.UTC) },
			producer.ErrInvalidTime, "NotBefore", "years 1 and 9999"},
		{"NotBefore in the year 10000", func(e *producer.Event) {
			e.NotBefore = time.Date(10000, 1, 1, 2, 0, 0, 0, time.FixedZone("east", 3600))
		},
			producer.ErrInvalidTime, "NotBefore", "9999"},
		{"replay_count header", header("replay_count", "0"), producer.ErrReservedHeader, "Headers[replay_count]", "replay"},
		{"Replay_Count header in another case", header("Replay_Count", "1"), producer.ErrReservedHeader, "Headers[Replay_Count]", "replay"},
		{"dlq_replay_count header", header("dlq_replay_count", "1"), producer.ErrReservedHeader, "Headers[dlq_replay_count]", `"dlq_"`},
		{"forged retry_original_topic header", header("retry_original_topic", "payments"), producer.ErrReservedHeader, "Headers[retry_original_topic]", `"retry_"`},
		{"ce_source header", header("ce_source", "me"), producer.ErrReservedHeader, "Headers[ce_source]", `"ce_"`},
		{"NUL in a header name", header("x-a\x00b", "v"), producer.ErrInvalidText, `Headers["x-a\x00b"]`, "name"},
		{"NUL in a header value (jsonb refuses \\u0000)", header("x-note", "a\x00b"), producer.ErrInvalidText, "Headers[x-note]", "value"},
		{"header name not UTF-8", header("x-\xc3\x28", "v"), producer.ErrInvalidText, `Headers["x-\xc3("]`, "name"},
		{"header name over 2048 bytes", header(strings.Repeat("h", 2049), "v"), producer.ErrTooLong, `Headers["hhhh`, "2049 bytes"},
		{"headers over the record limit", header("x-big", strings.Repeat("v", producer.DefaultMaxPayloadBytes)), producer.ErrRecordTooLarge, "Headers", "MaxPayloadBytes"},
		{"NUL in the topic", func(e *producer.Event) { e.Topic = "orders\x00" }, producer.ErrInvalidTopic, "Topic", `\x00`},
		{"topic not UTF-8", func(e *producer.Event) { e.Topic = "orders\xff" }, producer.ErrInvalidTopic, "Topic", `\xff`},
		{"topic Kafka refuses", func(e *producer.Event) { e.Topic = "bad topic!" }, producer.ErrInvalidTopic, "Topic", "ASCII letters"},
		{"topic of 250 characters", func(e *producer.Event) { e.Topic = strings.Repeat("t", 250) }, producer.ErrInvalidTopic, "Topic", "249"},
		{"empty topic", func(e *producer.Event) { e.Topic = "" }, producer.ErrEmptyTopic, "Topic", "empty"},
		{"empty type", func(e *producer.Event) { e.Type = "" }, producer.ErrMissingType, "Type", "OrderCreated"},
		{"NUL in the type", func(e *producer.Event) { e.Type = "Order\x00Created" }, producer.ErrInvalidText, "Type", `\x00`},
		{"type not UTF-8", func(e *producer.Event) { e.Type = "Order\xe2\x82" }, producer.ErrInvalidText, "Type", `\xe2`},
		{"NUL in the key", func(e *producer.Event) { e.Key = "\x00" }, producer.ErrInvalidText, "Key", `\x00`},
		{"key over 2048 bytes (the waiting index's limit)", func(e *producer.Event) { e.Key = long }, producer.ErrTooLong, "Key", "2049 bytes"},
		{"NUL in the idempotency key", func(e *producer.Event) { e.IdempotencyKey = "k\x00" }, producer.ErrInvalidText, "IdempotencyKey", `\x00`},
		{"idempotency key over 2048 bytes (the keys index's limit)", func(e *producer.Event) { e.IdempotencyKey = long }, producer.ErrTooLong, "IdempotencyKey", "2049 bytes"},
		{"NUL in the aggregate type", func(e *producer.Event) { e.AggregateType = "Order\x00" }, producer.ErrInvalidText, "AggregateType", `\x00`},
		{"aggregate id not UTF-8", func(e *producer.Event) { e.AggregateID = "\xed\xa0\x80" }, producer.ErrInvalidText, "AggregateID", `\xed`},
		{"tenant id over 2048 bytes", func(e *producer.Event) { e.TenantID = strings.Repeat("t", 4096) }, producer.ErrTooLong, "TenantID", "4096 bytes"},
		{"NUL in the correlation id", func(e *producer.Event) { e.CorrelationID = "\x00corr" }, producer.ErrInvalidText, "CorrelationID", `\x00`},
		{"causation id not UTF-8", func(e *producer.Event) { e.CausationID = "\x80" }, producer.ErrInvalidText, "CausationID", `\x80`},
		{"negative max retries", func(e *producer.Event) { e.MaxAttempts = -1 }, producer.ErrInvalidMaxAttempts, "MaxAttempts", "-1"},
		{"max retries past int4", func(e *producer.Event) { e.MaxAttempts = 1 << 40 }, producer.ErrInvalidMaxAttempts, "MaxAttempts", "2147483647"},
		{"payload over 1 MiB", func(e *producer.Event) {
			e.ContentType = "application/octet-stream"
			e.Payload = make([]byte, producer.DefaultMaxPayloadBytes+1)
		}, producer.ErrPayloadTooLarge, "Payload", "1048577 bytes"},
		{"payload not JSON", func(e *producer.Event) { e.Payload = []byte("{\x00}") }, producer.ErrInvalidJSON, "Payload", "application/json"},
		{"payload of exactly 1 MiB, over Kafka's limit with the relay's headers", func(e *producer.Event) {
			e.Key, e.ContentType = "", "application/octet-stream"
			e.Payload = make([]byte, producer.DefaultMaxPayloadBytes)
		}, producer.ErrRecordTooLarge, "Payload", "the relay's ce_ headers and Kafka's framing"},
		{"key and payload over the record limit together", func(e *producer.Event) {
			e.Key, e.ContentType = strings.Repeat("k", producer.MaxKeyBytes), "application/octet-stream"
			e.Payload = make([]byte, producer.DefaultMaxPayloadBytes-producer.MaxKeyBytes)
		}, producer.ErrRecordTooLarge, "Payload", "key 2048"},
		{"attributes and payload over the record limit together", func(e *producer.Event) {
			e.ContentType = "application/octet-stream"
			e.TenantID, e.CorrelationID = strings.Repeat("t", 2048), strings.Repeat("c", 2048)
			e.Payload = make([]byte, producer.DefaultMaxPayloadBytes-4096)
		}, producer.ErrRecordTooLarge, "Payload", "limit 1048576 (Config.MaxPayloadBytes)"},
	}
}

// hostileRun is one way to enqueue an event: alone, or at an index of a
// batch of good events (a small one goes as an INSERT, a large one as a
// COPY).
type hostileRun struct {
	name  string
	size  int // 0: Enqueue
	index int
}

var hostileRuns = []hostileRun{{"Enqueue", 0, 0}, {"EnqueueBatch/small", 3, 1}, {"EnqueueBatch/copy", 64, 40}}

// enqueueIn runs r with bad in tx and returns the error, the good events
// being orders of the given prefix.
func (r hostileRun) enqueueIn(ctx context.Context, out *producer.Outbox, tx pgx.Tx, prefix string, bad producer.Event) error {
	if r.size == 0 {
		_, err := out.Enqueue(ctx, tx, bad)
		return err
	}
	events := make([]producer.Event, r.size)
	for i := range events {
		events[i] = orderCreated(fmt.Sprintf("%s-%d", prefix, i))
	}
	events[r.index] = bad
	_, err := out.EnqueueBatch(ctx, tx, events)
	return err
}

// TestHostileEnqueue enqueues each hostile event alone and in a batch, in
// a transaction that wrote a business row first, and checks that it is
// refused with an *EventError naming the field (and the event's index),
// that nothing of it is written, and that the transaction is still usable:
// another business row and a good event go in after it and commit.
func TestHostileEnqueue(t *testing.T) {
	t.Parallel()
	pg, out := setupOrders(t)
	ctx := context.Background()
	for _, hc := range hostileEvents() {
		for _, run := range hostileRuns {
			t.Run(hc.name+"/"+run.name, func(t *testing.T) {
				prefix := testkit.UniqueName(t, 20)
				bad := orderCreated(prefix + "-bad")
				hc.change(&bad)
				tx, err := refusedIn(ctx, t, pg, prefix, func(tx pgx.Tx) error { return run.enqueueIn(ctx, out, tx, prefix, bad) })
				assertEventError(t, err, hc.want, run.index, hc.field, hc.says)
				assertStillUsable(ctx, t, pg, out, tx, prefix, 0)
			})
		}
	}
}

// setupOrders is setup with a business table, orders, beside the outbox.
func setupOrders(t *testing.T) (*testkit.PG, *producer.Outbox) {
	t.Helper()
	pg, out := setup(t)
	if _, err := pg.Pool.Exec(context.Background(), "CREATE TABLE orders (id text PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	return pg, out
}

// refusedIn begins a transaction that writes the business row
// <prefix>-before, runs enqueue in it, checks that enqueue wrote no event,
// and returns the transaction (rolled back at the end of the test unless
// committed) and enqueue's error.
func refusedIn(ctx context.Context, t *testing.T, pg *testkit.PG, prefix string, enqueue func(pgx.Tx) error) (pgx.Tx, error) {
	t.Helper()
	tx, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES ($1)", prefix+"-before"); err != nil {
		t.Fatal(err)
	}
	before := countRows(t, tx, "true")
	err = enqueue(tx)
	if evErr, ok := errors.AsType[*producer.EventError](err); ok {
		if n := countRows(t, tx, "true") - before; n != 0 {
			t.Fatalf("%d events written by the refused enqueue (%v), want none", n, evErr)
		}
	}
	return tx, err
}

// assertEventError checks that err is an *EventError for event index and
// field, matches want, and says so in its message, with says in it too.
func assertEventError(t *testing.T, err, want error, index int, field, says string) {
	t.Helper()
	evErr, ok := errors.AsType[*producer.EventError](err)
	if !ok {
		t.Fatalf("error %v (%T): want an *producer.EventError", err, err)
	}
	if !errors.Is(err, want) || evErr.Index != index || !strings.HasPrefix(evErr.Field, field) {
		t.Fatalf("error %v: want %v for event %d, field %s; got event %d, field %s", err, want, index, field, evErr.Index, evErr.Field)
	}
	msg := err.Error()
	for _, part := range []string{fmt.Sprintf("event %d", index), evErr.Field, want.Error(), says} {
		if !strings.Contains(msg, part) {
			t.Fatalf("message %q does not say %q", msg, part)
		}
	}
}

// assertStillUsable writes another business row and a good event in tx,
// commits, and checks that both rows of the business and the good event
// were committed, and others events of the prefix besides.
func assertStillUsable(ctx context.Context, t *testing.T, pg *testkit.PG, out *producer.Outbox, tx pgx.Tx, prefix string, others int) {
	t.Helper()
	if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES ($1)", prefix+"-after"); err != nil {
		t.Fatalf("the transaction is not usable after the refusal: %v", err)
	}
	good, err := out.Enqueue(ctx, tx, orderCreated(prefix+"-good"))
	if err != nil {
		t.Fatalf("a good event after the refusal: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("commit after the refusal: %v", err)
	}
	var orders int
	if err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM orders WHERE id LIKE $1", prefix+"-%").Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if orders != 2 {
		t.Fatalf("%d business rows committed, want 2", orders)
	}
	if n := countRows(t, pg.Pool, "partition_key LIKE $1", prefix+"-%"); n != others+1 {
		t.Fatalf("%d events of the transaction committed, want %d and the good one", n, others)
	}
	if n := countRows(t, pg.Pool, "id = $1", good.ID); n != 1 {
		t.Fatalf("the good event %s is not in the outbox", good.ID)
	}
}

// TestReservedHeadersMatchTheirContracts keeps Enqueue's reserved names in
// step with the packages that give them meaning.
func TestReservedHeadersMatchTheirContracts(t *testing.T) {
	out, err := producer.NewOutbox(producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{dlq.ReplayCountHeader, dlq.HeaderReplayCount, dlq.HeaderOriginalTopic, "retry_attempt", "ce_id", "content-type"} {
		ev := orderCreated("o-1")
		ev.Headers = map[string]string{name: "1"}
		// Validation comes before any SQL: a nil-free handle that fails
		// every statement proves none was sent.
		_, err := out.Enqueue(context.Background(), failingDB{}, ev)
		if !errors.Is(err, producer.ErrReservedHeader) {
			t.Errorf("header %s: Enqueue = %v, want ErrReservedHeader", name, err)
		}
	}
}

// TestEnqueueEmptyBatchSendsNothing: an empty batch is no error, sends no
// statement and returns no result.
func TestEnqueueEmptyBatchSendsNothing(t *testing.T) {
	out, err := producer.NewOutbox(producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, events := range [][]producer.Event{nil, {}} {
		res, err := out.EnqueueBatch(context.Background(), failingDB{}, events)
		if err != nil || len(res) != 0 {
			t.Fatalf("EnqueueBatch(%#v) = %v, %v; want nothing, no error and no statement", events, res, err)
		}
	}
}

// TestEnqueueRefusesAnIDTwiceInABatch: two events of a batch with one id
// are refused before any SQL, naming the second.
func TestEnqueueRefusesAnIDTwiceInABatch(t *testing.T) {
	t.Parallel()
	pg, out := setupOrders(t)
	ctx := context.Background()
	for _, run := range hostileRuns[1:] {
		t.Run(run.name, func(t *testing.T) {
			prefix := testkit.UniqueName(t, 20)
			events := make([]producer.Event, run.size)
			for i := range events {
				events[i] = orderCreated(fmt.Sprintf("%s-%d", prefix, i))
				events[i].ID = uuid.New()
			}
			events[run.index].ID = events[0].ID
			tx, err := refusedIn(ctx, t, pg, prefix, func(tx pgx.Tx) error {
				_, err := out.EnqueueBatch(ctx, tx, events)
				return err
			})
			assertEventError(t, err, producer.ErrDuplicateID, run.index, "ID", "event 0's id too")
			assertStillUsable(ctx, t, pg, out, tx, prefix, 0)
			if _, err := out.EnqueueBatch(ctx, failingDB{}, events); !errors.Is(err, producer.ErrDuplicateID) {
				t.Fatalf("EnqueueBatch sent SQL before it refused the batch: %v", err)
			}
		})
	}
}

// failingDB fails every statement: an enqueue through it that returns an
// *EventError refused the event before any SQL.
type failingDB struct{ producer.DBTX }

var errNoSQL = errors.New("failingDB: no statement expected")

func (failingDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, errNoSQL
}
func (failingDB) Query(context.Context, string, ...any) (pgx.Rows, error) { return nil, errNoSQL }
func (failingDB) QueryRow(context.Context, string, ...any) pgx.Row        { return failedRow{} }

type failedRow struct{}

func (failedRow) Scan(...any) error { return errNoSQL }

// TestEnqueueRefusesAnIDEnqueuedBefore: an event whose id of its own was
// enqueued and committed before, wherever that event is now (moved on by
// the relay, or deleted), is refused with ErrDuplicateID through Enqueue,
// an INSERT batch and a batch the size of a COPY, with idempotency keys
// (claimed as the events are written) or without (the ids claimed before
// a COPY); nothing of the batch is
// written, its other keys and ids stay free, and the caller's transaction
// commits its other work.
func TestEnqueueRefusesAnIDEnqueuedBefore(t *testing.T) {
	t.Parallel()
	pg, out := setupOrders(t)
	ctx := context.Background()
	taken := orderCreated("o-taken")
	taken.ID = uuid.New()
	if _, err := out.Enqueue(ctx, pg.Pool, taken); err != nil {
		t.Fatal(err)
	}
	// The relay deletes published events from the queue: the id stays
	// taken.
	if _, err := pg.Pool.Exec(ctx, "DELETE FROM courier_outbox WHERE id = $1", taken.ID); err != nil {
		t.Fatal(err)
	}
	for _, withKeys := range []bool{false, true} {
		for _, run := range hostileRuns {
			t.Run(fmt.Sprintf("%s/with keys=%v", run.name, withKeys), func(t *testing.T) {
				prefix := testkit.UniqueName(t, 20)
				events := make([]producer.Event, max(run.size, 1))
				for i := range events {
					events[i] = orderCreated(fmt.Sprintf("%s-%d", prefix, i))
					events[i].ID = uuid.New()
					if withKeys && i%2 == 0 {
						events[i].IdempotencyKey = events[i].Key
					}
				}
				again := events[run.index]
				again.ID = taken.ID
				events[run.index] = again
				tx, err := refusedIn(ctx, t, pg, prefix, func(tx pgx.Tx) error {
					if run.size == 0 {
						_, err := out.Enqueue(ctx, tx, events[0])
						return err
					}
					_, err := out.EnqueueBatch(ctx, tx, events)
					return err
				})
				assertEventError(t, err, producer.ErrDuplicateID, run.index, "ID", taken.ID.String())
				// Nothing of the refused batch holds a key or an id: the
				// same events but the taken one go in, as new events.
				rest := append(events[:run.index:run.index], events[run.index+1:]...)
				res, err := out.EnqueueBatch(ctx, tx, rest)
				if err != nil {
					t.Fatalf("the rest of the refused batch: %v", err)
				}
				for i, r := range res {
					if r.Duplicate || r.ID != rest[i].ID {
						t.Fatalf("event %d of the rest: %+v, want a new event with id %s", i, r, rest[i].ID)
					}
				}
				assertStillUsable(ctx, t, pg, out, tx, prefix, len(rest))
				if n := countRows(t, pg.Pool, "id = $1", taken.ID); n != 0 {
					t.Fatalf("%d events with the taken id, want none", n)
				}
			})
		}
	}
}

// TestOwnIDOfADuplicateKeyStaysFree: an event whose idempotency key was
// taken is not written, and its id of its own is not taken either.
func TestOwnIDOfADuplicateKeyStaysFree(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	first := orderCreated("o-1")
	first.IdempotencyKey = "create-o-1"
	held, err := out.Enqueue(ctx, pg.Pool, first)
	if err != nil {
		t.Fatal(err)
	}
	retry := first
	retry.ID = uuid.New()
	res, err := out.Enqueue(ctx, pg.Pool, retry)
	if err != nil || !res.Duplicate || res.ID != held.ID {
		t.Fatalf("Enqueue of a taken key = %+v, %v; want the duplicate of %s", res, err, held.ID)
	}
	other := orderCreated("o-2")
	other.ID = retry.ID
	if res, err := out.Enqueue(ctx, pg.Pool, other); err != nil || res.ID != retry.ID || res.Duplicate {
		t.Fatalf("Enqueue with the id of an event never written = %+v, %v; want it written", res, err)
	}
}

// TestOwnIDUnderConcurrentTransactions: transactions that enqueue events
// with the same id of their own at once write one of them; each other one
// waits for the writer, gets ErrDuplicateID when it commits, and still
// commits its own business row. When the writer rolls back, the id is
// free again and a waiter writes its event.
func TestOwnIDUnderConcurrentTransactions(t *testing.T) {
	t.Parallel()
	pg, out := setupOrders(t)
	ctx := context.Background()
	const n = 8
	pool := pg.NewPool(t, n+1)
	for _, holderCommits := range []bool{true, false} {
		t.Run(fmt.Sprintf("holder commits=%v", holderCommits), func(t *testing.T) {
			id := uuid.New()
			prefix := testkit.UniqueName(t, 20)
			holder, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = holder.Rollback(ctx) }()
			ev := orderCreated(prefix + "-holder")
			ev.ID = id
			if _, err := out.Enqueue(ctx, holder, ev); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make([]error, n)
			written := make([]bool, n)
			for i := range n {
				wg.Go(func() {
					tx, err := pool.Begin(ctx)
					if err != nil {
						errs[i] = err
						return
					}
					defer func() { _ = tx.Rollback(ctx) }()
					if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES ($1)", fmt.Sprintf("%s-%d", prefix, i)); err != nil {
						errs[i] = err
						return
					}
					ev := orderCreated(fmt.Sprintf("%s-%d", prefix, i))
					ev.ID = id
					_, err = out.Enqueue(ctx, tx, ev)
					written[i] = err == nil
					if err != nil && !errors.Is(err, producer.ErrDuplicateID) {
						errs[i] = fmt.Errorf("waiter %d: %w, want nil or ErrDuplicateID", i, err)
						return
					}
					errs[i] = tx.Commit(ctx)
				})
			}
			testkit.WaitFor(t, time.Minute, "every waiter blocked on the holder's id", func() bool {
				var waiting int
				err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%courier_outbox_keys%'`).Scan(&waiting)
				return err == nil && waiting == n
			})
			if holderCommits {
				err = holder.Commit(ctx)
			} else {
				err = holder.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			writers := 0
			for _, w := range written {
				if w {
					writers++
				}
			}
			if want := map[bool]int{true: 0, false: 1}[holderCommits]; writers != want {
				t.Fatalf("%d waiters wrote the event, want %d", writers, want)
			}
			if c := countRows(t, pg.Pool, "id = $1", id); c != 1 {
				t.Fatalf("%d events with the id, want 1", c)
			}
			var orders int
			if err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM orders WHERE id LIKE $1", prefix+"-%").Scan(&orders); err != nil {
				t.Fatal(err)
			}
			if orders != n {
				t.Fatalf("%d business rows of the waiters committed, want %d", orders, n)
			}
		})
	}
}

// TestLargestAcceptedEventPublishes: the largest event Enqueue accepts with
// the default MaxPayloadBytes, of a minimal event and of one with a key,
// headers and every attribute, is published whole by a relay with the
// default Sarama configuration to a broker with the default
// message.max.bytes; one byte more is refused by Enqueue with
// ErrRecordTooLarge, so no event Enqueue accepts is too large to publish.
// The largest is the one Config.MaxPayload computes.
func TestLargestAcceptedEventPublishes(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 1)
	ctx := context.Background()
	rich := producer.Event{Topic: topic, Key: strings.Repeat("k", 300), Type: "Blob", ContentType: "application/octet-stream",
		Headers:       map[string]string{"x-a": strings.Repeat("a", 100), "x-b": "b"},
		AggregateType: "Order", AggregateID: "o-1", TenantID: "t-1", CorrelationID: "c-1", CausationID: "c-0"}
	minimal := producer.Event{Topic: topic, Type: "B", ContentType: "application/octet-stream"}
	var ids []uuid.UUID
	var sizes []int
	for _, ev := range []producer.Event{minimal, rich} {
		// Enqueue refuses before any SQL: try sizes in a transaction
		// rolled back.
		accepts := func(n int) bool {
			tx, err := pg.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = tx.Rollback(ctx) }()
			ev.Payload = make([]byte, n)
			_, err = out.Enqueue(ctx, tx, ev)
			if err != nil && !errors.Is(err, producer.ErrRecordTooLarge) {
				t.Fatalf("a payload of %d bytes: %v, want ErrRecordTooLarge or nothing", n, err)
			}
			return err == nil
		}
		lo, hi := 0, producer.DefaultMaxPayloadBytes // accepts(lo), !accepts(hi)
		if !accepts(lo) || accepts(hi) {
			t.Fatalf("want an empty payload accepted and one of 1 MiB refused")
		}
		for hi-lo > 1 {
			if mid := (lo + hi) / 2; accepts(mid) {
				lo = mid
			} else {
				hi = mid
			}
		}
		if room := (producer.Config{}).MaxPayload(ev); lo != room {
			t.Errorf("the largest payload Enqueue accepts is %d bytes, Config.MaxPayload says %d", lo, room)
		}
		ev.Payload = make([]byte, lo+1)
		_, err := out.Enqueue(ctx, pg.Pool, ev)
		assertEventError(t, err, producer.ErrRecordTooLarge, 0, "", "limit 1048576")
		ev.Payload = make([]byte, lo)
		ev.Payload[lo-1] = 'z'
		ids = append(ids, enqueue(t, pg, out, ev))
		sizes = append(sizes, lo)
		t.Logf("largest payload accepted: %d bytes (%d short of 1 MiB) for a key of %d bytes and %d headers",
			lo, producer.DefaultMaxPayloadBytes-lo, len(ev.Key), len(ev.Headers))
	}
	kafka := consume(t, k, topic)
	runRelay(t, newRelay(t, pg, k, producer.RelayConfig{PollInterval: 20 * time.Millisecond}))
	testkit.WaitFor(t, 30*time.Second, "both events to be published", func() bool {
		return countRows(t, pg.Pool, "status = 'published'") == 2
	})
	msgs := kafka.waitDistinct(2, 30*time.Second)
	for i, id := range ids {
		found := false
		for _, m := range msgs {
			if headerValue(m, producer.HeaderID) == id.String() {
				found = true
				if len(m.Value) != sizes[i] || m.Value[sizes[i]-1] != 'z' {
					t.Errorf("event %s reached Kafka with a value of %d bytes, want %d", id, len(m.Value), sizes[i])
				}
			}
		}
		if !found {
			t.Errorf("event %s was not published", id)
		}
	}
}
