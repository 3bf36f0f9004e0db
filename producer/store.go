package producer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/pgname"
)

// Event statuses, as Admin reports them.
const (
	StatusPending      = "pending"
	StatusFailed       = "failed"
	StatusPublished    = "published"
	StatusDeadLettered = "dead_lettered"
)

// store owns every SQL statement on an outbox: the enqueue, the relay's
// claim and settle, the wake-up probe, retention and the admin queries. The
// outbox is five tables named after the configured one (see the migrations
// package): the queue of new events itself, <table>_waiting, <table>_dead,
// <table>_published (partitioned by day) and <table>_keys, plus
// <table>_legacy while a table of version 1 still holds published events.
type store struct {
	names   outboxNames
	hold    bool // HoldKeyOnDeadLetter: a dead letter holds the later events of its key
	discard bool // DiscardPublished: a published event is deleted, not kept

	insertOne, insertMany, insertKeyed, claimIDs, unclaim, lookupKeys string

	lockShares, claimQueue, claimWaiting string

	publishQueue, publishWaiting, parkQueue, updateWaiting, deadQueue, deadWaiting string
	discardQueue, discardWaiting                                                   string

	probe, backlog string
}

// outboxNames are the schema-qualified names of an outbox's objects.
type outboxNames struct {
	table                                      pgname.Table
	queue, waiting, dead, published, keys, seq string
	legacy, partitionDefault                   string
}

func newOutboxNames(t pgname.Table) outboxNames {
	return outboxNames{
		table:            t,
		queue:            t.String(),
		waiting:          t.Derived("waiting"),
		dead:             t.Derived("dead"),
		published:        t.Derived("published"),
		keys:             t.Derived("keys"),
		seq:              t.Derived("seq"),
		legacy:           t.Derived("legacy"),
		partitionDefault: t.Derived("published_default"),
	}
}

// render fills the placeholders of a statement: {queue}, {waiting}, {dead},
// {published}, {keys}, {seq}, {now} (see dbNow), {share} (see shareOf) and
// {held} (see heldBy).
func (n outboxNames) render(sql string, hold bool) string {
	held := "false"
	if hold {
		held = "true"
	}
	return strings.NewReplacer(
		"{queue}", n.queue, "{waiting}", n.waiting, "{dead}", n.dead, "{published}", n.published,
		"{keys}", n.keys, "{seq}", n.seq, "{now}", dbNow, "{hold}", held,
	).Replace(sql)
}

// newStore makes the statements of table: a dead letter holds its key
// with holdOnDeadLetter, and a published event is deleted rather than kept
// in the history with discardPublished.
func newStore(table pgname.Table, holdOnDeadLetter, discardPublished bool) *store {
	n := newOutboxNames(table)
	r := func(sql string) string { return n.render(sql, holdOnDeadLetter) }
	return &store{
		names:          n,
		hold:           holdOnDeadLetter,
		discard:        discardPublished,
		insertOne:      r(insertOneSQL),
		insertMany:     r(insertManySQL),
		insertKeyed:    r(insertKeyedSQL),
		claimIDs:       r(claimIDsSQL),
		unclaim:        r(unclaimSQL),
		lookupKeys:     r(lookupKeysSQL),
		lockShares:     fmt.Sprintf(lockSharesSQL, shareLockKey(table)),
		claimQueue:     r(claimQueueSQL),
		claimWaiting:   r(claimWaitingSQL),
		publishQueue:   r(publishQueueSQL),
		publishWaiting: r(publishWaitingSQL),
		discardQueue:   r(discardQueueSQL),
		discardWaiting: r(discardWaitingSQL),
		parkQueue:      r(parkQueueSQL),
		updateWaiting:  r(updateWaitingSQL),
		deadQueue:      r(deadQueueSQL),
		deadWaiting:    r(deadWaitingSQL),
		probe:          r(probeSQL),
		backlog:        r(backlogSQL),
	}
}

// dbNow is "now" in the relay's statements: the injected clock's time ($1)
// in tests, the database clock when $1 is NULL. Due times are written by
// the database clock (created_at, NotBefore), so comparing them with the
// same clock keeps a skewed application host from delaying fresh events.
const dbNow = "COALESCE($1::timestamptz, statement_timestamp())"

// eventColumns are the columns every table of an outbox has, in the order
// the enqueue writes them and the claim reads them.
const eventColumns = `id, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id,
    correlation_id, causation_id, idempotency_key, payload, content_type, headers, max_retries`

// claimedColumns are the columns of eventColumns a claim reads (all but
// the idempotency key, which publishing does not need), of table alias a.
func claimedColumns(a string) string {
	cols := strings.Split(strings.Join(strings.Fields(eventColumns), " "), ", ")
	cols = slices.DeleteFunc(cols, func(c string) bool { return c == "idempotency_key" })
	for i, c := range cols {
		cols[i] = a + "." + c
	}
	return strings.Join(cols, ", ")
}

// ---- enqueue ----

// insertOneSQL writes one event without an idempotency key: one row, the
// queue's primary key its one index entry.
const insertOneSQL = `
INSERT INTO {queue} (` + eventColumns + `, not_before)
VALUES ($1, $2, NULLIF($3, ''), $4, NULLIF($5, ''), NULLIF($6, ''), NULLIF($7, ''), NULLIF($8, ''),
    NULLIF($9, ''), NULLIF($10, ''), $11, $12, $13, NULLIF($14, 0), $15)`

// enqueueArrays is the batch as one array per column, rows in slice order.
const enqueueArrays = `unnest(
    $1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
    $8::text[], $9::text[], $10::text[], $11::bytea[], $12::text[], $13::jsonb[],
    $14::int4[], $15::timestamptz[]
) WITH ORDINALITY AS e(` + eventColumns + `, not_before, ord)`

