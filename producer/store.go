package producer

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/courierkit/courier/internal/pgname"
)

// Event statuses, as stored in the status column.
const (
	StatusPending      = "pending"
	StatusFailed       = "failed"
	StatusPublished    = "published"
	StatusDeadLettered = "dead_lettered"
)

// store holds the relay's SQL: claiming a batch, settling it, retention and
// the backlog gauge. Everything else in the relay is plain Go.
type store struct {
	table        pgname.Table
	lockSQL      string
	claimSQL     string
	settleSQL    string
	publishedSQL string
	cleanupSQL   string
	backlogSQL   string
}

func newStore(table pgname.Table, holdOnDeadLetter bool) *store {
	// A predecessor blocks an event while it waits for a retry or its
	// NotBefore, and, when keys hold on dead letters, while dead-lettered.
	blocking := "b.status IN ('pending', 'failed') AND b.next_attempt_at > " + dbNow
	if holdOnDeadLetter {
		blocking = "(" + blocking + ") OR b.status = 'dead_lettered'"
	}
	return &store{
		table:        table,
		lockSQL:      fmt.Sprintf(lockSharesSQL, shareLockKey(table)),
		claimSQL:     fmt.Sprintf(claimSQL, table, blocking, dbNow, claimColumns, shareCount),
		settleSQL:    fmt.Sprintf(settleSQL, table, dbNow),
		publishedSQL: fmt.Sprintf(publishedSQL, table, dbNow),
		cleanupSQL:   fmt.Sprintf(cleanupSQL, table),
		backlogSQL:   fmt.Sprintf(backlogSQL, table),
	}
}

// dbNow is "now" in the relay's queries: the injected clock's time ($1) in
// tests, the database clock when $1 is NULL. Due times are written by the
// database clock (created_at, NotBefore), so comparing them with the same
// clock keeps a skewed application host from delaying fresh events.
const dbNow = "COALESCE($1::timestamptz, statement_timestamp())"

// shareCount is how many shares the keys of a table are split into, by a
// hash of the key (of the id for events without one). A claim holds a
// transaction-scoped advisory lock on every share it claims from, so at any
// moment the events of one key are claimed by at most one transaction, in
// whichever relay: no relay can publish a key's event while another still
// holds an earlier one. Every relay must use the same count; it bounds
// RelayConfig.Workers.
const shareCount = 64

// shareLockKey is the first key of the share locks of a table (the share is
// the second): a hash of the table's name, so that relays of different tables
// never wait on each other.
func shareLockKey(table pgname.Table) string {
	return fmt.Sprintf("hashtext('courier relay %s')", table)
}

// lockSharesSQL tunes the claim's transaction (see claimSettings) and takes
// a transaction-scoped lock on every share of $2 that no other transaction
// holds, noting them in the setting courier.claim_shares for claimSQL. The
// locks come first, in a statement of their own, so that the claim's
// snapshot is taken after them: a relay that held a share until it
// committed has its outcomes (a failed event now waiting for its retry)
// visible to the claim that follows it.
const lockSharesSQL = claimSettings + `,
    set_config('courier.claim_shares', COALESCE((
        SELECT array_agg(s) FROM unnest($2::int[]) AS s
        WHERE pg_try_advisory_xact_lock(%s, s)), '{}')::text, true)`

// claimSQL locks up to $2 due events of the shares lockSharesSQL took, in
// insert order, leaving out the events queued behind a blocking event of
// their key. That check looks up each event's key in the blockers index,
// unless a first look (once per claim) finds no blocking event at all, as
// is usual while Kafka is healthy. Holding the shares, the claim is the only
// claimer of their keys: it waits for a row another transaction has locked
// (an admin requeue, never a relay) rather than skip it, since skipping an
// event would let the next one of its key overtake it.
const claimSQL = `
SELECT %[4]s
FROM %[1]s e
WHERE mod(mod(hashtextextended(COALESCE(e.partition_key, e.id::text), 0), %[5]d) + %[5]d, %[5]d)
      = ANY ((SELECT current_setting('courier.claim_shares')::int[])::int[])
  AND e.status IN ('pending', 'failed')
  AND e.next_attempt_at <= %[3]s
  AND (e.partition_key IS NULL
       OR NOT EXISTS (
          SELECT FROM %[1]s b
          WHERE (b.status IN ('failed', 'dead_lettered') OR b.next_attempt_at > b.created_at)
            AND b.partition_key IS NOT NULL AND (%[2]s))
       OR NOT EXISTS (
          SELECT FROM %[1]s b
          WHERE b.topic = e.topic AND b.partition_key = e.partition_key AND b.seq < e.seq
            AND (b.status IN ('failed', 'dead_lettered') OR b.next_attempt_at > b.created_at)
            AND (%[2]s)))
ORDER BY e.seq
LIMIT $2
FOR UPDATE OF e`

