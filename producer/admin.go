package producer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/courierkit/courier/internal/pgname"
)

// Admin inspects and repairs an outbox table: counts, listings, requeue and
// purge. The courier CLI's outbox commands are built on it.
type Admin struct {
	db    DBTX
	store *store
}

// AdminConfig names the outbox table. The zero value is the default table.
type AdminConfig struct {
	Schema, Table string
}

// ErrNotFound is returned by Admin.Get for an unknown event id.
var ErrNotFound = errors.New("producer: no such event in the outbox")

// ErrInvalidFilter is matched by the errors of a Filter the call cannot use.
var ErrInvalidFilter = errors.New("producer: invalid filter")

// WithDefaults returns c with an empty Schema and Table set to their
// defaults, "public" and "courier_outbox".
func (c AdminConfig) WithDefaults() AdminConfig {
	c.Schema, c.Table = defaultNames(c.Schema, c.Table)
	return c
}

// validate refuses a schema or table name PostgreSQL cannot take.
func (c AdminConfig) validate() (pgname.Table, error) { return pgname.NewTable(c.Schema, c.Table) }

// NewAdmin returns an Admin working through db, usually a *pgxpool.Pool. A
// nil db or a bad cfg is an error matching ErrInvalidConfig.
func NewAdmin(db DBTX, cfg AdminConfig) (*Admin, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: NewAdmin needs a database handle (a *pgxpool.Pool, *pgx.Conn or pgx.Tx); got nil", ErrInvalidConfig)
	}
	table, err := cfg.WithDefaults().validate()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &Admin{db: db, store: newStore(table, false, false)}, nil
}

// Stats is a snapshot of an outbox table.
type Stats struct {
	// Counts has every status (pending, failed, published, dead_lettered),
	// with 0 for those that have no events.
	Counts map[string]int64
	// OldestDue is when the longest-waiting due event became due; zero when
	// no event is due.
	OldestDue time.Time
	// OldestDueAge is how long that event has been due, by the database
	// clock.
	OldestDueAge time.Duration
}

// Stats counts the events by status and finds the oldest due one.
func (a *Admin) Stats(ctx context.Context) (Stats, error) {
	s := Stats{Counts: map[string]int64{}}
	legacy, err := a.hasLegacy(ctx)
	if err != nil {
		return s, a.wrap("count events", err)
	}
	sql := a.store.names.statsFor(legacy)
	var pending, failed, published, dead int64
	var oldest *time.Time
	var age *time.Duration
	if err := a.db.QueryRow(ctx, sql).Scan(&pending, &failed, &published, &dead, &oldest, &age); err != nil {
		return s, a.wrap("count events", err)
	}
	s.Counts = map[string]int64{StatusPending: pending, StatusFailed: failed, StatusPublished: published, StatusDeadLettered: dead}
	if oldest != nil {
		s.OldestDue, s.OldestDueAge = *oldest, max(*age, 0)
	}
	return s, nil
}

// Filter selects events for List, Requeue and Purge. Empty fields match
// everything; the fields that are set must all match.
type Filter struct {
	// IDs selects these events only.
	IDs []uuid.UUID
	// Statuses selects by status. List defaults to failed and dead_lettered,
	// Requeue to both (and accepts only those), Purge to dead_lettered (and
	// accepts dead_lettered and published only: purging an event that is
	// still to be published would lose it).
	Statuses []string
	// Topic and Key match exactly.
	Topic, Key string
	// ErrorContains matches a substring of last_error, ignoring case.
	ErrorContains string
	// Since and Until bound the time of the last attempt, or the time of
	// enqueue for events never attempted: Since <= t < Until.
	Since, Until time.Time
	// Limit caps List's results. Defaults to 100.
	Limit int
	// AfterSeq makes List return events enqueued after this one (its Seq):
	// pass the last Seq of a page to get the next page.
	AfterSeq int64
}