const enqueueValues = `e.id, e.topic, NULLIF(e.partition_key, ''), e.event_type, NULLIF(e.aggregate_type, ''),
    NULLIF(e.aggregate_id, ''), NULLIF(e.tenant_id, ''), NULLIF(e.correlation_id, ''),
    NULLIF(e.causation_id, ''), NULLIF(e.idempotency_key, ''), e.payload, e.content_type, e.headers,
    NULLIF(e.max_retries, 0), e.not_before`

// insertManySQL writes a batch without idempotency keys in one statement,
// in slice order, so the queue's seq follows it.
const insertManySQL = `
INSERT INTO {queue} (` + eventColumns + `, not_before)
SELECT ` + enqueueValues + `
FROM ` + enqueueArrays + `
ORDER BY e.ord`

// insertKeyedSQL writes a batch some of whose events carry an idempotency
// key or an id of the caller's own ($16, the array of those ids): each key
// is claimed in {keys} first, and an event whose (topic, key) is taken is
// not written; then the own id of each event still to write is claimed
// in {keys} too, under the empty topic (which no event has), and if one
// was taken, no event is written. A key or id another transaction holds
// and has not committed makes the insert wait for it, as a unique index
// would; claims are taken in the order of their keys, so two batches that
// share some never wait for each other both ways. It returns a row per
// claim made and event written: ('key', the event's id) for a key, ('id',
// id) for an id, and ('queue', id) for an event. An ordinary event (its id
// assigned by Enqueue, unique by construction, and no key) claims nothing
// and never comes here.
const insertKeyedSQL = `
WITH e AS (SELECT * FROM ` + enqueueArrays + `),
k AS (
    INSERT INTO {keys} (topic, idempotency_key, event_id)
    SELECT e.topic, e.idempotency_key, e.id FROM e WHERE e.idempotency_key <> '' ORDER BY e.topic, e.idempotency_key, e.ord
    ON CONFLICT DO NOTHING
    RETURNING event_id),
w AS (SELECT * FROM e WHERE e.idempotency_key = '' OR e.id IN (SELECT event_id FROM k)),
i AS (
    INSERT INTO {keys} (topic, idempotency_key, event_id)
    SELECT '', w.id::text, w.id FROM w WHERE w.id = ANY($16::uuid[]) ORDER BY w.id
    ON CONFLICT DO NOTHING
    RETURNING event_id),
q AS (
    INSERT INTO {queue} (` + eventColumns + `, not_before)
    SELECT ` + enqueueValues + `
    FROM w AS e
    WHERE (SELECT count(*) FROM i) = (SELECT count(*) FROM w WHERE w.id = ANY($16::uuid[]))
    ORDER BY e.ord
    RETURNING id)
SELECT 'queue', id FROM q
UNION ALL SELECT 'key', event_id FROM k
UNION ALL SELECT 'id', event_id FROM i`

// claimIDsSQL claims ids of the caller's own ($1) in {keys}, as
// insertKeyedSQL does, for a batch without idempotency keys that is then
// copied. It returns the ids claimed.
const claimIDsSQL = `
INSERT INTO {keys} (topic, idempotency_key, event_id)
SELECT '', d.id::text, d.id FROM unnest($1::uuid[]) AS d(id) ORDER BY d.id
ON CONFLICT DO NOTHING
RETURNING event_id`

// unclaimSQL deletes the claims ($1 topics, $2 keys, $3 event ids) of a
// batch insertKeyedSQL refused for an id taken.
const unclaimSQL = `
DELETE FROM {keys} k
USING unnest($1::text[], $2::text[], $3::uuid[]) AS d(topic, idempotency_key, event_id)
WHERE k.topic = d.topic AND k.idempotency_key = d.idempotency_key AND k.event_id = d.event_id`

// lookupKeysSQL finds the events that hold the idempotency keys of
// duplicates.
const lookupKeysSQL = `
SELECT k.topic, k.idempotency_key, k.event_id
FROM unnest($1::text[], $2::text[]) AS d(topic, idempotency_key)
JOIN {keys} k ON k.topic = d.topic AND k.idempotency_key = d.idempotency_key`

// ---- claim ----

// shareCount is how many shares the keys of a table are split into, by a
// hash of the key (events without a key by their seq). A claim holds a
// transaction-scoped advisory lock on every share it claims from, so at any
// moment the events of one key are claimed by at most one transaction, in
// whichever relay: no relay can publish a key's event while another still
// holds an earlier one, and no claim needs a row lock. Every relay must use
// the same count; it bounds RelayConfig.Workers.
const shareCount = 64

// shareOf is the share of the event of table alias a.
func shareOf(a string) string {
	return fmt.Sprintf("(CASE WHEN %[1]s.partition_key IS NULL THEN %[1]s.seq %% %[2]d ELSE mod(mod(hashtextextended(%[1]s.partition_key, 0), %[2]d) + %[2]d, %[2]d) END)",
		a, shareCount)
}

// claimedShares is the array of shares lockSharesSQL took.
const claimedShares = "((SELECT current_setting('courier.claim_shares')::int[])::int[])"

// shareLockKey is the first key of the share locks of a table (the share is
// the second): a hash of the table's name, so that relays of different tables
// never wait on each other.
func shareLockKey(table pgname.Table) string {
	return fmt.Sprintf("hashtext('courier relay %s')", table)
}

// lockSharesSQL tunes the claim's transaction (see claimSettings) and takes
// a transaction-scoped lock on every share of $2 that no other transaction
// holds, noting them in the setting courier.claim_shares for the claim. The
// locks come first, in a statement of their own, so that the claim's
// snapshot is taken after them: a relay that held a share until it
// committed has its outcomes (an event moved to waiting) visible to the
// claim that follows it.
const lockSharesSQL = claimSettings + `,
    set_config('courier.claim_shares', COALESCE((
        SELECT array_agg(s) FROM unnest($2::int[]) AS s
        WHERE pg_try_advisory_xact_lock(%s, s)), '{}')::text, true)`

// claimSettings tunes the claim's transaction:
//   - should the relay stall without dying, PostgreSQL ends the transaction
//     after $1 ms idle and frees its shares for the others;
//   - should it die while a statement runs, PostgreSQL notices within a
//     second;
//   - a lock another transaction holds for over 10s fails the claim (logged,
//     and retried) instead of stalling the worker;
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

