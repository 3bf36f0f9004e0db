package dedupe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/courierkit/courier/internal/pgname"
)

// Defaults of InboxConfig.
const (
	// DefaultInboxTable is the inbox table that `courier migrate up --inbox`
	// (migrations.NewInbox) creates.
	DefaultInboxTable = pgname.DefaultInboxTable
	// DefaultCleanupBatch is how many rows one statement of Cleanup deletes
	// at the most.
	DefaultCleanupBatch = 10_000
	// MaxCleanupBatch bounds InboxConfig.CleanupBatch.
	MaxCleanupBatch = 1_000_000
)

// InboxConfig configures an Inbox. Scope is required.
type InboxConfig struct {
	// Schema holds the inbox table. Must be a lower-case identifier.
	// Defaults to "public".
	Schema string
	// Table is the inbox table, as created by `courier migrate up --inbox`
	// (migrations.NewInbox). Must be a lower-case identifier of at most 40
	// bytes. Defaults to "courier_inbox" (DefaultInboxTable).
	Table string
	// Scope is what is deduplicated, usually the consumer group: inboxes of
	// different scopes share the table but never see each other's ids.
	// Valid UTF-8 without control characters, at most 255 bytes
	// (MaxScopeBytes). Required.
	Scope string
	// Window is how long a processed id is remembered: an id recorded
	// longer ago counts as new again, and Cleanup deletes it. At most ten
	// years (MaxWindow). Defaults to 24h (DefaultWindow).
	Window time.Duration
	// CleanupBatch is how many rows one DELETE of Cleanup removes at the
	// most, so that no statement holds its locks for long; at most
	// 1,000,000 (MaxCleanupBatch). Defaults to 10,000 (DefaultCleanupBatch).
	CleanupBatch int
	// Logger receives RunCleanup's failures and deletions. Defaults to
	// slog.Default().
	Logger *slog.Logger
}

// Querier is what Record needs: the handler's transaction, a pgx.Tx, or
// anything else with Exec and QueryRow (sqlc's DBTX, *pgx.Conn).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// DB is what an Inbox needs for Claim and Cleanup: *pgxpool.Pool, *pgx.Conn
// and *pgxpool.Conn all satisfy it.
type DB interface {
	Querier
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Inbox is a Store in a PostgreSQL table, for handlers that write to the
// same database: a handler records the message's id with Record in its own
// transaction, so that its writes and the id commit or roll back together,
// and each message takes effect exactly once (within the window).
//
// As a Store it only reads: Claim reports the ids recorded within the
// window as Processed and every other id as Claimed; Extend, Done and
// Release do nothing, because the handler's transaction recorded the id
// already (or rolled back, leaving it free). There are no leases: two
// deliveries of one id may both be Claimed, and the table's primary key
// then lets only one transaction record it (see Record).
//
// An Inbox is safe for concurrent use.
type Inbox struct {
	db    DB
	table pgname.Table
	scope string
	batch int
	log   *slog.Logger

	recordSQL, claimSQL, cleanupSQL string
}

var _ Store = (*Inbox)(nil)

// WithDefaults returns cfg with every zero field set to its default: Table
// to DefaultInboxTable, Window to DefaultWindow, CleanupBatch to
// DefaultCleanupBatch and Logger to slog.Default().
func (cfg InboxConfig) WithDefaults() InboxConfig {
	if cfg.Table == "" {
		cfg.Table = DefaultInboxTable
	}
	cfg.Window = windowOrDefault(cfg.Window)
	if cfg.CleanupBatch == 0 {
		cfg.CleanupBatch = DefaultCleanupBatch
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// validate checks cfg, with its defaults applied.
func (cfg *InboxConfig) validate() error {
	if _, err := pgname.NewTable(cfg.Schema, cfg.Table); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if err := validScope(cfg.Scope); err != nil {
		return err
	}
	if err := validWindow(cfg.Window); err != nil {
		return err
	}
	switch {
	case cfg.CleanupBatch < 0:
		return fmt.Errorf("%w: CleanupBatch is %d; use a positive number of rows, or 0 for the default of %d", ErrInvalidConfig, cfg.CleanupBatch, DefaultCleanupBatch)
	case cfg.CleanupBatch > MaxCleanupBatch:
		return fmt.Errorf("%w: CleanupBatch is %d; use at most %d rows, or 0 for the default of %d", ErrInvalidConfig, cfg.CleanupBatch, MaxCleanupBatch, DefaultCleanupBatch)
	}
	return nil
}

// NewInbox validates cfg, applies its defaults and returns an inbox that
// reads and cleans up through db. It does not contact PostgreSQL.
func NewInbox(db DB, cfg InboxConfig) (*Inbox, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: the DB is nil; pass a *pgxpool.Pool", ErrInvalidConfig)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	table, _ := pgname.NewTable(cfg.Schema, cfg.Table) // validated
	window := cfg.Window
	// The window is a validated integer, so it is safe in the SQL text.
	cutoff := "now() - interval '" + strconv.FormatInt(window.Microseconds(), 10) + " microseconds'"
	return &Inbox{
		db:    db,
		table: table,
		scope: cfg.Scope,
		batch: cfg.CleanupBatch,
		log:   cfg.Logger,
		recordSQL: "INSERT INTO " + table.String() + " AS inbox (scope, id) VALUES ($1, $2)" +
			" ON CONFLICT (scope, id) DO UPDATE SET processed_at = now() WHERE inbox.processed_at < " + cutoff +
			" RETURNING true",
		claimSQL: "SELECT id FROM " + table.String() + " WHERE scope = $1 AND id = ANY($2) AND processed_at >= " + cutoff,
		cleanupSQL: "DELETE FROM " + table.String() + " WHERE ctid = ANY (ARRAY(" +
			"SELECT ctid FROM " + table.String() + " WHERE scope = $1 AND processed_at < " + cutoff + " LIMIT $2" +
			")) AND processed_at < " + cutoff,
	}, nil
}

// Record marks id processed in tx, the transaction of the handler's own
// writes: commit keeps both, rollback removes both. first is false when the
// id was recorded already within the window: the message was processed, so
// the handler must write nothing and return nil (its transaction may
// commit or roll back, it changes nothing). An id recorded longer ago than
// the window counts as new again.
//
// While another transaction has recorded the same id and not yet ended,
// Record waits for it: when it commits, first is false; when it rolls back,
// first is true. So two deliveries of one message handled at once never
// both take effect. Under REPEATABLE READ or SERIALIZABLE isolation the
// waiting transaction fails with a serialization error instead; retry it.
//
// The id is stored as StoredID makes it (hashed when PostgreSQL's text
// could not hold it); an empty id is refused with an error matching
// ErrInvalidID.
func (i *Inbox) Record(ctx context.Context, tx Querier, id string) (first bool, err error) {
	if err := checkIDs(id); err != nil {
		return false, err
	}
	err = tx.QueryRow(ctx, i.recordSQL, i.scope, StoredID(id)).Scan(&first)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, i.fail("record id "+strconv.Quote(id)+" in", err)
	}
	return first, nil
}

// Claim reports each id recorded within the window as Processed and every
// other one as Claimed, in one query; the second of two equal ids in ids
// is Busy. lease is ignored: the inbox has no leases. Ids are looked up as
// StoredID makes them; an empty id fails the call with an error matching
// ErrInvalidID.
func (i *Inbox) Claim(ctx context.Context, owner string, ids []string, lease time.Duration) ([]Status, error) {
	statuses := make([]Status, len(ids))
	if len(ids) == 0 {
		return statuses, nil
	}
	if err := checkIDs(ids...); err != nil {
		return nil, err
	}
	ids = storedIDs(ids)
	rows, err := i.db.Query(ctx, i.claimSQL, i.scope, ids)
	if err != nil {
		return nil, i.fail("look up ids in", err)
	}
	var processed map[string]bool
	var id string
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		if processed == nil {
			processed = map[string]bool{}
		}
		processed[id] = true
		return nil
	})
	if err != nil {
		return nil, i.fail("look up ids in", err)
	}
	seen := make(map[string]struct{}, len(ids))
	for p, id := range ids {
		if _, dup := seen[id]; dup {
			statuses[p] = Busy
			continue
		}
		seen[id] = struct{}{}
		if processed[id] {
			statuses[p] = Processed
		}
	}
	return statuses, nil
}