// Record is an event as the outbox table holds it.
type Record struct {
	ID             uuid.UUID
	Seq            int64
	Topic          string
	Key            *string
	Type           string
	AggregateType  *string
	AggregateID    *string
	TenantID       *string
	CorrelationID  *string
	CausationID    *string
	IdempotencyKey *string
	Payload        []byte
	ContentType    string
	Headers        map[string]string
	Status         string
	// Attempts is how many publish attempts failed: column retry_count.
	Attempts int
	// MaxAttempts is the event's own Event.MaxAttempts, nil for the
	// relay's: column max_retries.
	MaxAttempts   *int
	LastError     *string
	LastAttemptAt *time.Time
	FirstFailedAt *time.Time
	NextAttemptAt time.Time
	CreatedAt     time.Time
	PublishedAt   *time.Time
}

// records returns the rows of Record of the given statuses as one
// subquery, with the legacy table when there is one.
func (a *Admin) records(ctx context.Context, statuses []string) (string, error) {
	legacy := false
	if slices.Contains(statuses, StatusPublished) {
		var err error
		if legacy, err = a.hasLegacy(ctx); err != nil {
			return "", err
		}
	}
	return a.store.names.recordsSQL(statuses, legacy), nil
}

// hasLegacy reports whether a table of version 1 still holds published
// events beside the new ones.
func (a *Admin) hasLegacy(ctx context.Context) (bool, error) {
	var ok bool
	err := a.db.QueryRow(ctx, existsSQL, a.store.names.legacy).Scan(&ok)
	return ok, err
}

// List returns the events matching f in enqueue order, at most f.Limit.
func (a *Admin) List(ctx context.Context, f Filter) ([]Record, error) {
	statuses, where, args, err := f.where([]string{StatusFailed, StatusDeadLettered}, nil)
	if err != nil {
		return nil, err
	}
	from, err := a.records(ctx, statuses)
	if err != nil {
		return nil, a.wrap("list events", err)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	args = append(args, f.AfterSeq, limit)
	return a.query(ctx, "list events", listSQL(from, where, len(args)), args...)
}

func (a *Admin) query(ctx context.Context, what, sql string, args ...any) ([]Record, error) {
	rows, err := a.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, a.wrap(what, err)
	}
	records, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Record])
	if err != nil {
		return nil, a.wrap(what, err)
	}
	return records, nil
}