// keyHash is the hash of the (topic, key) of the event of alias a, as the
// key indexes of {waiting} and {dead} hold it (migration 0005): they index
// a hash rather than the topic and key themselves, which PostgreSQL cannot
// index beyond about 2,700 bytes.
func keyHash(a string) string { return keyHashOf(a+".topic", a+".partition_key") }

// keyHashOf is the hash of the SQL expressions topic and key, as keyHash.
func keyHashOf(topic, key string) string {
	return fmt.Sprintf("hashtextextended(%s, hashtextextended(%s, 0))", key, topic)
}

// sameKey is true when the events of aliases a and b have the same topic
// and key: it compares their hashes first, which the key indexes find.
func sameKey(a, b string) string {
	return fmt.Sprintf("%s = %s AND %[3]s.topic = %[4]s.topic AND %[3]s.partition_key = %[4]s.partition_key",
		keyHash(a), keyHash(b), a, b)
}

// heldByDead is true when an event of alias a, with a key, is held back
// by an event of its key in {dead} (with HoldKeyOnDeadLetter) that is
// older.
func heldByDead(a string) string {
	return fmt.Sprintf(`({hold} AND %[1]s.partition_key IS NOT NULL AND EXISTS (
    SELECT FROM {dead} h WHERE %[2]s AND h.seq < %[1]s.seq))`, a, sameKey("h", a))
}

// claimQueueSQL reads up to $2 new events of the claimed shares in seq
// order. blocked marks an event whose key has events waiting (or, with
// HoldKeyOnDeadLetter, an older dead letter): it must wait behind them, and
// the relay moves it to {waiting} instead of publishing it. The check looks
// up the event's key only when something waits at all, as is rare while
// Kafka is healthy. No row is locked: the share locks make this claim the
// only reader of these events that will write them.
var claimQueueSQL = `
SELECT q.ctid, q.seq, ` + claimedColumns("q") + `, q.created_at, COALESCE(q.not_before > {now}, false) AS scheduled,
    q.partition_key IS NOT NULL AND NOT (SELECT NOT EXISTS (SELECT FROM {waiting}) AND NOT ({hold} AND EXISTS (SELECT FROM {dead})))
    AND (EXISTS (SELECT FROM {waiting} w WHERE ` + sameKey("w", "q") + `)
         OR ` + heldByDead("q") + `) AS blocked
FROM {queue} q
WHERE ` + shareOf("q") + ` = ANY ` + claimedShares + `
ORDER BY q.seq
LIMIT $2`

// claimWaitingSQL reads up to $2 waiting events of the claimed shares that
// are due and not behind an event of their key that is not (nor, with
// HoldKeyOnDeadLetter, behind an older dead letter), in seq order.
var claimWaitingSQL = `
SELECT w.seq, ` + claimedColumns("w") + `, w.created_at,
    w.status, w.retry_count, w.last_error, w.first_failed_at
FROM {waiting} w
WHERE ` + shareOf("w") + ` = ANY ` + claimedShares + `
  AND w.next_attempt_at <= {now}
  AND (w.partition_key IS NULL OR NOT EXISTS (
      SELECT FROM {waiting} b
      WHERE ` + sameKey("b", "w") + ` AND b.seq < w.seq AND b.next_attempt_at > {now}))
  AND NOT ` + heldByDead("w") + `
ORDER BY w.seq
LIMIT $2`

// source says which table a claimed event came from.
type source uint8

const (
	fromQueue source = iota
	fromWaiting
)

// claimedEvent is an event of a claimed batch: what publishing it and
// dead-lettering it need.
type claimedEvent struct {
	from source
	// tid is a queue row's physical address (ctid): only the claim's share
	// holder ever deletes the row, and nothing updates it, so it stays put
	// until the batch commits and settling finds it without an index.
	tid           pgtype.TID
	seq           int64
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
	MaxRetries    *int
	CreatedAt     time.Time
	// scheduled says a new event's NotBefore is ahead; blocked that its
	// key has events waiting before it.
	scheduled bool
	blocked   bool
	// status, RetryCount, LastError and FirstFailedAt are a waiting
	// event's state; a new event has none.
	status        string
	RetryCount    int
	LastError     *string
	FirstFailedAt *time.Time
	// invalid says why the row cannot be published as it stands: written
	// around Enqueue's checks (a topic Kafka refuses, headers that are not
	// an object of strings, …). Its attempt fails for good.
	invalid error
}

// scanQueued and scanWaiting scan claimed rows by hand (a claim is the
// relay's hot path, and reflection would cost more than the query) and
// decode the headers only when there are some. A row that cannot be
// published as it stands scans all the same, marked invalid (see check):
// it must fail alone, not fail the claim of every key of its share.
func scanQueued(row pgx.CollectableRow) (claimedEvent, error) {
	e := claimedEvent{from: fromQueue}
	var headers []byte
	var created pgtype.Timestamptz
	err := row.Scan(&e.tid, &e.seq, &e.ID, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID, &e.TenantID,
		&e.CorrelationID, &e.CausationID, &e.Payload, &e.ContentType, &headers, &e.MaxRetries,
		&created, &e.scheduled, &e.blocked)
	if err == nil {
		e.check(headers, created)
	}
	return e, err
}

func scanWaiting(row pgx.CollectableRow) (claimedEvent, error) {
	e := claimedEvent{from: fromWaiting}
	var headers []byte
	var created, firstFailed pgtype.Timestamptz
	err := row.Scan(&e.seq, &e.ID, &e.Topic, &e.Key, &e.Type, &e.AggregateType, &e.AggregateID, &e.TenantID,
		&e.CorrelationID, &e.CausationID, &e.Payload, &e.ContentType, &headers, &e.MaxRetries,
		&created, &e.status, &e.RetryCount, &e.LastError, &firstFailed)
	if err == nil {
		if firstFailed.Valid && firstFailed.InfinityModifier == pgtype.Finite {
			e.FirstFailedAt = &firstFailed.Time
		}
		e.check(headers, created)
	}
	return e, err
}