// Extend does nothing: the inbox has no leases.
func (i *Inbox) Extend(ctx context.Context, owner string, ids []string, lease time.Duration) error {
	return nil
}

// Done does nothing: the handler recorded the ids with Record, in its own
// transaction.
func (i *Inbox) Done(ctx context.Context, owner string, ids []string) error { return nil }

// Release does nothing: an id whose handler failed was never recorded, or
// its recording rolled back with the handler's transaction.
func (i *Inbox) Release(ctx context.Context, owner string, ids []string) error { return nil }

// Cleanup deletes the scope's ids recorded longer ago than the window, at
// most CleanupBatch rows per statement, each statement in its own
// transaction, so that it never holds many locks for long. It returns how
// many rows it deleted, also when it fails part way.
func (i *Inbox) Cleanup(ctx context.Context) (deleted int64, err error) {
	for {
		tag, err := i.db.Exec(ctx, i.cleanupSQL, i.scope, i.batch)
		if err != nil {
			return deleted, i.fail("delete expired ids from", err)
		}
		deleted += tag.RowsAffected()
		if tag.RowsAffected() < int64(i.batch) {
			return deleted, nil
		}
	}
}

// RunCleanup runs Cleanup at once and then every interval until ctx ends,
// and returns nil then. A failed Cleanup is logged and tried again at the
// next interval. Run it in one process per scope, or in several: their
// deletions do not conflict.
func (i *Inbox) RunCleanup(ctx context.Context, every time.Duration) error {
	if every <= 0 {
		return fmt.Errorf("%w: cleanup interval %v; use a positive interval, e.g. time.Hour", ErrInvalidArgument, every)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		n, err := i.Cleanup(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			i.log.WarnContext(ctx, "inbox cleanup failed; will retry", "table", i.table.String(), "scope", i.scope, "deleted", n, "error", err)
		case n > 0:
			i.log.InfoContext(ctx, "deleted expired ids from the inbox", "table", i.table.String(), "scope", i.scope, "deleted", n)
		}
		timer.Reset(every)
	}
}

// fail wraps an error of the inbox table; a missing table or an
// unreachable server says how to fix it.
func (i *Inbox) fail(what string, err error) error {
	if pgname.UndefinedTable(err) {
		return fmt.Errorf("dedupe: %s %s: %w (create the table: run `courier migrate up --inbox%s`)", what, i.table, err, i.migrateFlags())
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		return fmt.Errorf("dedupe: %s %s: %w (is PostgreSQL running? try `make services`)", what, i.table, err)
	}
	return fmt.Errorf("dedupe: %s %s: %w", what, i.table, err)
}

// migrateFlags are the flags of `courier migrate` that select the table.
func (i *Inbox) migrateFlags() string {
	var flags string
	if i.table.Schema != pgname.DefaultSchema {
		flags += " --schema " + i.table.Schema
	}
	if i.table.Name != DefaultInboxTable {
		flags += " --table " + i.table.Name
	}
	return flags
}