// Get returns one event by id, whatever its status.
func (a *Admin) Get(ctx context.Context, id uuid.UUID) (Record, error) {
	from, err := a.records(ctx, allStatuses)
	if err != nil {
		return Record{}, a.wrap("get event", err)
	}
	records, err := a.query(ctx, "get event", getSQL(from), id)
	if err != nil {
		return Record{}, err
	}
	if len(records) == 0 {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return records[0], nil
}

var allStatuses = []string{StatusPending, StatusFailed, StatusPublished, StatusDeadLettered}

// Requeue resets the failed and dead-lettered events matching f to pending
// with retry_count 0, due now, wakes the relays, and returns how many it
// reset. last_error keeps the error that sent them there.
func (a *Admin) Requeue(ctx context.Context, f Filter) (int64, error) {
	requeueable := []string{StatusFailed, StatusDeadLettered}
	statuses, where, args, err := f.where(requeueable, requeueable)
	if err != nil {
		return 0, err
	}
	sql := a.store.names.requeueFor(where, slices.Contains(statuses, StatusFailed), slices.Contains(statuses, StatusDeadLettered))
	var n int64
	if err := a.db.QueryRow(ctx, sql, args...).Scan(&n, nil); err != nil {
		return 0, a.wrap("requeue events", err)
	}
	return n, nil
}

// Purge deletes the dead-lettered (or, if f.Statuses says so, published)
// events matching f and returns how many it deleted. It refuses pending and
// failed events: they are still to be published.
func (a *Admin) Purge(ctx context.Context, f Filter) (int64, error) {
	statuses, where, args, err := f.where([]string{StatusDeadLettered}, []string{StatusDeadLettered, StatusPublished})
	if err != nil {
		return 0, err
	}
	var tables []string
	if slices.Contains(statuses, StatusDeadLettered) {
		tables = append(tables, a.store.names.dead)
	}
	if slices.Contains(statuses, StatusPublished) {
		tables = append(tables, a.store.names.published)
		legacy, err := a.hasLegacy(ctx)
		if err != nil {
			return 0, a.wrap("purge events", err)
		}
		if legacy {
			tables = append(tables, a.store.names.legacy)
		}
	}
	var n int64
	for _, table := range tables {
		cond := where
		if table == a.store.names.legacy {
			cond += " AND status = 'published'"
		} else if table == a.store.names.published {
			cond = strings.ReplaceAll(cond, "last_attempt_at", "published_at")
		}
		tag, err := a.db.Exec(ctx, purgeSQL(table, cond), args...)
		if err != nil {
			return n, a.wrap("purge events", err)
		}
		n += tag.RowsAffected()
	}
	// A purged dead letter may have held its key: wake the relays.
	if _, err := a.db.Exec(ctx, a.store.wakeSQL()); err != nil {
		return n, a.wrap("purge events", err)
	}
	return n, nil
}

// Cleanup removes the events published more than retention ago, as the
// relay does every CleanupInterval: the day partitions of the history that
// end before the cutoff are dropped whole, so it removes a day's events at
// once, and an event stays until its whole day is past retention. It
// returns how many events it removed. The database handle must be able to
// begin a transaction (a *pgxpool.Pool, *pgx.Conn or pgx.Tx); a relay
// changing the partitions at the same moment makes it remove nothing.
func (a *Admin) Cleanup(ctx context.Context, retention time.Duration) (int64, error) {
	if retention < 0 {
		return 0, fmt.Errorf("%w: retention %v is negative", ErrInvalidFilter, retention)
	}
	db, ok := a.db.(beginner)
	if !ok {
		return 0, fmt.Errorf("producer: Cleanup needs a database handle that can begin a transaction (a *pgxpool.Pool, *pgx.Conn or pgx.Tx); got %T", a.db)
	}
	c, _, err := a.store.maintain(ctx, db, pgtype.Timestamptz{}, retention, DefaultCleanupBatch)
	return c.Events, err
}

// where renders the filter as a SQL condition with its arguments. Statuses
// default to defaults; when allowed is set, other statuses are refused.
func (f Filter) where(defaults, allowed []string) ([]string, string, []any, error) {
	statuses := f.Statuses
	if len(statuses) == 0 {
		statuses = defaults
	}
	for _, s := range statuses {
		switch {
		case !slices.Contains(allStatuses, s):
			return nil, "", nil, fmt.Errorf("%w: status %q; use pending, failed, published or dead_lettered", ErrInvalidFilter, s)
		case allowed != nil && !slices.Contains(allowed, s):
			return nil, "", nil, fmt.Errorf("%w: status %q is not allowed here; use %s", ErrInvalidFilter, s, strings.Join(allowed, " or "))
		}
	}
	conds := []string{"true"}
	var args []any
	add := func(cond string, arg any) {
		args = append(args, arg)
		conds = append(conds, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	if len(f.IDs) > 0 {
		add("id = ANY($?)", f.IDs)
	}
	if f.Topic != "" {
		add("topic = $?", f.Topic)
	}
	if f.Key != "" {
		add("partition_key = $?", f.Key)
	}
	if f.Topic != "" && f.Key != "" {
		// What the key indexes of waiting and dead events hold.
		args = append(args, f.Topic, f.Key)
		conds = append(conds, keyHashOf("topic", "partition_key")+" = "+
			keyHashOf(fmt.Sprintf("$%d::text", len(args)-1), fmt.Sprintf("$%d::text", len(args))))
	}
	if f.ErrorContains != "" {
		add("strpos(lower(last_error), lower($?)) > 0", f.ErrorContains)
	}
	if !f.Since.IsZero() {
		add("COALESCE(last_attempt_at, created_at) >= $?", f.Since)
	}
	if !f.Until.IsZero() {
		add("COALESCE(last_attempt_at, created_at) < $?", f.Until)
	}
	return statuses, strings.Join(conds, " AND "), args, nil
}

func (a *Admin) wrap(what string, err error) error {
	return fmt.Errorf("producer: %s in %s: %w", what, a.store.names.table, a.store.undefinedObject(err))
}