// check decodes the row's headers and created_at into e and marks e
// invalid when the row holds what Enqueue would have refused, or what
// cannot be published: a topic name Kafka refuses, an empty type, a key or
// an attribute longer than Enqueue allows (MaxKeyBytes, MaxAttributeBytes),
// headers that are not a JSON object of strings or whose names are
// reserved, a created_at at infinity.
func (e *claimedEvent) check(headers []byte, created pgtype.Timestamptz) {
	fail := func(field string, err error) {
		e.invalid = permanentError{fmt.Errorf("%w: %s: %w (fix the row or purge the event)", ErrInvalidRow, field, err)}
	}
	e.CreatedAt = created.Time
	if err := validTopic(e.Topic); err != nil {
		fail("topic", err)
		return
	}
	if e.Type == "" {
		fail("event_type", ErrMissingType)
		return
	}
	if created.InfinityModifier != pgtype.Finite {
		fail("created_at", fmt.Errorf("%s is not a time", created.InfinityModifier))
		return
	}
	for _, f := range []struct {
		column string
		value  *string
		limit  int
	}{
		{"partition_key", e.Key, MaxKeyBytes}, {"event_type", &e.Type, MaxAttributeBytes},
		{"content_type", &e.ContentType, MaxAttributeBytes}, {"aggregate_type", e.AggregateType, MaxAttributeBytes},
		{"aggregate_id", e.AggregateID, MaxAttributeBytes}, {"tenant_id", e.TenantID, MaxAttributeBytes},
		{"correlation_id", e.CorrelationID, MaxAttributeBytes}, {"causation_id", e.CausationID, MaxAttributeBytes},
	} {
		if f.value != nil && len(*f.value) > f.limit {
			fail(f.column, fmt.Errorf("%w: %d bytes, at most %d", ErrTooLong, len(*f.value), f.limit))
			return
		}
	}
	if len(headers) == 0 || string(headers) == "{}" {
		return
	}
	if err := json.Unmarshal(headers, &e.Headers); err != nil {
		fail("headers", fmt.Errorf("%w: want a JSON object of strings, got %.100s: %w", ErrInvalidHeader, headers, err))
		return
	}
	for name, value := range e.Headers {
		if err := validHeader(name, value); err != nil {
			fail(fmt.Sprintf("headers[%q]", name), err)
			return
		}
	}
}

// ErrInvalidRow is matched by the error of an event whose outbox row the
// relay cannot publish as it stands, because it was written around
// Enqueue's checks: the event is dead-lettered at once with that error
// (in DeadLetter.Error and last_error), which names the column.
var ErrInvalidRow = errors.New("producer: the outbox row holds an event Enqueue would refuse")

// claim is one batch's transaction on its own connection: BEGIN goes out
// with the claim and COMMIT with the settle, so a batch costs PostgreSQL two
// round trips.
type claim struct {
	conn    *pgx.Conn
	done    bool
	waiting []claimedEvent
	queued  []claimedEvent
}

// claim begins a transaction on conn, locks what it can of shares, and reads
// up to limit waiting events that are due and up to limit new events of
// those shares. End the claim with settle or abort.
func (s *store) claim(ctx context.Context, conn *pgx.Conn, now pgtype.Timestamptz, limit int, shares []int32, txTimeout time.Duration) (*claim, error) {
	c := &claim{conn: conn}
	batch := &pgx.Batch{}
	batch.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	batch.Queue(s.lockShares, fmt.Sprint(txTimeout.Milliseconds()), shares)
	batch.Queue(s.claimWaiting, now, limit)
	batch.Queue(s.claimQueue, now, limit)
	err := func() error {
		results := conn.SendBatch(ctx, batch)
		defer results.Close()
		for range 2 {
			if _, err := results.Exec(); err != nil {
				return err
			}
		}
		for _, scan := range []struct {
			into *[]claimedEvent
			scan pgx.RowToFunc[claimedEvent]
		}{{&c.waiting, scanWaiting}, {&c.queued, scanQueued}} {
			rows, err := results.Query()
			if err != nil {
				return err
			}
			if *scan.into, err = pgx.CollectRows(rows, scan.scan); err != nil {
				return err
			}
		}
		return results.Close()
	}()
	if err != nil {
		c.abort()
		return nil, fmt.Errorf("producer: claim from %s: %w", s.names.table, err)
	}
	return c, nil
}

// abort rolls the claim back; when even that fails, the connection is
// closed, which ends the transaction on the server too.
func (c *claim) abort() {
	if c.done {
		return
	}
	c.done = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.conn.Exec(ctx, "ROLLBACK"); err != nil {
		_ = c.conn.Close(ctx)
	}
}

// ---- settle ----

// publishQueueSQL moves published new events, found by ctid, to the
// history; publishWaitingSQL moves published waiting events, by seq.
const publishQueueSQL = `
WITH m AS (DELETE FROM {queue} WHERE ctid = ANY($2::tid[]) RETURNING *)
INSERT INTO {published} (seq, ` + eventColumns + `, created_at, retry_count, published_at)
SELECT seq, ` + eventColumns + `, created_at, 0, {now} FROM m`

const publishWaitingSQL = `
WITH m AS (DELETE FROM {waiting} WHERE seq = ANY($2::bigint[]) RETURNING *)
INSERT INTO {published} (seq, ` + eventColumns + `, created_at, retry_count, last_error, first_failed_at, published_at)
SELECT seq, ` + eventColumns + `, created_at, retry_count, last_error, first_failed_at, {now} FROM m`

// discardQueueSQL and discardWaitingSQL delete published events, for a
// relay that keeps no history.
const (
	discardQueueSQL   = `DELETE FROM {queue} WHERE ctid = ANY($1::tid[])`
	discardWaitingSQL = `DELETE FROM {waiting} WHERE seq = ANY($1::bigint[])`
)

