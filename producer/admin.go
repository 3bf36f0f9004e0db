package producer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/courierkit/courier/dlq"
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

// ErrInvalidFilter is matched by the errors of a Filter, or of another
// argument (a retention, a window or step, a limit, an id to page from),
// that the call cannot use.
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
	// PublishedEstimated is true when Counts[StatusPublished] is
	// PostgreSQL's estimate, not a count: when the history holds more than
	// ExactPublishedLimit events, which a count would have to read all of.
	// The estimate is each partition's rows per page, by its planner
	// statistics (autovacuum keeps them), times its pages now.
	PublishedEstimated bool
	// OldestDue is when the longest-waiting due event became due; zero when
	// no event is due.
	OldestDue time.Time
	// OldestDueAge is how long that event has been due, by the database
	// clock.
	OldestDueAge time.Duration
}

// ExactPublishedLimit is how many published events Stats counts; beyond
// it, it estimates (see Stats.PublishedEstimated).
const ExactPublishedLimit = 100_000

// Stats counts the events by status (the published ones up to
// ExactPublishedLimit, then estimated) and finds the oldest due one.
func (a *Admin) Stats(ctx context.Context) (Stats, error) {
	s := Stats{Counts: map[string]int64{}}
	legacy, err := a.hasLegacy(ctx)
	if err != nil {
		return s, a.wrap("count events", err)
	}
	var pending, failed, published, dead int64
	var oldest *time.Time
	var age *time.Duration
	err = a.db.QueryRow(ctx, a.store.names.statsFor(legacy), ExactPublishedLimit+1).Scan(&pending, &failed, &published, &dead, &oldest, &age)
	if err != nil {
		return s, a.wrap("count events", err)
	}
	if published > ExactPublishedLimit {
		var estimate int64
		if err := a.db.QueryRow(ctx, estimatePublishedSQL, a.store.names.published, a.store.names.legacy).Scan(&estimate); err != nil {
			return s, a.wrap("estimate the published events", err)
		}
		published, s.PublishedEstimated = max(estimate, published), true
	}
	s.Counts = map[string]int64{StatusPending: pending, StatusFailed: failed, StatusPublished: published, StatusDeadLettered: dead}
	if oldest != nil {
		s.OldestDue, s.OldestDueAge = *oldest, max(*age, 0)
	}
	return s, nil
}

