package producer

import (
	"context"
	"fmt"
	"strings"
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
	unfinished := "o.status IN ('pending', 'failed')"
	if holdOnDeadLetter {
		blocking = "(" + blocking + ") OR b.status = 'dead_lettered'"
		unfinished = "o.status IN ('pending', 'failed', 'dead_lettered')"
	}
	return &store{
		table: table,
		claimSQL: fmt.Sprintf(claimSQL, table, blocking, unfinished, dbNow, qualified("c.", recordColumns),
			fmt.Sprintf(eligibleSQL, table, dbNow, blocking), shareSQL),
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

// claimSQL locks up to $2 due events in insert order, skipping those locked
// by other relays and those queued behind a blocking event of their key
// (the blockers index keeps that check cheap). It then marks as held every
// claimed event that has an unfinished predecessor outside this claim — one
// another relay holds right now — so that a key is only ever published by
// one relay, from its oldest unfinished event on.
//
// Such a predecessor can only exist when the claim skipped a locked event
// (a blocked or later one would have kept the claimed event out too), so
// contended counts the due events of the worker's share up to the last
// claimed one (blocked ones too, which can only make it run gaps needlessly),
// and the per-key walk of gaps runs only when that count exceeds the claim. gaps is
// computed once per claimed key (MATERIALIZED, whatever the planner's row
// estimates) by a walk of the key_order index from the key's oldest
// unfinished event (the ORDER BY matches that index) past the key's own
// claimed events.
const claimSQL = `
WITH claimed AS (
    SELECT e.*
    FROM %[1]s e
    WHERE %[6]s
    ORDER BY e.seq
    LIMIT $2
    FOR UPDATE OF e SKIP LOCKED
), contended AS MATERIALIZED (
    SELECT count(*) > (SELECT count(*) FROM claimed) AS yes
    FROM %[1]s e
    WHERE %[7]s AND e.status IN ('pending', 'failed') AND e.next_attempt_at <= %[4]s
      AND e.seq <= (SELECT max(seq) FROM claimed)
), gaps AS MATERIALIZED (
    SELECT k.topic, k.partition_key, (
        SELECT o.seq FROM %[1]s o
        WHERE o.topic = k.topic AND o.partition_key = k.partition_key AND o.status <> 'published'
          AND (%[3]s) AND o.id <> ALL (k.ids)
        ORDER BY o.topic, o.partition_key, o.seq
        LIMIT 1) AS gap_seq
    FROM (SELECT topic, partition_key, array_agg(id) AS ids FROM claimed
          WHERE partition_key IS NOT NULL AND (SELECT yes FROM contended)
          GROUP BY topic, partition_key) k
)
SELECT %[5]s, COALESCE(c.seq > g.gap_seq, false) AS held
FROM claimed c
LEFT JOIN gaps g ON g.topic = c.topic AND g.partition_key = c.partition_key
ORDER BY c.seq`

// shareSQL selects the events of the worker's share of the keys: $3
// workers, this one $4. Events without a key are shared by id.
const shareSQL = `mod(mod(hashtextextended(COALESCE(e.partition_key, e.id::text), 0), $3::bigint) + $3::bigint, $3::bigint) = $4`

// eligibleSQL is the claim's condition on an event e: in the worker's share,
// unfinished, due, and not queued behind a blocking event of its key.
const eligibleSQL = shareSQL + `
      AND e.status IN ('pending', 'failed')
      AND e.next_attempt_at <= %[2]s
      AND (e.partition_key IS NULL OR NOT EXISTS (
          SELECT FROM %[1]s b
          WHERE b.topic = e.topic AND b.partition_key = e.partition_key AND b.seq < e.seq
            AND (b.status IN ('failed', 'dead_lettered') OR b.next_attempt_at > b.created_at)
            AND (%[3]s)))`

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

// publishedSQL marks published events: the common outcome, on its own
// because a plain ANY($2) update is cheaper than the general settleSQL.
const publishedSQL = `
UPDATE %[1]s SET status = 'published', published_at = %[2]s, last_attempt_at = %[2]s
WHERE id = ANY($2::uuid[])`

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

// claimedEvent is one row of a claimed batch.
type claimedEvent struct {
	Record
	// Held is set when an older unfinished event of the same key is not in
	// this claim: the event must wait.
	Held bool
}

// qualified prefixes every column of a comma-separated list.
func qualified(prefix, columns string) string {
	cols := strings.Split(columns, ",")
	for i, c := range cols {
		cols[i] = prefix + strings.TrimSpace(c)
	}
	return strings.Join(cols, ", ")
}

func (s *store) claim(ctx context.Context, tx pgx.Tx, now pgtype.Timestamptz, limit int, sh share, txTimeout time.Duration) ([]claimedEvent, error) {
	batch := &pgx.Batch{}
	// Should this relay stall without dying, PostgreSQL ends its transaction
	// and frees the claimed events for the others; should it die while a
	// statement waits on a lock, PostgreSQL notices within a second.
	batch.Queue(fmt.Sprintf("SET LOCAL idle_in_transaction_session_timeout = %d", txTimeout.Milliseconds()))
	batch.Queue("SET LOCAL client_connection_check_interval = 1000")
	batch.Queue(s.claimSQL, now, limit, sh.of, sh.index)
	results := tx.SendBatch(ctx, batch)
	defer results.Close()
	for range 2 {
		if _, err := results.Exec(); err != nil {
			return nil, fmt.Errorf("producer: claim from %s: %w", s.table, err)
		}
	}
	rows, err := results.Query()
	if err != nil {
		return nil, fmt.Errorf("producer: claim from %s: %w", s.table, err)
	}
	events, err := pgx.CollectRows(rows, pgx.RowToStructByPos[claimedEvent])
	if err != nil {
		return nil, fmt.Errorf("producer: claim from %s: %w", s.table, err)
	}
	return events, nil
}

// statusUnchanged is the settlement status that keeps an event's status.
const statusUnchanged = "unchanged"

// settlement is the outcome of one event of a batch.
type settlement struct {
	id uuid.UUID
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
	var published, ids []uuid.UUID
	var statuses []string
	var attempted []bool
	var errs []pgtype.Text
	var delays []pgtype.Float8
	for _, o := range outcomes {
		if o.status == StatusPublished {
			published = append(published, o.id)
			continue
		}
		ids, statuses, attempted = append(ids, o.id), append(statuses, o.status), append(attempted, o.attempted)
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