// outcomeArrays are a settlement's arrays: seq, new status, whether an
// attempt is counted, the error to record, the delay of the next attempt.
const outcomeArrays = `unnest($2::bigint[], $3::text[], $4::bool[], $5::text[], $6::float8[]) AS u(seq, status, attempted, error, delay_ms)`

// parkQueueSQL moves new events to {waiting}: failed ones, those Kafka
// could not take, those whose NotBefore is ahead, and those behind any of
// these in their key. Each waits until its NotBefore and its delay passed.
const parkQueueSQL = `
WITH m AS (
    DELETE FROM {queue} q USING ` + outcomeArrays + ` WHERE q.seq = u.seq
    RETURNING q.*, u.status AS new_status, u.attempted, u.error, u.delay_ms)
INSERT INTO {waiting} (seq, ` + eventColumns + `, created_at, status, retry_count, last_error, last_attempt_at,
    first_failed_at, next_attempt_at)
SELECT seq, ` + eventColumns + `, created_at, new_status, CASE WHEN attempted THEN 1 ELSE 0 END, error,
    CASE WHEN attempted THEN {now} END, CASE WHEN attempted THEN {now} END,
    GREATEST(COALESCE(not_before, {now}), {now} + COALESCE(delay_ms, 0) * interval '1 millisecond')
FROM m`

// neverDue is the due time of a waiting event that waits for an operator
// to requeue or purge it (see fallback): the last day Admin and the
// clients that read the tables can all represent, where infinity is not a
// time to most of them.
const neverDue = "9999-12-31T00:00:00Z"

// updateWaitingSQL records the outcome of waiting events that stay waiting.
// An empty status keeps the event's; an infinite delay makes it wait until
// an operator requeues or purges it (neverDue).
const updateWaitingSQL = `
UPDATE {waiting} w SET
    status          = COALESCE(NULLIF(u.status, ''), w.status),
    retry_count     = w.retry_count + CASE WHEN u.attempted THEN 1 ELSE 0 END,
    last_error      = COALESCE(u.error, w.last_error),
    last_attempt_at = CASE WHEN u.attempted THEN {now} ELSE w.last_attempt_at END,
    first_failed_at = CASE WHEN u.attempted THEN COALESCE(w.first_failed_at, {now}) ELSE w.first_failed_at END,
    next_attempt_at = CASE WHEN u.delay_ms = 'Infinity' THEN '` + neverDue + `'
                      ELSE {now} + COALESCE(u.delay_ms, 0) * interval '1 millisecond' END
FROM ` + outcomeArrays + `
WHERE w.seq = u.seq`

// deadQueueSQL and deadWaitingSQL move dead-lettered events to {dead}.
const deadQueueSQL = `
WITH m AS (
    DELETE FROM {queue} q USING ` + outcomeArrays + ` WHERE q.seq = u.seq
    RETURNING q.*, u.attempted, u.error)
INSERT INTO {dead} (seq, ` + eventColumns + `, created_at, retry_count, last_error, last_attempt_at, first_failed_at,
    dead_lettered_at)
SELECT seq, ` + eventColumns + `, created_at, CASE WHEN attempted THEN 1 ELSE 0 END, error,
    CASE WHEN attempted THEN {now} END, CASE WHEN attempted THEN {now} END, {now}
FROM m`

const deadWaitingSQL = `
WITH m AS (
    DELETE FROM {waiting} w USING ` + outcomeArrays + ` WHERE w.seq = u.seq
    RETURNING w.*, u.attempted, u.error)
INSERT INTO {dead} (seq, ` + eventColumns + `, created_at, retry_count, last_error, last_attempt_at, first_failed_at,
    dead_lettered_at)
SELECT seq, ` + eventColumns + `, created_at, retry_count + CASE WHEN attempted THEN 1 ELSE 0 END, COALESCE(error, last_error),
    CASE WHEN attempted THEN {now} ELSE last_attempt_at END,
    CASE WHEN attempted THEN COALESCE(first_failed_at, {now}) ELSE first_failed_at END, {now}
FROM m`

// fate is what becomes of one event of a batch.
type fate uint8

const (
	// fateStays: the event stays where it is, untouched.
	fateStays fate = iota
	// fatePublished: to the history.
	fatePublished
	// fateWait: to (or stays in) {waiting}, with the settlement's
	// status, attempt, error and delay.
	fateWait
	// fateDead: to {dead}.
	fateDead
	// fateDiscarded: deleted without a copy in the history (see fallback).
	fateDiscarded
	// fateStuck: a waiting event stays, never due again, with the error
	// (see fallback).
	fateStuck
)

// settlement is the outcome of one event of a batch.
type settlement struct {
	e    *claimedEvent
	fate fate
	// status is the waiting status (pending or failed); empty keeps a
	// waiting event's.
	status string
	// attempted counts a failed attempt (retry_count + 1).
	attempted bool
	// err is the error to record; "" keeps last_error.
	err string
	// delay schedules the next attempt.
	delay time.Duration
}

// outcomeSet is the arrays of outcomeArrays for one statement.
type outcomeSet struct {
	seq       []int64
	status    []string
	attempted []bool
	err       []pgtype.Text
	delay     []pgtype.Float8
}

func (o *outcomeSet) add(st settlement) {
	o.seq = append(o.seq, st.e.seq)
	o.status = append(o.status, st.status)
	o.attempted = append(o.attempted, st.attempted)
	o.err = append(o.err, pgtype.Text{String: st.err, Valid: st.err != ""})
	delay := pgtype.Float8{Float64: float64(st.delay) / float64(time.Millisecond), Valid: st.delay > 0}
	if st.fate == fateStuck {
		delay = pgtype.Float8{Float64: math.Inf(1), Valid: true}
	}
	o.delay = append(o.delay, delay)
}

// queue adds the statement sql on o to batch, unless o is empty.
func (o *outcomeSet) queue(batch *pgx.Batch, sql string, now pgtype.Timestamptz) {
	if len(o.seq) > 0 {
		batch.Queue(sql, now, o.seq, o.status, o.attempted, o.err, o.delay)
	}
}