// Filter selects events for List, Count, Requeue and Purge. Empty fields
// match everything; the fields that are set must all match. A text field
// that no event could hold (not UTF-8, a NUL, longer than Enqueue accepts)
// is an error matching ErrInvalidFilter.
type Filter struct {
	// IDs selects these events only.
	IDs []uuid.UUID
	// Statuses selects by status. List and Count default to failed and
	// dead_lettered, Requeue to both (and accepts only those), Purge to
	// dead_lettered (and accepts dead_lettered and published only: purging
	// an event that is still to be published would lose it).
	Statuses []string
	// Topic, Key, TenantID, AggregateType and AggregateID match exactly.
	Topic, Key, TenantID, AggregateType, AggregateID string
	// ErrorContains matches a substring of last_error, ignoring case.
	ErrorContains string
	// Since and Until bound the time of the last attempt, or the time of
	// enqueue for events never attempted, or the time of publication for
	// published events: Since <= t < Until.
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

// records returns the rows of Record that sel selects as one subquery,
// with the legacy table when there is one.
func (a *Admin) records(ctx context.Context, sel selection) (string, error) {
	legacy := false
	if slices.Contains(sel.statuses, StatusPublished) {
		var err error
		if legacy, err = a.hasLegacy(ctx); err != nil {
			return "", err
		}
	}
	return a.store.names.recordsSQL(sel.statuses, legacy, sel.cond), nil
}

// hasLegacy reports whether a table of version 1 still holds published
// events beside the new ones.
func (a *Admin) hasLegacy(ctx context.Context) (bool, error) {
	var ok bool
	err := a.db.QueryRow(ctx, existsSQL, a.store.names.legacy).Scan(&ok)
	return ok, err
}

// listStatuses are the statuses List and Count select by default.
var listStatuses = []string{StatusFailed, StatusDeadLettered}

// listSpan is the first range of seqs List reads the history in, at least
// (see List); each next range is listGrowth times larger.
const (
	listSpan   = 4096
	listGrowth = 4
)

// List returns the events matching f in enqueue order, at most f.Limit.
//
// The history of published events has no index in seq order (a B-tree
// entry per event would cost the relay as much again as the event), only
// block-range summaries; so when f selects published events, List reads
// the seqs after f.AfterSeq in ranges, each listGrowth times larger than
// the last, until the page is full: a page of recent events reads a few
// thousand rows, and a filter that matches nothing reads the history once.
func (a *Admin) List(ctx context.Context, f Filter) ([]Record, error) {
	sel, err := f.where(listStatuses, nil)
	if err != nil {
		return nil, err
	}
	from, err := a.records(ctx, sel)
	if err != nil {
		return nil, a.wrap("list events", err)
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	span, last := int64(math.MaxInt64), int64(math.MaxInt64)
	if slices.Contains(sel.statuses, StatusPublished) {
		span = max(listGrowth*int64(limit), listSpan)
		if err := a.db.QueryRow(ctx, a.store.names.lastSeqSQL()).Scan(&last); err != nil {
			return nil, a.wrap("list events", err)
		}
	}
	sql := listSQL(from, len(sel.args)+3)
	var records []Record
	for lo := f.AfterSeq; ; {
		hi := addCapped(lo, span)
		page, err := a.query(ctx, "list events", sql, slices.Concat(sel.args, []any{lo, hi, limit - len(records)})...)
		if err != nil {
			return nil, err
		}
		records = append(records, page...)
		if len(records) == limit || hi >= last {
			return records, nil
		}
		lo, span = hi, addCapped(span, (listGrowth-1)*span)
	}
}

// addCapped is a+b for a positive b, or math.MaxInt64 when that is more.
func addCapped(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// CountLimit is where Count stops counting: a count of CountLimit means
// that many events or more.
const CountLimit = 10_000

// Count returns how many events List would page through for f (its
// Limit and AfterSeq aside), up to CountLimit: it stops counting there,
// so that counting a history of millions costs what reading CountLimit
// events does. CountRequeue and CountPurge count exactly.
func (a *Admin) Count(ctx context.Context, f Filter) (int64, error) {
	sel, err := f.where(listStatuses, nil)
	if err != nil {
		return 0, err
	}
	from, err := a.records(ctx, sel)
	if err != nil {
		return 0, a.wrap("count events", err)
	}
	var n int64
	if err := a.db.QueryRow(ctx, countSQL(from, len(sel.args)+1), slices.Concat(sel.args, []any{CountLimit})...).Scan(&n); err != nil {
		return 0, a.wrap("count events", err)
	}
	return n, nil
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
	from, err := a.records(ctx, selection{statuses: allStatuses, cond: "id = $1"})
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

// requeueable are the statuses Requeue takes, and its default.
var requeueable = []string{StatusFailed, StatusDeadLettered}

// Requeue resets the failed and dead-lettered events matching f to pending
// with retry_count 0, due now, wakes the relays, and returns how many it
// reset. last_error keeps the error that sent them there. db may be a
// pgx.Tx: the events are reset (and the relays woken) when it commits.
func (a *Admin) Requeue(ctx context.Context, f Filter) (int64, error) {
	return a.requeue(ctx, f, requeueSQL, "requeue events")
}

// CountRequeue returns how many events Requeue would reset for f, with the
// same defaults and refusals. To requeue exactly what an operator
// confirmed, run Requeue through an Admin on a pgx.Tx and roll back if its
// count differs.
func (a *Admin) CountRequeue(ctx context.Context, f Filter) (int64, error) {
	return a.requeue(ctx, f, countRequeueSQL, "count events to requeue")
}

// requeue runs sql (requeueSQL or countRequeueSQL) for the events of f and
// returns its count.
func (a *Admin) requeue(ctx context.Context, f Filter, sql, what string) (int64, error) {
	sel, err := f.where(requeueable, requeueable)
	if err != nil {
		return 0, err
	}
	sql = a.store.names.requeueFor(sql, sel.cond, slices.Contains(sel.statuses, StatusFailed), slices.Contains(sel.statuses, StatusDeadLettered))
	var n int64
	if err := a.db.QueryRow(ctx, sql, sel.args...).Scan(&n); err != nil {
		return 0, a.wrap(what, err)
	}
	return n, nil
}

// Purge deletes the dead-lettered (or, if f.Statuses says so, published)
// events matching f and returns how many it deleted. It refuses pending and
// failed events: they are still to be published. db may be a pgx.Tx: the
// events are deleted when it commits.
func (a *Admin) Purge(ctx context.Context, f Filter) (int64, error) {
	sel, targets, err := a.purgeTargets(ctx, f)
	if err != nil {
		return 0, a.wrap("purge events", err)
	}
	var n int64
	for _, t := range targets {
		tag, err := a.db.Exec(ctx, t.purgeSQL(sel.cond), sel.args...)
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

// CountPurge returns how many events Purge would delete for f, with the
// same defaults and refusals (see CountRequeue).
func (a *Admin) CountPurge(ctx context.Context, f Filter) (int64, error) {
	sel, targets, err := a.purgeTargets(ctx, f)
	if err != nil {
		return 0, a.wrap("count events to purge", err)
	}
	var total int64
	for _, t := range targets {
		var n int64
		if err := a.db.QueryRow(ctx, t.countPurgeSQL(sel.cond), sel.args...).Scan(&n); err != nil {
			return 0, a.wrap("count events to purge", err)
		}
		total += n
	}
	return total, nil
}

// purgeTargets renders f for Purge, and returns the tables to purge.
func (a *Admin) purgeTargets(ctx context.Context, f Filter) (selection, []purgeTarget, error) {
	sel, err := f.where([]string{StatusDeadLettered}, []string{StatusDeadLettered, StatusPublished})
	if err != nil {
		return sel, nil, err
	}
	legacy := false
	if slices.Contains(sel.statuses, StatusPublished) {
		if legacy, err = a.hasLegacy(ctx); err != nil {
			return sel, nil, err
		}
	}
	return sel, a.store.names.purgeTargets(sel.statuses, legacy), nil
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

// selection is a Filter rendered as SQL: the statuses it selects, and a
// condition over the columns of Record, with {at} for the time Since and
// Until bound (see recordSource), and its arguments.
type selection struct {
	statuses []string
	cond     string
	args     []any
}

// where renders the filter as a selection. Statuses default to defaults;
// when allowed is set, other statuses are refused, as is text no event
// could hold.
func (f Filter) where(defaults, allowed []string) (selection, error) {
	statuses := f.Statuses
	if len(statuses) == 0 {
		statuses = defaults
	}
	for _, s := range statuses {
		switch {
		case !slices.Contains(allStatuses, s):
			return selection{}, fmt.Errorf("%w: status %s; use pending, failed, published or dead_lettered", ErrInvalidFilter, quoteText(s))
		case allowed != nil && !slices.Contains(allowed, s):
			return selection{}, fmt.Errorf("%w: status %q is not allowed here; use %s", ErrInvalidFilter, s, strings.Join(allowed, " or "))
		}
	}
	for _, t := range []struct {
		field, value string
		limit        int
	}{
		{"Topic", f.Topic, maxTopicLen}, {"Key", f.Key, MaxKeyBytes}, {"TenantID", f.TenantID, MaxAttributeBytes},
		{"AggregateType", f.AggregateType, MaxAttributeBytes}, {"AggregateID", f.AggregateID, MaxAttributeBytes},
		{"ErrorContains", f.ErrorContains, dlq.MaxErrorBytes},
	} {
		if err := checkText(t.value, t.limit); err != nil {
			return selection{}, fmt.Errorf("%w: %s: %w", ErrInvalidFilter, t.field, err)
		}
	}
	sel := selection{statuses: statuses}
	conds := []string{"true"}
	add := func(cond string, arg any) {
		sel.args = append(sel.args, arg)
		conds = append(conds, strings.ReplaceAll(cond, "$?", "$"+strconv.Itoa(len(sel.args))))
	}
	if len(f.IDs) > 0 {
		add("id = ANY($?)", f.IDs)
	}
	for _, eq := range []struct{ column, value string }{
		{"topic", f.Topic}, {"partition_key", f.Key}, {"tenant_id", f.TenantID},
		{"aggregate_type", f.AggregateType}, {"aggregate_id", f.AggregateID},
	} {
		if eq.value != "" {
			add(eq.column+" = $?", eq.value)
		}
	}
	if f.Topic != "" && f.Key != "" {
		// What the key indexes of waiting and dead events hold.
		sel.args = append(sel.args, f.Topic, f.Key)
		conds = append(conds, keyHashOf("topic", "partition_key")+" = "+
			keyHashOf(fmt.Sprintf("$%d::text", len(sel.args)-1), fmt.Sprintf("$%d::text", len(sel.args))))
	}
	if f.ErrorContains != "" {
		add("strpos(lower(last_error), lower($?)) > 0", f.ErrorContains)
	}
	if !f.Since.IsZero() {
		add("{at} >= $?", f.Since)
	}
	if !f.Until.IsZero() {
		add("{at} < $?", f.Until)
	}
	sel.cond = strings.Join(conds, " AND ")
	return sel, nil
}

func (a *Admin) wrap(what string, err error) error {
	if errors.Is(err, ErrInvalidFilter) {
		return err
	}
	return fmt.Errorf("producer: %s in %s: %w", what, a.store.names.table, a.store.undefinedObject(err))
}
