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

	"github.com/courierkit/courier/internal/pgname"
)

// Admin inspects and repairs an outbox table: counts, listings, requeue and
// purge. The courier CLI's outbox commands are built on it.
type Admin struct {
	db    DBTX
	table pgname.Table
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

// NewAdmin returns an Admin working through db, usually a *pgxpool.Pool.
func NewAdmin(db DBTX, cfg AdminConfig) (*Admin, error) {
	if db == nil {
		return nil, errors.New("producer: NewAdmin needs a database handle; got nil")
	}
	table, err := pgname.NewTable(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &Admin{db: db, table: table, store: newStore(table, false)}, nil
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
	s := Stats{Counts: map[string]int64{StatusPending: 0, StatusFailed: 0, StatusPublished: 0, StatusDeadLettered: 0}}
	rows, err := a.db.Query(ctx, "SELECT status, count(*) FROM "+a.table.String()+" GROUP BY status")
	if err != nil {
		return s, a.wrap("count events", err)
	}
	var status string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&status, &n}, func() error { s.Counts[status] = n; return nil }); err != nil {
		return s, a.wrap("count events", err)
	}
	var oldest *time.Time
	var age *time.Duration
	err = a.db.QueryRow(ctx, "SELECT min(next_attempt_at), now() - min(next_attempt_at) FROM "+a.table.String()+
		" WHERE status IN ('pending', 'failed') AND next_attempt_at <= now()").Scan(&oldest, &age)
	if err != nil {
		return s, a.wrap("find the oldest due event", err)
	}
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
	RetryCount     int
	MaxRetries     *int
	LastError      *string
	LastAttemptAt  *time.Time
	FirstFailedAt  *time.Time
	NextAttemptAt  time.Time
	CreatedAt      time.Time
	PublishedAt    *time.Time
}

const recordColumns = `id, seq, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id,
    correlation_id, causation_id, idempotency_key, payload, content_type, headers, status, retry_count,
    max_retries, last_error, last_attempt_at, first_failed_at, next_attempt_at, created_at, published_at`

// List returns the events matching f in enqueue order, at most f.Limit.
func (a *Admin) List(ctx context.Context, f Filter) ([]Record, error) {
	where, args, err := f.where([]string{StatusFailed, StatusDeadLettered}, nil)
	if err != nil {
		return nil, err
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	args = append(args, f.AfterSeq, limit)
	sql := fmt.Sprintf("SELECT %s FROM %s WHERE %s AND seq > $%d ORDER BY seq LIMIT $%d",
		recordColumns, a.table, where, len(args)-1, len(args))
	rows, err := a.db.Query(ctx, sql, args...)
	if err != nil {
		return nil, a.wrap("list events", err)
	}
	records, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Record])
	if err != nil {
		return nil, a.wrap("list events", err)
	}
	return records, nil
}

// Get returns one event by id, whatever its status.
func (a *Admin) Get(ctx context.Context, id uuid.UUID) (Record, error) {
	rows, err := a.db.Query(ctx, "SELECT "+recordColumns+" FROM "+a.table.String()+" WHERE id = $1", id)
	if err != nil {
		return Record{}, a.wrap("get event", err)
	}
	rec, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Record])
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Record{}, a.wrap("get event", err)
	}
	return rec, nil
}

// Requeue resets the failed and dead-lettered events matching f to pending
// with retry_count 0, due now, wakes the relays, and returns how many it
// reset. last_error keeps the error that sent them there.
func (a *Admin) Requeue(ctx context.Context, f Filter) (int64, error) {
	requeueable := []string{StatusFailed, StatusDeadLettered}
	where, args, err := f.where(requeueable, requeueable)
	if err != nil {
		return 0, err
	}
	sql := fmt.Sprintf(`WITH requeued AS (
    UPDATE %s SET status = 'pending', retry_count = 0, first_failed_at = NULL, next_attempt_at = now()
    WHERE %s RETURNING 1)
SELECT count(*), pg_notify($%d, $%d) FROM requeued`, a.table, where, len(args)+1, len(args)+2)
	var n int64
	args = append(args, a.table.Name, a.table.String())
	if err := a.db.QueryRow(ctx, sql, args...).Scan(&n, nil); err != nil {
		return 0, a.wrap("requeue events", err)
	}
	return n, nil
}

// Purge deletes the dead-lettered (or, if f.Statuses says so, published)
// events matching f and returns how many it deleted. It refuses pending and
// failed events: they are still to be published.
func (a *Admin) Purge(ctx context.Context, f Filter) (int64, error) {
	where, args, err := f.where([]string{StatusDeadLettered}, []string{StatusDeadLettered, StatusPublished})
	if err != nil {
		return 0, err
	}
	tag, err := a.db.Exec(ctx, fmt.Sprintf("DELETE FROM %s WHERE %s", a.table, where), args...)
	if err != nil {
		return 0, a.wrap("purge events", err)
	}
	return tag.RowsAffected(), nil
}

// Cleanup deletes the events published more than retention ago, in bounded
// batches, as the relay does every CleanupInterval, and returns how many.
func (a *Admin) Cleanup(ctx context.Context, retention time.Duration) (int64, error) {
	if retention < 0 {
		return 0, fmt.Errorf("%w: retention %v is negative", ErrInvalidFilter, retention)
	}
	return a.store.cleanup(ctx, a.db, time.Now().Add(-retention), DefaultCleanupBatch)
}

// where renders the filter as a SQL condition with its arguments. Statuses
// default to defaults; when allowed is set, other statuses are refused.
func (f Filter) where(defaults, allowed []string) (string, []any, error) {
	statuses := f.Statuses
	if len(statuses) == 0 {
		statuses = defaults
	}
	for _, s := range statuses {
		switch {
		case !slices.Contains([]string{StatusPending, StatusFailed, StatusPublished, StatusDeadLettered}, s):
			return "", nil, fmt.Errorf("%w: status %q; use pending, failed, published or dead_lettered", ErrInvalidFilter, s)
		case allowed != nil && !slices.Contains(allowed, s):
			return "", nil, fmt.Errorf("%w: status %q is not allowed here; use %s", ErrInvalidFilter, s, strings.Join(allowed, " or "))
		}
	}
	var conds []string
	var args []any
	add := func(cond string, arg any) {
		args = append(args, arg)
		conds = append(conds, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(args))))
	}
	add("status = ANY($?)", statuses)
	if len(f.IDs) > 0 {
		add("id = ANY($?)", f.IDs)
	}
	if f.Topic != "" {
		add("topic = $?", f.Topic)
	}
	if f.Key != "" {
		add("partition_key = $?", f.Key)
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
	return strings.Join(conds, " AND "), args, nil
}

func (a *Admin) wrap(what string, err error) error {
	return fmt.Errorf("producer: %s in %s: %w", what, a.table, err)
}