// queueOutcomes adds to batch the statements that record outcomes.
func (s *store) queueOutcomes(batch *pgx.Batch, now pgtype.Timestamptz, outcomes []settlement) {
	var pubQueue, discardQueue []pgtype.TID
	var pubWaiting, discardWaiting []int64
	var park, update, deadQ, deadW outcomeSet
	for _, st := range outcomes {
		switch {
		case st.fate == fatePublished && s.discard || st.fate == fateDiscarded:
			if st.e.from == fromQueue {
				discardQueue = append(discardQueue, st.e.tid)
			} else {
				discardWaiting = append(discardWaiting, st.e.seq)
			}
		case st.fate == fatePublished && st.e.from == fromQueue:
			pubQueue = append(pubQueue, st.e.tid)
		case st.fate == fatePublished:
			pubWaiting = append(pubWaiting, st.e.seq)
		case st.fate == fateWait && st.e.from == fromQueue:
			park.add(st)
		case st.fate == fateWait, st.fate == fateStuck && st.e.from == fromWaiting:
			update.add(st)
		case st.fate == fateDead && st.e.from == fromQueue:
			deadQ.add(st)
		case st.fate == fateDead:
			deadW.add(st)
		}
	}
	if len(pubQueue) > 0 {
		batch.Queue(s.publishQueue, now, pubQueue)
	}
	if len(pubWaiting) > 0 {
		batch.Queue(s.publishWaiting, now, pubWaiting)
	}
	if len(discardQueue) > 0 {
		batch.Queue(s.discardQueue, discardQueue)
	}
	if len(discardWaiting) > 0 {
		batch.Queue(s.discardWaiting, discardWaiting)
	}
	park.queue(batch, s.parkQueue, now)
	update.queue(batch, s.updateWaiting, now)
	deadQ.queue(batch, s.deadQueue, now)
	deadW.queue(batch, s.deadWaiting, now)
}

// isolatedRow is an event whose outcome the database refused for its data
// (see dataError): planned is the fate it refused, then is what became of
// the event instead, err is PostgreSQL's error.
type isolatedRow struct {
	e             *claimedEvent
	planned, then fate
	err           error
}

// settle records the outcomes and commits, in one round trip. Should
// PostgreSQL refuse one of them for the data of an event (a value a table
// of the outbox cannot hold, a constraint of the operator's, see
// dataError), it records them one at a time instead, and each event it
// refuses takes its fallback (see fallback) rather than failing the batch:
// the batch's other events were published, and must not be again. It
// returns the events so isolated.
func (s *store) settle(ctx context.Context, c *claim, now pgtype.Timestamptz, outcomes []settlement) ([]isolatedRow, error) {
	batch := &pgx.Batch{}
	batch.Queue("SAVEPOINT courier_settle")
	s.queueOutcomes(batch, now, outcomes)
	batch.Queue("COMMIT")
	err := c.conn.SendBatch(ctx, batch).Close()
	var isolated []isolatedRow
	if dataError(err) && c.conn.PgConn().TxStatus() == 'E' {
		isolated, err = s.settleApart(ctx, c, now, outcomes)
	}
	if err == nil && c.conn.PgConn().TxStatus() != 'I' {
		err = errors.New("the transaction did not commit")
	}
	if err != nil {
		c.abort()
		return nil, fmt.Errorf("producer: record publish results in %s: %w", s.names.table, err)
	}
	c.done = true
	return isolated, nil
}

// settleApart records outcomes one event at a time, each under a savepoint
// of its own, after the statements for all of them failed; then commits.
func (s *store) settleApart(ctx context.Context, c *claim, now pgtype.Timestamptz, outcomes []settlement) ([]isolatedRow, error) {
	if _, err := c.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT courier_settle"); err != nil {
		return nil, err
	}
	var isolated []isolatedRow
	for _, st := range outcomes {
		err := s.settleOne(ctx, c, now, st)
		for dataError(err) {
			next := fallback(st, err)
			isolated = append(isolated, isolatedRow{e: st.e, planned: st.fate, then: next.fate, err: err})
			st, err = next, s.settleOne(ctx, c, now, next)
		}
		if err != nil {
			return isolated, err
		}
	}
	_, err := c.conn.Exec(ctx, "COMMIT")
	return isolated, err
}

// settleOne records the outcome of one event under a savepoint, rolled back
// if PostgreSQL refuses it.
func (s *store) settleOne(ctx context.Context, c *claim, now pgtype.Timestamptz, st settlement) error {
	batch := &pgx.Batch{}
	batch.Queue("SAVEPOINT courier_settle_one")
	s.queueOutcomes(batch, now, []settlement{st})
	batch.Queue("RELEASE SAVEPOINT courier_settle_one")
	err := c.conn.SendBatch(ctx, batch).Close()
	if err != nil && c.conn.PgConn().TxStatus() == 'E' {
		if _, rerr := c.conn.Exec(ctx, "ROLLBACK TO SAVEPOINT courier_settle_one"); rerr != nil {
			return rerr
		}
	}
	return err
}

// fallback is what becomes of an event whose outcome st PostgreSQL refused
// with err: a published event leaves the outbox without a copy in the
// history (it is on Kafka: publishing it again would make a duplicate); an
// event that was to wait is dead-lettered; one that was to be
// dead-lettered is dead-lettered in place: a waiting event waits until the
// end of the year 9999 (neverDue), with the error, for an operator to
// requeue or purge it, and a new event stays
// in the queue, which the relay then leaves alone (see Relay.stuck); so
// does an event whose fallback failed too.
func fallback(st settlement, err error) settlement {
	why := fmt.Sprintf("PostgreSQL refused to record it: %v", err)
	if st.err != "" {
		why = st.err + "; " + why
	}
	switch st.fate {
	case fatePublished:
		return settlement{e: st.e, fate: fateDiscarded}
	case fateWait:
		return settlement{e: st.e, fate: fateDead, attempted: st.attempted, err: dlq.TruncateError(why)}
	case fateDead:
		if st.e.from == fromWaiting {
			return settlement{e: st.e, fate: fateStuck, attempted: st.attempted, err: dlq.TruncateError("not dead-lettered: " + why)}
		}
	}
	return settlement{e: st.e, fate: fateStays}
}