// settleSQL records the outcome of every attempted event of a batch, with
// times on the same clock as the claim's due check ($1, see dbNow).
// statusUnchanged keeps the status; attempted events count a retry; delay_ms
// schedules the next attempt.
const settleSQL = `
UPDATE %[1]s o SET
    status          = CASE WHEN u.status = 'unchanged' THEN o.status ELSE u.status END,
    retry_count     = o.retry_count + CASE WHEN u.attempted THEN 1 ELSE 0 END,
    last_error      = COALESCE(u.error, o.last_error),
    last_attempt_at = CASE WHEN u.attempted OR u.status = 'published' THEN %[2]s ELSE o.last_attempt_at END,
    first_failed_at = CASE WHEN u.attempted THEN COALESCE(o.first_failed_at, %[2]s) ELSE o.first_failed_at END,
    next_attempt_at = CASE WHEN u.delay_ms IS NULL THEN o.next_attempt_at ELSE %[2]s + u.delay_ms * interval '1 millisecond' END,
    published_at    = CASE WHEN u.status = 'published' THEN %[2]s END
FROM unnest($2::uuid[], $3::text[], $4::bool[], $5::text[], $6::float8[]) AS u(id, status, attempted, error, delay_ms)
WHERE o.id = u.id`

// publishedSQL marks published events, the common outcome, by their ctid:
// a TID scan finds them without an index lookup. The claim's row locks keep
// every claimed row where the claim found it until the batch commits.
const publishedSQL = `
UPDATE %[1]s SET status = 'published', published_at = %[2]s, last_attempt_at = %[2]s
WHERE ctid = ANY($2::tid[])`

// cleanupSQL deletes one bounded batch of events published before $1.
const cleanupSQL = `
DELETE FROM %[1]s WHERE id IN (
    SELECT id FROM %[1]s
    WHERE status = 'published' AND published_at < $1
    LIMIT $2
    FOR UPDATE SKIP LOCKED)`

// backlogSQL counts the events waiting to be published and measures how
// long the oldest due one has been due; both come from the partial indexes.
const backlogSQL = `
SELECT count(*), COALESCE(EXTRACT(EPOCH FROM ` + dbNow + ` - min(next_attempt_at) FILTER (WHERE next_attempt_at <= ` + dbNow + `)), 0)
FROM %s WHERE status IN ('pending', 'failed')`

// claimedEvent is an event of a claimed batch: what publishing it and
// dead-lettering it need, scanned by scanClaimed in claimColumns order.
type claimedEvent struct {
	// tid is the row's physical address (ctid), which stays put while the
	// claim holds the row lock, so settling finds the row without an index.
	tid           pgtype.TID
	ID            uuid.UUID
	Topic         string
	Key           *string
	Type          string
	AggregateType *string
	AggregateID   *string
	TenantID      *string
	CorrelationID *string
	CausationID   *string
	Payload       []byte
	ContentType   string
	Headers       map[string]string
	RetryCount    int
	MaxRetries    *int
	LastError     *string
	FirstFailedAt *time.Time
	CreatedAt     time.Time
}

const claimColumns = `ctid, id, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id,
    correlation_id, causation_id, payload, content_type, headers, retry_count, max_retries, last_error,
    first_failed_at, created_at`

// scanClaimed scans a claimed row by hand (a claim is the relay's hot path,
// and reflection would cost more than the query) and decodes the headers
// only when there are some.
func scanClaimed(row pgx.CollectableRow) (claimedEvent, error) {
	var e claimedEvent
	var headers []byte
	err := row.Scan(&e.tid, &e.ID, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID, &e.TenantID,
		&e.CorrelationID, &e.CausationID, &e.Payload, &e.ContentType, &headers, &e.RetryCount, &e.MaxRetries,
		&e.LastError, &e.FirstFailedAt, &e.CreatedAt)
	if err == nil && string(headers) != "{}" {
		err = json.Unmarshal(headers, &e.Headers)
	}
	return e, err
}

