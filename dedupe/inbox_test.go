package dedupe_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/internal/pgname"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/migrations"
)

// inboxEnv is an inbox in the test's own schema, and a table the handler
// writes to beside it.
type inboxEnv struct {
	*dedupe.Inbox
	pg *testkit.PG
	t  *testing.T
}

func newInbox(t *testing.T, cfg dedupe.InboxConfig) *inboxEnv {
	t.Helper()
	pg := testkit.Postgres(t)
	m, err := migrations.NewInbox(migrations.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := m.Up(ctx, pg.Pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pg.Pool.Exec(ctx, "CREATE TABLE payouts (id text PRIMARY KEY, amount_cents int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	cfg.Schema = pg.Schema
	if cfg.Scope == "" {
		cfg.Scope = testScope
	}
	if cfg.Logger == nil {
		cfg.Logger = testkit.Logger(t)
	}
	inbox, err := dedupe.NewInbox(pg.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &inboxEnv{Inbox: inbox, pg: pg, t: t}
}

// process is a handler of message id that pays out 100 cents in one
// transaction with the id's record, and then commits or rolls back.
func (e *inboxEnv) process(id string, commit bool) (first bool, err error) {
	ctx := context.Background()
	tx, err := e.pg.Pool.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	first, err = e.Record(ctx, tx, id)
	if err != nil {
		return false, err
	}
	if first {
		if _, err := tx.Exec(ctx, "INSERT INTO payouts (id, amount_cents) VALUES ($1, 100)", id); err != nil {
			return false, err
		}
	}
	if commit {
		return first, tx.Commit(ctx)
	}
	return first, nil
}

// handle runs process and fails the test on an error.
func (e *inboxEnv) handle(id string, commit bool) (first bool) {
	e.t.Helper()
	first, err := e.process(id, commit)
	if err != nil {
		e.t.Fatalf("handling %s: %v", id, err)
	}
	return first
}

func (e *inboxEnv) expect(want dedupe.Status, ids ...string) {
	e.t.Helper()
	got, err := e.Claim(context.Background(), "any", ids, time.Minute)
	if err != nil {
		e.t.Fatalf("Claim(%v): %v", ids, err)
	}
	for i := range ids {
		if got[i] != want {
			e.t.Errorf("Claim of %s = %v, want %v", ids[i], got[i], want)
		}
	}
}

func (e *inboxEnv) count(sql string, args ...any) int {
	e.t.Helper()
	var n int
	if err := e.pg.Pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func TestInboxRecordCommits(t *testing.T) {
	t.Parallel()
	e := newInbox(t, dedupe.InboxConfig{})
	e.expect(dedupe.Claimed, "evt-1")
	if !e.handle("evt-1", true) {
		t.Fatal("first Record of evt-1 says it was processed already")
	}
	e.expect(dedupe.Processed, "evt-1")
	e.expect(dedupe.Claimed, "evt-2")
	if e.handle("evt-1", true) {
		t.Fatal("Record of a processed id says it is new")
	}
	if n := e.count("SELECT count(*) FROM payouts"); n != 1 {
		t.Fatalf("%d payouts after evt-1 was delivered twice, want 1", n)
	}

	// Another scope in the same table has its own ids.
	other, err := dedupe.NewInbox(e.pg.Pool, dedupe.InboxConfig{Schema: e.pg.Schema, Scope: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := other.Claim(context.Background(), "any", []string{"evt-1"}, time.Minute); err != nil || got[0] != dedupe.Claimed {
		t.Fatalf("Claim of evt-1 in another scope = %v, %v; want claimed", got, err)
	}
}

// TestInboxRollbackLeavesIDUnmarked: a handler whose transaction rolls back
// leaves neither its writes nor the id behind, so the message is processed
// when it comes again.
func TestInboxRollbackLeavesIDUnmarked(t *testing.T) {
	t.Parallel()
	e := newInbox(t, dedupe.InboxConfig{})
	if !e.handle("evt-1", false) {
		t.Fatal("first Record of evt-1 says it was processed already")
	}
	e.expect(dedupe.Claimed, "evt-1")
	if n := e.count("SELECT count(*) FROM payouts"); n != 0 {
		t.Fatalf("%d payouts after the rollback, want 0", n)
	}
	if !e.handle("evt-1", true) {
		t.Fatal("Record after a rollback says evt-1 was processed")
	}
	e.expect(dedupe.Processed, "evt-1")
}

// TestInboxConcurrentRecordsTakeEffectOnce records one id in two
// transactions at once: the second waits for the first, and is first only
// when the first rolled back.
func TestInboxConcurrentRecordsTakeEffectOnce(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		e := newInbox(t, dedupe.InboxConfig{})
		ctx := context.Background()
		tx, err := e.pg.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if first, err := e.Record(ctx, tx, "evt-1"); err != nil || !first {
			t.Fatalf("Record in the first transaction = %v, %v; want first", first, err)
		}

		type result struct {
			first bool
			err   error
		}
		second := make(chan result)
		go func() {
			first, err := e.process("evt-1", true)
			second <- result{first, err}
		}()
		testkit.WaitFor(t, 10*time.Second, "the second Record to wait on the first transaction", func() bool {
			return e.count("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'", e.pg.Schema) == 1
		})
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := <-second; got.err != nil || got.first == commit {
			t.Errorf("first transaction committed=%t: the second Record says first=%t (%v), want %t", commit, got.first, got.err, !commit)
		}
		e.expect(dedupe.Processed, "evt-1")
	}
}

func TestInboxWindow(t *testing.T) {
	t.Parallel()
	e := newInbox(t, dedupe.InboxConfig{Window: time.Hour})
	e.handle("evt-1", true)
	e.handle("evt-2", true)
	if _, err := e.pg.Pool.Exec(context.Background(), "UPDATE courier_inbox SET processed_at = now() - interval '61 minutes' WHERE id = 'evt-1'"); err != nil {
		t.Fatal(err)
	}
	e.expect(dedupe.Claimed, "evt-1")
	e.expect(dedupe.Processed, "evt-2")
	if _, err := e.pg.Pool.Exec(context.Background(), "DELETE FROM payouts"); err != nil {
		t.Fatal(err)
	}
	if !e.handle("evt-1", true) {
		t.Fatal("Record of an id processed before the window says it is processed")
	}
	e.expect(dedupe.Processed, "evt-1")
}

func TestInboxCleanup(t *testing.T) {
	t.Parallel()
	e := newInbox(t, dedupe.InboxConfig{Window: time.Hour, CleanupBatch: 3})
	ctx := context.Background()
	_, err := e.pg.Pool.Exec(ctx, `INSERT INTO courier_inbox (scope, id, processed_at)
		SELECT 'payouts', 'old-' || i, now() - interval '2 hours' FROM generate_series(1, 7) i
		UNION ALL SELECT 'payouts', 'new-' || i, now() - interval '59 minutes' FROM generate_series(1, 4) i
		UNION ALL SELECT 'billing', 'old-' || i, now() - interval '2 hours' FROM generate_series(1, 5) i`)
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := e.Cleanup(ctx)
	if err != nil || deleted != 7 {
		t.Fatalf("Cleanup = %d, %v; want the 7 expired ids of the scope, in 3 statements", deleted, err)
	}
	if n := e.count("SELECT count(*) FROM courier_inbox WHERE scope = 'payouts' AND id LIKE 'new-%'"); n != 4 {
		t.Errorf("%d ids within the window left, want 4", n)
	}
	if n := e.count("SELECT count(*) FROM courier_inbox WHERE scope = 'billing'"); n != 5 {
		t.Errorf("%d ids of another scope left, want 5", n)
	}
	if deleted, err := e.Cleanup(ctx); err != nil || deleted != 0 {
		t.Fatalf("second Cleanup = %d, %v; want nothing deleted", deleted, err)
	}
}

func TestInboxRunCleanup(t *testing.T) {
	t.Parallel()
	e := newInbox(t, dedupe.InboxConfig{Window: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	if err := e.RunCleanup(ctx, 0); !errors.Is(err, dedupe.ErrInvalidArgument) {
		t.Fatalf("RunCleanup every 0 = %v, want ErrInvalidArgument", err)
	}
	if _, err := e.pg.Pool.Exec(ctx, "INSERT INTO courier_inbox (scope, id, processed_at) VALUES ('payouts', 'old', now() - interval '2 hours')"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error)
	go func() { done <- e.RunCleanup(ctx, time.Hour) }()
	testkit.WaitFor(t, 10*time.Second, "RunCleanup to delete the expired id at once", func() bool {
		return e.count("SELECT count(*) FROM courier_inbox") == 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunCleanup returned %v when its context ended, want nil", err)
	}
}

func TestInboxBatchInOrder(t *testing.T) {
	t.Parallel()
	e := newInbox(t, dedupe.InboxConfig{})
	e.handle("evt-2", true)
	got, err := e.Claim(context.Background(), "any", []string{"evt-1", "evt-2", "evt-1", "evt-3", "evt-2"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []dedupe.Status{dedupe.Claimed, dedupe.Processed, dedupe.Busy, dedupe.Claimed, dedupe.Busy}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Claim = %v, want %v", got, want)
		}
	}
	if got, err := e.Claim(context.Background(), "any", nil, time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("Claim of no ids = %v, %v; want nothing", got, err)
	}
	// The rest of the Store does nothing: the handler's transaction did it.
	ctx := context.Background()
	if err := errors.Join(
		e.Done(ctx, "a", []string{"evt-1"}),
		e.Release(ctx, "any", []string{"evt-2"}),
		e.Extend(ctx, "any", []string{"evt-2"}, time.Minute),
	); err != nil {
		t.Fatal(err)
	}
	e.expect(dedupe.Claimed, "evt-1")
	e.expect(dedupe.Processed, "evt-2")
}

func TestInboxMissingTableSaysHowToCreateIt(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	ctx := context.Background()
	for _, cfg := range []struct {
		cfg  dedupe.InboxConfig
		hint string
	}{
		{dedupe.InboxConfig{Schema: pg.Schema, Scope: testScope}, "run `courier migrate up --inbox --schema " + pg.Schema + "`"},
		{dedupe.InboxConfig{Schema: pg.Schema, Table: "billing_inbox", Scope: testScope}, "--schema " + pg.Schema + " --table billing_inbox`"},
	} {
		inbox, err := dedupe.NewInbox(pg.Pool, cfg.cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, claimErr := inbox.Claim(ctx, "any", []string{"evt-1"}, time.Minute)
		_, recordErr := inbox.Record(ctx, pg.Pool, "evt-1")
		_, cleanupErr := inbox.Cleanup(ctx)
		for name, err := range map[string]error{"Claim": claimErr, "Record": recordErr, "Cleanup": cleanupErr} {
			if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "42P01" || !strings.Contains(err.Error(), cfg.hint) {
				t.Errorf("%s without the table = %v, want SQLSTATE 42P01 and %q", name, err, cfg.hint)
			}
		}
	}
}

// closedPool returns a pool on a port where no PostgreSQL listens.
func closedPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/test?connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func TestInboxUnreachableDatabaseSaysHowToStartIt(t *testing.T) {
	t.Parallel()
	inbox, err := dedupe.NewInbox(closedPool(t), dedupe.InboxConfig{Scope: testScope})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inbox.Claim(context.Background(), "any", []string{"evt-1"}, time.Minute); err == nil || !strings.Contains(err.Error(), "make services") {
		t.Fatalf("Claim against a closed port = %v, want a hint to run make services", err)
	}
}

func TestNewInboxRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	pool := closedPool(t)
	newInbox := func(db dedupe.DB, cfg dedupe.InboxConfig) error { return errOf(dedupe.NewInbox(db, cfg)) }
	expectInvalidConfig(t, []invalidConfig{
		{newInbox(nil, dedupe.InboxConfig{Scope: "payouts"}), "DB is nil"},
		{newInbox(pool, dedupe.InboxConfig{}), "set Scope, usually the consumer group"},
		{newInbox(pool, dedupe.InboxConfig{Scope: "payouts", Window: -time.Hour}), "Window is -1h0m0s; use a positive duration"},
		{newInbox(pool, dedupe.InboxConfig{Scope: "payouts", CleanupBatch: -1}), "CleanupBatch is -1"},
		{newInbox(pool, dedupe.InboxConfig{Scope: "payouts", Table: "Inbox"}), `Table "Inbox" must be a lower-case identifier`},
		{newInbox(pool, dedupe.InboxConfig{Scope: "payouts", Schema: "x; DROP TABLE users"}), "Schema"},
	})
	if _, err := dedupe.NewInbox(pool, dedupe.InboxConfig{Scope: "payouts", Table: "Inbox"}); !errors.Is(err, pgname.ErrInvalidName) {
		t.Errorf("a bad table name: %v, want it to match pgname.ErrInvalidName too", err)
	}
	if dedupe.DefaultInboxTable != migrations.DefaultInboxTable {
		t.Errorf("dedupe.DefaultInboxTable %q differs from the table migrations.NewInbox creates, %q", dedupe.DefaultInboxTable, migrations.DefaultInboxTable)
	}
}

// The Querier of Record is satisfied by a transaction.
var _ dedupe.Querier = pgx.Tx(nil)