// dataError reports whether err is PostgreSQL refusing a statement for the
// data it was given: a data exception (class 22), an integrity constraint
// (23) or a program limit such as an index entry too large (54).
func dataError(err error) bool {
	pgErr, ok := pgError(err)
	return ok && len(pgErr.Code) == 5 && slices.Contains([]string{"22", "23", "54"}, pgErr.Code[:2])
}

// ---- wake-up ----

// probeSQL is the relay's look for new work, cheap enough to run every few
// milliseconds: the queue's sequence (which every enqueue advances, before
// it commits), the transactions in progress (an enqueue seen in the
// sequence commits when its transaction leaves that list), and whether a
// waiting event fell due since the last look ($2).
const probeSQL = `
SELECT s.last_value, s.is_called, pg_current_snapshot()::text,
    EXISTS (SELECT FROM {waiting} w WHERE w.next_attempt_at > $2 AND w.next_attempt_at <= {now}),
    {now}
FROM {seq} s`

// probeResult is what one probe saw.
type probeResult struct {
	seq      int64
	called   bool
	snapshot string
	due      bool
	at       time.Time
}

func (s *store) probeNow(ctx context.Context, db DBTX, now pgtype.Timestamptz, since time.Time) (probeResult, error) {
	var p probeResult
	err := db.QueryRow(ctx, s.probe, now, since).Scan(&p.seq, &p.called, &p.snapshot, &p.due, &p.at)
	if err != nil {
		return p, fmt.Errorf("producer: look for new events in %s: %w", s.names.table, err)
	}
	return p, nil
}

// wakeSQL advances the queue's sequence, which every relay's probe sees:
// the admin's way to wake the relays after it changed what they may claim.
func (s *store) wakeSQL() string { return "SELECT nextval('" + s.names.seq + "')" }

// ---- metrics ----

// backlogSQL counts the events waiting to be published and measures how
// long the oldest due one has been due: the queue's oldest by its head, the
// waiting ones by the due index.
const backlogSQL = `
SELECT (SELECT count(*) FROM {queue}) + (SELECT count(*) FROM {waiting}),
    COALESCE(EXTRACT(EPOCH FROM {now} - LEAST(
        (SELECT COALESCE(not_before, created_at) FROM {queue} ORDER BY seq LIMIT 1),
        (SELECT min(next_attempt_at) FROM {waiting}))), 0)`

// backlog returns the number of events waiting to be published and how long
// the oldest due one has been due (0 when none is due).
func (s *store) backlogNow(ctx context.Context, db DBTX, now pgtype.Timestamptz) (int64, time.Duration, error) {
	var n int64
	var seconds float64
	if err := db.QueryRow(ctx, s.backlog, now).Scan(&n, &seconds); err != nil {
		return 0, 0, fmt.Errorf("producer: measure the backlog of %s: %w", s.names.table, err)
	}
	return n, max(time.Duration(seconds*float64(time.Second)), 0), nil
}

// pgError is the PostgreSQL error in err, if any.
func pgError(err error) (*pgconn.PgError, bool) { return errors.AsType[*pgconn.PgError](err) }

// ---- retention ----

// partitionPrefix starts the name of each day partition of the history:
// <table>_published_pYYYYMMDD.
const partitionDay = "20060102"

// partitionsAhead is how many days beyond today have their partition made
// in advance, so that a relay that cannot maintain them for a while (it
// lacks the rights, PostgreSQL refused the lock) does not fill the default
// partition at once.
const partitionsAhead = 3

// maintainLockKey is the advisory lock that lets one transaction at a time
// change the history's partitions.
func maintainLockKey(table pgname.Table) string {
	return fmt.Sprintf("hashtext('courier maintain %s')", table)
}