func (s *store) claim(ctx context.Context, tx pgx.Tx, now pgtype.Timestamptz, limit int, shares []int32, txTimeout time.Duration) ([]claimedEvent, error) {
	batch := &pgx.Batch{}
	batch.Queue(s.lockSQL, fmt.Sprint(txTimeout.Milliseconds()), shares)
	batch.Queue(s.claimSQL, now, limit)
	results := tx.SendBatch(ctx, batch)
	defer results.Close()
	if _, err := results.Exec(); err != nil {
		return nil, fmt.Errorf("producer: claim from %s: %w", s.table, err)
	}
	rows, err := results.Query()
	if err != nil {
		return nil, fmt.Errorf("producer: claim from %s: %w", s.table, err)
	}
	events, err := pgx.CollectRows(rows, scanClaimed)
	if err != nil {
		return nil, fmt.Errorf("producer: claim from %s: %w", s.table, err)
	}
	return events, nil
}

// claimSettings tunes the claim's transaction:
//   - should the relay stall without dying, PostgreSQL ends the transaction
//     after $1 ms idle and frees its events and shares for the others;
//   - should it die while a statement runs, PostgreSQL notices within a
//     second;
//   - a row lock another transaction holds for over 10s fails the claim
//     (logged, and retried) instead of stalling the worker;
//   - no JIT: the planner's cost estimate for a claim over a large backlog
//     crosses jit_above_cost, and compiling costs more than the claim;
//   - asynchronous commit: the transaction only records what Kafka already
//     acknowledged, so a PostgreSQL crash that forgets its last commits
//     (wal_writer_delay, 200ms by default) only makes the relay publish those
//     events again — duplicates with the same ce_id, in the same order — and
//     the relay does not wait for a WAL flush per batch.
const claimSettings = `SELECT
    set_config('idle_in_transaction_session_timeout', $1, true),
    set_config('client_connection_check_interval', '1000', true),
    set_config('lock_timeout', '10s', true),
    set_config('jit', 'off', true),
    set_config('synchronous_commit', 'off', true)`

// statusUnchanged is the settlement status that keeps an event's status.
const statusUnchanged = "unchanged"

// settlement is the outcome of one event of a batch.
type settlement struct {
	e *claimedEvent
	// status is the new status, or statusUnchanged.
	status string
	// attempted counts a failed attempt (retry_count + 1).
	attempted bool
	// err is the error to record; "" keeps last_error.
	err string
	// delay schedules the next attempt; 0 keeps next_attempt_at.
	delay time.Duration
}

// settle records outcomes in one round trip: the published events with
// publishedSQL, the others with settleSQL.
func (s *store) settle(ctx context.Context, tx pgx.Tx, now pgtype.Timestamptz, outcomes []settlement) error {
	var published []pgtype.TID
	var ids []pgtype.UUID
	var statuses []string
	var attempted []bool
	var errs []pgtype.Text
	var delays []pgtype.Float8
	for _, o := range outcomes {
		if o.status == StatusPublished {
			published = append(published, o.e.tid)
			continue
		}
		ids = append(ids, pgtype.UUID{Bytes: o.e.ID, Valid: true})
		statuses, attempted = append(statuses, o.status), append(attempted, o.attempted)
		errs = append(errs, pgtype.Text{String: o.err, Valid: o.err != ""})
		delays = append(delays, pgtype.Float8{Float64: float64(o.delay) / float64(time.Millisecond), Valid: o.delay > 0})
	}
	batch := &pgx.Batch{}
	if len(published) > 0 {
		batch.Queue(s.publishedSQL, now, published)
	}
	if len(ids) > 0 {
		batch.Queue(s.settleSQL, now, ids, statuses, attempted, errs, delays)
	}
	if batch.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, batch).Close(); err != nil {
		return fmt.Errorf("producer: record publish results in %s: %w", s.table, err)
	}
	return nil
}

// cleanup deletes events published before cutoff, batch rows at a time,
// until none is left, and returns how many it deleted.
func (s *store) cleanup(ctx context.Context, db DBTX, cutoff time.Time, batch int) (int64, error) {
	var total int64
	for {
		tag, err := db.Exec(ctx, s.cleanupSQL, cutoff, batch)
		if err != nil {
			return total, fmt.Errorf("producer: delete published events from %s: %w", s.table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

// backlog returns the number of events waiting to be published and how long
// the oldest due one has been due (0 when none is due).
func (s *store) backlog(ctx context.Context, db DBTX, now pgtype.Timestamptz) (int64, time.Duration, error) {
	var n int64
	var seconds float64
	if err := db.QueryRow(ctx, s.backlogSQL, now).Scan(&n, &seconds); err != nil {
		return 0, 0, fmt.Errorf("producer: measure the backlog of %s: %w", s.table, err)
	}
	return n, max(time.Duration(seconds*float64(time.Second)), 0), nil
}