// beginner is what retention needs from the database: a transaction for
// the partition changes. *pgxpool.Pool, *pgx.Conn and pgx.Tx (a savepoint)
// have it.
type beginner interface {
	DBTX
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Cleanup is what one retention run removed.
type Cleanup struct {
	// Events is how many published events it removed, in all.
	Events int64
	// Partitions are the day partitions it dropped, oldest first.
	Partitions []string
	// Legacy is true when it dropped the table of version 1 (see the
	// migrations package), every event in it being past retention.
	Legacy bool
	// Keys is how many expired idempotency keys it deleted.
	Keys int64
}

// maintain makes the history's day partitions from today to
// partitionsAhead days ahead and, when retention is positive, removes the
// published events older than it: the day partitions that end before the
// cutoff are dropped whole (after counting their rows), the default
// partition and the idempotency keys lose their expired rows in statements
// of at most batch rows, and the legacy table is dropped once all of it is
// expired. Partition changes happen in one short transaction under an
// advisory lock, so one relay at a time makes them; ok is false when
// another held it (and nothing was done). A lock on the history that
// another session holds for over a second makes it give up; it is tried
// again at the next run.
func (s *store) maintain(ctx context.Context, db beginner, now pgtype.Timestamptz, retention time.Duration, batch int) (c Cleanup, ok bool, err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return c, false, s.maintainErr(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var today time.Time
	q := "SELECT pg_try_advisory_xact_lock(" + maintainLockKey(s.names.table) + ", 0), " + dbNow + ", " +
		"set_config('lock_timeout', '1s', true), to_regclass($2) IS NOT NULL"
	var legacy bool
	if err := tx.QueryRow(ctx, q, now, s.names.legacy).Scan(&ok, &today, nil, &legacy); err != nil || !ok {
		return c, false, s.maintainErr(err)
	}
	parts, err := s.partitions(ctx, tx)
	if err != nil {
		return c, true, s.maintainErr(err)
	}
	day := today.UTC().Truncate(24 * time.Hour)
	for d := range partitionsAhead + 1 {
		from := day.AddDate(0, 0, d)
		name := s.names.table.Name + "_published_p" + from.Format(partitionDay)
		if _, made := parts[name]; made {
			continue
		}
		// Events of that day that found no partition are in the default
		// one, which PostgreSQL will not split: they leave it by retention.
		var stray bool
		err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM "+s.names.partitionDefault+" WHERE published_at >= $1 AND published_at < $2)",
			from, from.AddDate(0, 0, 1)).Scan(&stray)
		if err != nil {
			return c, true, s.maintainErr(err)
		}
		if stray {
			continue
		}
		sql := fmt.Sprintf("CREATE TABLE %s.%s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')", s.names.table.Schema, name,
			s.names.published, from.Format(time.RFC3339), from.AddDate(0, 0, 1).Format(time.RFC3339))
		if _, err := tx.Exec(ctx, sql); err != nil {
			return c, true, s.maintainErr(err)
		}
	}
	var drop []string
	if retention > 0 {
		cutoff := today.Add(-retention)
		for name, from := range parts {
			if !from.IsZero() && !from.AddDate(0, 0, 1).After(cutoff) {
				drop = append(drop, name)
			}
		}
		slices.Sort(drop)
		for _, name := range drop {
			var n int64
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+s.names.table.Schema+"."+name).Scan(&n); err != nil {
				return c, true, s.maintainErr(err)
			}
			c.Events += n
		}
		if legacy {
			var n int64
			var newest *time.Time
			err := tx.QueryRow(ctx, "SELECT count(*), max(published_at) FROM "+s.names.legacy).Scan(&n, &newest)
			if err != nil {
				return c, true, s.maintainErr(err)
			}
			if newest == nil || newest.Before(cutoff) {
				c.Legacy, c.Events = true, c.Events+n
				drop = append(drop, s.names.table.Name+"_legacy")
			}
		}
	}
	for _, name := range drop {
		if _, err := tx.Exec(ctx, "DROP TABLE "+s.names.table.Schema+"."+name); err != nil {
			return Cleanup{}, true, s.maintainErr(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Cleanup{}, true, s.maintainErr(err)
	}
	c.Partitions = drop[:len(drop)-boolInt(c.Legacy)]
	if retention <= 0 {
		return c, true, nil
	}
	cutoff := pgtype.Timestamptz{Time: today.Add(-retention), Valid: true}
	deleted, err := s.deleteExpired(ctx, db, "DELETE FROM "+s.names.partitionDefault+" WHERE ctid IN (SELECT ctid FROM "+
		s.names.partitionDefault+" WHERE published_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)", cutoff, batch)
	c.Events += deleted
	if err != nil {
		return c, true, err
	}
	c.Keys, err = s.deleteExpired(ctx, db, "DELETE FROM "+s.names.keys+" WHERE ctid IN (SELECT ctid FROM "+
		s.names.keys+" WHERE created_at < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)", cutoff, batch)
	return c, true, err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// partitions returns the day partitions of the history by name, with the
// day each starts; a partition courier did not name (the default, or one
// made by hand) has the zero time and is never dropped.
func (s *store) partitions(ctx context.Context, db DBTX) (map[string]time.Time, error) {
	rows, err := db.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass`, s.names.published)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	prefix := s.names.table.Name + "_published_p"
	parts := make(map[string]time.Time, len(names))
	for _, name := range names {
		day, err := time.Parse(partitionDay, strings.TrimPrefix(name, prefix))
		if !strings.HasPrefix(name, prefix) || err != nil {
			day = time.Time{}
		}
		parts[name] = day
	}
	return parts, nil
}

// deleteExpired runs sql ($1 the cutoff, $2 the batch) until it deletes
// fewer than batch rows, and returns how many it deleted.
func (s *store) deleteExpired(ctx context.Context, db DBTX, sql string, cutoff pgtype.Timestamptz, batch int) (int64, error) {
	var total int64
	for {
		tag, err := db.Exec(ctx, sql, cutoff, batch)
		if err != nil {
			return total, s.maintainErr(err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}

func (s *store) maintainErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("producer: retention and partitions of %s: %w", s.names.table, s.undefinedObject(err))
}

// ---- vacuum ----

// vacuumMinDead is how many dead rows a queue table must hold, and more
// than its live ones, before the relay vacuums it itself: a queue at
// thousands of events a second stays within a few megabytes.
const vacuumMinDead = 2_000

// deadSQL reads the dead and live rows PostgreSQL counts in the queue and
// in waiting.
const deadSQL = `
SELECT relid::regclass::text, n_dead_tup, n_live_tup FROM pg_stat_user_tables
WHERE relid IN ('{queue}'::regclass, '{waiting}'::regclass)`

// vacuum vacuums the queue and waiting tables when dead rows (each
// published event leaves one in the queue) outnumber the live ones and
// vacuumMinDead: what autovacuum does, for a PostgreSQL where it is off or
// lags behind, so that the queue stays as small as its backlog. A table
// another vacuum holds is skipped. It leaves the table's empty tail in
// place (TRUNCATE false): cutting it off would take a lock that makes every
// enqueue wait, and the next seconds' events fill those pages again. It
// returns the tables it vacuumed.
func (s *store) vacuum(ctx context.Context, db DBTX) ([]string, error) {
	rows, err := db.Query(ctx, s.names.render(deadSQL, false))
	if err != nil {
		return nil, s.maintainErr(err)
	}
	var due []string
	var table string
	var dead, live int64
	_, err = pgx.ForEachRow(rows, []any{&table, &dead, &live}, func() error {
		if dead >= vacuumMinDead && dead >= live {
			due = append(due, table)
		}
		return nil
	})
	if err != nil {
		return nil, s.maintainErr(err)
	}
	for i, table := range due {
		if _, err := db.Exec(ctx, "VACUUM (SKIP_LOCKED, TRUNCATE false) "+table); err != nil {
			return due[:i], s.maintainErr(err)
		}
	}
	return due, nil
}
