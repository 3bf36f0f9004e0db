package producer

// This file owns the SQL of an outbox: its column list (eventColumns),
// every statement the enqueue, the relay, the admin and the layout check
// send, and their rendering for one schema and table (outboxNames.render).
// The code that runs them is in store.go, admin.go, summary.go, audit.go,
// outbox.go, layout.go and presence.go; beside transaction control (BEGIN, COMMIT, ROLLBACK and
// savepoints) none of it writes SQL of its own. The other writers are the
// benchmark harness (cmd/courier/internal/bench) and BenchmarkAdminAtOneMillion,
// which seed what they measure (backlogs in bulk, a history of millions of
// published rows that Enqueue would take hours to write) and read table
// sizes; no code path of a service runs their SQL.

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/courierkit/courier/internal/pgname"
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

	lockShares, sleeping, claimQueue, claimWaiting string

	publishQueue, publishWaiting, parkQueue, updateWaiting, deadQueue, deadWaiting string
	discardQueue, discardWaiting, wakeHeld, sleepBehindHeld                        string

	probe, backlog string
}

// outboxNames are the schema-qualified names of an outbox's objects.
type outboxNames struct {
	table                                      pgname.Table
	queue, waiting, dead, published, keys, seq string
	activity, audit                            string
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
		activity:         t.Derived("activity"),
		audit:            t.Derived("audit"),
		legacy:           t.Derived("legacy"),
		partitionDefault: t.Derived("published_default"),
	}
}

// render fills the placeholders of a statement: {queue}, {waiting}, {dead},
// {published}, {keys}, {seq}, {activity}, {audit}, {now} (see dbNow) and
// {hold} (HoldKeyOnDeadLetter).
func (n outboxNames) render(sql string, hold bool) string {
	held := "false"
	if hold {
		held = "true"
	}
	return strings.NewReplacer(
		"{queue}", n.queue, "{waiting}", n.waiting, "{dead}", n.dead, "{published}", n.published,
		"{keys}", n.keys, "{seq}", n.seq, "{activity}", n.activity, "{audit}", n.audit, "{now}", dbNow, "{hold}", held,
	).Replace(sql)
}

// newStore makes the statements of table: a dead letter holds its key
// with holdOnDeadLetter, and a published event is deleted rather than kept
// in the history with discardPublished.
func newStore(table pgname.Table, holdOnDeadLetter, discardPublished bool) *store {
	n := newOutboxNames(table)
	r := func(sql string) string { return n.render(sql, holdOnDeadLetter) }
	return &store{
		names:           n,
		hold:            holdOnDeadLetter,
		discard:         discardPublished,
		insertOne:       r(insertOneSQL),
		insertMany:      r(insertManySQL),
		insertKeyed:     r(insertKeyedSQL),
		claimIDs:        r(claimIDsSQL),
		unclaim:         r(unclaimSQL),
		lookupKeys:      r(lookupKeysSQL),
		lockShares:      fmt.Sprintf(lockSharesSQL, shareLockKey(table)),
		sleeping:        r(sleepingSQL),
		claimQueue:      r(claimQueueSQL),
		claimWaiting:    r(claimWaitingSQL),
		publishQueue:    r(publishQueueSQL),
		publishWaiting:  r(publishWaitingSQL),
		discardQueue:    r(discardQueueSQL),
		discardWaiting:  r(discardWaitingSQL),
		parkQueue:       r(parkQueueSQL),
		updateWaiting:   r(updateWaitingSQL),
		deadQueue:       r(deadQueueSQL),
		deadWaiting:     r(deadWaitingSQL),
		wakeHeld:        r(wakeHeldSQL),
		sleepBehindHeld: r(sleepBehindHeldSQL),
		probe:           r(probeSQL),
		backlog:         r(backlogSQL),
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

// eventColumnNames are the names of eventColumns, one per element.
func eventColumnNames() []string {
	return strings.Split(strings.Join(strings.Fields(eventColumns), " "), ", ")
}

// copyColumns are the queue's columns a COPY may write, in the order of
// the enqueue's values: eventColumns and not_before.
var copyColumns = append(eventColumnNames(), "not_before")

// claimedColumns are the columns of eventColumns a claim reads (all but
// the idempotency key, which publishing does not need), of table alias a.
func claimedColumns(a string) string {
	cols := eventColumnNames()
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
// Kafka is healthy; then it is one probe of the key index per event: the
// OFFSET 0 keeps PostgreSQL from making the EXISTS a hash of the whole
// waiting table, built again at every claim, which costs as much as the
// table is long (BenchmarkRelayBesideAHeldPartition/alone-while-4000-wait).
// No row is locked: the share locks make this claim the
// only reader of these events that will write them.
var claimQueueSQL = `
SELECT q.ctid, q.seq, ` + claimedColumns("q") + `, q.created_at, COALESCE(q.not_before > {now}, false) AS scheduled,
    q.partition_key IS NOT NULL AND NOT (SELECT NOT EXISTS (SELECT FROM {waiting}) AND NOT ({hold} AND EXISTS (SELECT FROM {dead})))
    AND (EXISTS (SELECT FROM {waiting} w WHERE ` + sameKey("w", "q") + ` OFFSET 0)
         OR ` + heldByDead("q") + `) AS blocked
FROM {queue} q
WHERE ` + shareOf("q") + ` = ANY ` + claimedShares + `
ORDER BY q.seq
LIMIT $2`

// sleepingSQL lists the partitions whose events sleep through a hold (see
// wakeHeldSQL), each once, up to $1 of them: a batch wakes them when it
// sees one take a write. It skips from one partition to the next in the
// index of sleepers, a probe a partition, so it costs as little with a
// million sleepers as with one, and one probe of an empty index while
// Kafka is healthy.
const sleepingSQL = `
WITH RECURSIVE p AS (
    (SELECT topic, held_partition FROM {waiting} WHERE held_partition IS NOT NULL ORDER BY topic, held_partition LIMIT 1)
    UNION ALL
    SELECT n.topic, n.held_partition FROM p CROSS JOIN LATERAL (
        SELECT w.topic, w.held_partition FROM {waiting} w
        WHERE w.held_partition IS NOT NULL AND (w.topic, w.held_partition) > (p.topic, p.held_partition)
        ORDER BY w.topic, w.held_partition LIMIT 1) n)
SELECT topic, held_partition FROM p LIMIT $1`

// claimWaitingSQL reads up to $2 waiting events of the claimed shares that
// are due and not behind an event of their key that is not (nor, with
// HoldKeyOnDeadLetter, behind an older dead letter), in seq order. The
// events a held partition keeps sleep (see wakeHeldSQL), so the claim
// does not walk them.
var claimWaitingSQL = `
SELECT w.seq, ` + claimedColumns("w") + `, w.created_at,
    w.status, w.retry_count, w.last_error, w.first_failed_at, w.held_partition
FROM {waiting} w
WHERE ` + shareOf("w") + ` = ANY ` + claimedShares + `
  AND w.next_attempt_at <= {now}
  AND (w.partition_key IS NULL OR NOT EXISTS (
      SELECT FROM {waiting} b
      WHERE ` + sameKey("b", "w") + ` AND b.seq < w.seq AND b.next_attempt_at > {now}))
  AND NOT ` + heldByDead("w") + `
ORDER BY w.seq
LIMIT $2`

// ---- settle ----

// publishQueueSQL moves published new events, found by ctid, to the
// history; publishWaitingSQL moves published waiting events, by seq. Both
// add them to the activity (see addActivity).
const publishQueueSQL = `
WITH m AS (DELETE FROM {queue} WHERE ctid = ANY($2::tid[]) RETURNING *),
h AS (
    INSERT INTO {published} (seq, ` + eventColumns + `, created_at, retry_count, published_at)
    SELECT seq, ` + eventColumns + `, created_at, 0, {now} FROM m)` + addActivity

const publishWaitingSQL = `
WITH m AS (DELETE FROM {waiting} WHERE seq = ANY($2::bigint[]) RETURNING *),
h AS (
    INSERT INTO {published} (seq, ` + eventColumns + `, created_at, retry_count, last_error, first_failed_at, published_at)
    SELECT seq, ` + eventColumns + `, created_at, retry_count, last_error, first_failed_at, {now} FROM m)` + addActivity

// wakeHeldSQL makes due every event that sleeps through the hold of a
// partition whose hold a batch saw end ($2 topics, $3 partitions; -1 for a
// whole topic's hold): it published the partition's probe (an event that
// was held on it), the broker answered for such an event's record itself
// (a topic missing past MissingTopicGrace), an acknowledgement ended the
// relay's own hold of it, or the broker took a write on it or answered for
// a record on it while its events slept (see sleepingSQL).
// A held partition's other events sleep, for at most holdSleep, until
// then (see Relay.settleHeld), so a hold costs a try of one event per
// step, however many wait. It runs only in such a batch, and finds the
// sleepers by their index (migration 8), one partition at a time.
//
// The sleepers are of every share, most of them of other relays' claims:
// this is the one write to another claim's rows. It touches only events
// that sleep (due later), which no claim reads, so no relay's settle ever
// writes a row it locked but sleepBehindHeldSQL, which skips locked rows;
// and it skips the rows another transaction holds. So it never waits, and
// no settle waits for it. Waking is always safe: at worst an event is
// tried once more than it needed.
const wakeHeldSQL = `
UPDATE {waiting} s SET next_attempt_at = {now}, held_partition = NULL
FROM unnest($2::text[], $3::int[]) AS p(topic, partition) CROSS JOIN LATERAL (
    SELECT w.seq FROM {waiting} w
    WHERE w.held_partition IS NOT NULL AND w.topic = p.topic AND w.held_partition = p.partition
      AND w.next_attempt_at > {now}
    FOR UPDATE OF w SKIP LOCKED) x
WHERE s.seq = x.seq`

// sleepBehindHeldSQL puts to sleep, for $3 milliseconds (holdSleep), the
// events of the keys of the waiting events $2 that a hold keeps, just
// settled, behind them and due no later than them: a held event's
// followers would otherwise be due before it (they did not fit in the
// batch that claimed it, or their sleep ran out first), and every claim
// would walk them, in vain, until it went (see claimWaitingSQL). So no
// event of a held key is due before the held event ahead of it, and each
// sleeps at most once per holdSleep. It leaves alone a follower waiting
// for its own time (a NotBefore ahead, a retry's backoff): a wake would
// make it due too early. The followers are of the claim's own shares; it
// skips those another relay's wake holds (wakeHeldSQL), as that wakes
// them anyway.
var sleepBehindHeldSQL = `
UPDATE {waiting} f SET next_attempt_at = {now} + x.sleep_ms * interval '1 millisecond', held_partition = x.held_partition
FROM unnest($2::bigint[], $3::float8[]) AS u(seq, sleep_ms) JOIN {waiting} h ON h.seq = u.seq CROSS JOIN LATERAL (
    SELECT b.seq, h.held_partition, u.sleep_ms FROM {waiting} b
    WHERE ` + sameKey("b", "h") + ` AND b.seq > h.seq AND b.next_attempt_at <= h.next_attempt_at
      AND b.next_attempt_at < {now} + u.sleep_ms * interval '1 millisecond'
      AND (b.held_partition IS NOT NULL OR b.next_attempt_at <= {now})
    FOR UPDATE OF b SKIP LOCKED) x
WHERE f.seq = x.seq`

// discardQueueSQL and discardWaitingSQL delete published events, for a
// relay that keeps no history, and add them to the activity.
const (
	discardQueueSQL   = `WITH m AS (DELETE FROM {queue} WHERE ctid = ANY($2::tid[]) RETURNING created_at)` + addActivity
	discardWaitingSQL = `WITH m AS (DELETE FROM {waiting} WHERE seq = ANY($2::bigint[]) RETURNING created_at)` + addActivity
)

// addActivity adds the events of m, published now, to the activity of the
// minute (table {activity}, migration 6): how many, and their lags from
// enqueue, summed and the largest. The relay's transactions each add to a
// row of their own, that of the first share they claimed (no two hold the
// same share at once), so they never wait for each other.
const addActivity = `
INSERT INTO {activity} AS a (minute, shard, published, lag_sum_seconds, lag_max_seconds)
SELECT date_trunc('minute', {now}), COALESCE((current_setting('courier.claim_shares', true)::int[])[1], 0), count(*),
    sum(GREATEST(date_part('epoch', {now} - m.created_at), 0)), GREATEST(date_part('epoch', {now} - min(m.created_at)), 0)
FROM m
HAVING count(*) > 0
ON CONFLICT (minute, shard) DO UPDATE SET
    published       = a.published + excluded.published,
    lag_sum_seconds = a.lag_sum_seconds + excluded.lag_sum_seconds,
    lag_max_seconds = GREATEST(a.lag_max_seconds, excluded.lag_max_seconds)`

// outcomeArrays are a settlement's arrays: seq, new status, whether an
// attempt is counted, the error to record, the delay of the next attempt,
// the partition whose hold it waits through (see wakeHeldSQL).
const outcomeArrays = `unnest($2::bigint[], $3::text[], $4::bool[], $5::text[], $6::float8[], $7::int[])
    AS u(seq, status, attempted, error, delay_ms, held_partition)`

// parkQueueSQL moves new events to {waiting}: failed ones, those Kafka
// could not take, those whose NotBefore is ahead, and those behind any of
// these in their key. Each waits until its NotBefore and its delay passed;
// one whose key's latest waiting event (p) a held partition keeps waits as
// long and is woken with it (see wakeHeldSQL), so that the claim does not
// walk it while it cannot go; but an event whose NotBefore is ahead waits
// for that alone, since a wake would make it due before it. The lookup of
// p reads the key index alone, from its end: one probe, however many
// events a hold keeps.
var parkQueueSQL = `
WITH m AS (
    DELETE FROM {queue} q USING ` + outcomeArrays + ` WHERE q.seq = u.seq
    RETURNING q.*, u.status AS new_status, u.attempted, u.error, u.delay_ms, u.held_partition AS held_on)
INSERT INTO {waiting} (seq, ` + eventColumns + `, created_at, status, retry_count, last_error, last_attempt_at,
    first_failed_at, next_attempt_at, held_partition)
SELECT seq, ` + eventColumns + `, created_at, new_status, CASE WHEN attempted THEN 1 ELSE 0 END, error,
    CASE WHEN attempted THEN {now} END, CASE WHEN attempted THEN {now} END,
    GREATEST(COALESCE(not_before, {now}), {now} + COALESCE(delay_ms, 0) * interval '1 millisecond', p.next_attempt_at),
    COALESCE(held_on, p.held_partition)
FROM m LEFT JOIN LATERAL (
    SELECT b.next_attempt_at, b.held_partition FROM {waiting} b
    WHERE m.partition_key IS NOT NULL AND ` + sameKey("b", "m") + `
    ORDER BY b.seq DESC LIMIT 1) p ON p.held_partition IS NOT NULL AND NOT COALESCE(m.not_before > {now}, false)`

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
                      ELSE {now} + COALESCE(u.delay_ms, 0) * interval '1 millisecond' END,
    held_partition  = u.held_partition
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

// ---- layout ----

// layoutColumns are the columns the relay, the enqueue and the admin read
// or write, by table suffix ("" is the queue itself): the current layout.
var layoutColumns = []struct {
	suffix  string
	columns string
}{
	{"", "seq, " + eventColumns + ", not_before, created_at"},
	{"waiting", "seq, " + eventColumns + ", created_at, status, retry_count, last_error, last_attempt_at, first_failed_at, next_attempt_at, held_partition"},
	{"dead", "seq, " + eventColumns + ", created_at, retry_count, last_error, last_attempt_at, first_failed_at, dead_lettered_at"},
	{"published", "seq, " + eventColumns + ", created_at, retry_count, last_error, first_failed_at, published_at"},
	{"keys", "topic, idempotency_key, event_id, created_at"},
	{"seq", "last_value, is_called"},
	{"activity", "minute, shard, published, lag_sum_seconds, lag_max_seconds"},
}

// layoutSQL lists what of the layout is missing: the schema ($1), the
// relations ($2), the columns ($3 of the relation $4), the indexes by a
// hash of topic and key ($6 of the relation $5).
const layoutSQL = `
SELECT (SELECT CASE WHEN to_regnamespace($1) IS NULL THEN ARRAY['schema ' || $1] ELSE '{}' END)
    || ARRAY(SELECT 'table ' || r FROM unnest($2::text[]) WITH ORDINALITY AS r(r, i) WHERE to_regclass(r) IS NULL ORDER BY i)
    || ARRAY(SELECT 'column ' || c.r || '.' || c.c FROM unnest($4::text[], $3::text[]) WITH ORDINALITY AS c(r, c, i)
        WHERE to_regclass(c.r) IS NOT NULL AND NOT EXISTS (
            SELECT FROM pg_attribute a WHERE a.attrelid = to_regclass(c.r) AND a.attname = c.c AND NOT a.attisdropped)
        ORDER BY i)
    || ARRAY(SELECT 'index ' || x.i || ' on a hash of topic and key' FROM unnest($5::text[], $6::text[]) WITH ORDINALITY AS x(r, i, n)
        WHERE to_regclass(x.r) IS NOT NULL AND NOT EXISTS (
            SELECT FROM pg_index p WHERE p.indexrelid = to_regclass(x.i) AND pg_get_indexdef(p.indexrelid) LIKE '%hashtextextended(%')
        ORDER BY n)`

// outboxTablesSQL says whether the queue table ($1) and its waiting table
// ($2), which a courier before the current layout lacks, exist.
const outboxTablesSQL = "SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL"

// ---- presence ----

// presenceLockKey is the first key of the slot locks of a table: a
// non-negative hash of its name, so that pg_locks shows it as it is.
func presenceLockKey(table string) string {
	return fmt.Sprintf("(hashtext('courier relay presence %s') & 2147483647)", table)
}

// takeSlotsSQL takes up to $1 free slot locks of table for the session.
func takeSlotsSQL(table string) string {
	return fmt.Sprintf("SELECT s FROM generate_series(0, %d) AS s WHERE pg_try_advisory_lock(%s, s) LIMIT $1",
		maxSlots-1, presenceLockKey(table))
}

// heldSlotsSQL lists the slot locks of table every relay holds, in order.
func heldSlotsSQL(table string) string {
	return "SELECT objid::int4 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND granted " +
		"AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) AND classid::bigint = " +
		presenceLockKey(table) + " ORDER BY 1"
}

// ---- admin ----

// statsSQL counts the events of each status, the published ones up to $1
// (see Stats), and finds when the oldest due event became due: the
// queue's head, or the earliest due waiting event.
const statsSQL = `
WITH due AS (SELECT LEAST(
    (SELECT COALESCE(not_before, created_at) FROM {queue} ORDER BY seq LIMIT 1),
    (SELECT min(next_attempt_at) FROM {waiting})) AS at)
SELECT (SELECT count(*) FROM {queue}) + (SELECT count(*) FROM {waiting} WHERE status = 'pending'),
    (SELECT count(*) FROM {waiting} WHERE status = 'failed'),
    (SELECT count(*) FROM (SELECT FROM {published} /*legacy*/ LIMIT $1) h),
    (SELECT count(*) FROM {dead}),
    CASE WHEN at <= now() THEN at END, CASE WHEN at <= now() THEN now() - at END
FROM due`

// statsFor renders statsSQL, with the events of the legacy table among the
// published ones when legacy.
func (n outboxNames) statsFor(legacy bool) string {
	sql := n.render(statsSQL, false)
	if legacy {
		sql = strings.Replace(sql, "/*legacy*/", "UNION ALL SELECT FROM "+n.legacy, 1)
	}
	return sql
}

// estimatePublishedSQL estimates how many events the history (the
// partitions of $1) and the legacy table ($2, if it exists) hold, as the
// planner does: each table's rows per page, by its statistics (autovacuum
// and ANALYZE keep them), times its pages now. A table never analyzed
// counts 0.
const estimatePublishedSQL = `
SELECT COALESCE(sum(CASE WHEN c.relpages > 0 AND c.reltuples > 0
    THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::int) ELSE 0 END), 0)::bigint
FROM pg_class c
WHERE c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = $1::regclass) OR c.oid = to_regclass($2)`

// lastAttempt is the time Filter.Since and Until bound in the tables of
// events still in the outbox: the last attempt, or the enqueue of an event
// never attempted.
const lastAttempt = "COALESCE(last_attempt_at, created_at)"

// recordSource is one table of an outbox as rows of Record, for the events
// of one status: sql selects its columns in Record's order (the conditions
// of Filter.where are over those), and at is the expression, over those
// columns, of the time Filter.Since and Until bound there.
type recordSource struct {
	status, sql, at string
}

// recordSources are the tables of an outbox as rows of Record, by status.
// The history's time is its published_at, which its BRIN index (migration
// 6) finds by range; its condition seq > 0 (every event's) lets the planner
// price a lookup by key, aggregate id or tenant in its index of those (see
// historyKeys).
var recordSources = []recordSource{
	{StatusPending, `SELECT id, seq, ` + recordEventColumns + `, 'pending'::text AS status, 0 AS retry_count, max_retries,
    NULL::text AS last_error, NULL::timestamptz AS last_attempt_at, NULL::timestamptz AS first_failed_at,
    COALESCE(not_before, created_at) AS next_attempt_at, created_at, NULL::timestamptz AS published_at
FROM {queue}`, "created_at"},
	{StatusPending, `SELECT id, seq, ` + recordEventColumns + `, status, retry_count, max_retries, last_error, last_attempt_at,
    first_failed_at, next_attempt_at, created_at, NULL::timestamptz AS published_at FROM {waiting} WHERE status = 'pending'`, lastAttempt},
	{StatusFailed, `SELECT id, seq, ` + recordEventColumns + `, status, retry_count, max_retries, last_error, last_attempt_at,
    first_failed_at, next_attempt_at, created_at, NULL::timestamptz AS published_at FROM {waiting} WHERE status = 'failed'`, lastAttempt},
	{StatusDeadLettered, `SELECT id, seq, ` + recordEventColumns + `, 'dead_lettered'::text AS status, retry_count, max_retries,
    last_error, last_attempt_at, first_failed_at, dead_lettered_at AS next_attempt_at, created_at,
    NULL::timestamptz AS published_at FROM {dead}`, lastAttempt},
	{StatusPublished, `SELECT id, seq, ` + recordEventColumns + `, 'published'::text AS status, retry_count, max_retries,
    last_error, published_at AS last_attempt_at, first_failed_at, created_at AS next_attempt_at, created_at, published_at
FROM {published} WHERE ` + historyKeys, "last_attempt_at"},
}

// historyKeys is true of every event of the history, and makes the
// planner use its index by key, aggregate id and tenant (migration 6) for
// a lookup by one of them: that index holds a bloom filter of each per
// block range, of which the planner has no estimate, beside the range of
// seq; with a condition on seq too, it prices the index by the seq's order,
// and the lookup reads the ranges that may hold the value, where without
// it the planner would rather read the whole history.
const historyKeys = "seq > 0"

// legacySource is the published events of a table of version 1, while one
// is left (see the migrations package).
var legacySource = `SELECT id, seq, ` + recordEventColumns + `, status, retry_count, max_retries, last_error,
    last_attempt_at, first_failed_at, next_attempt_at, created_at, published_at FROM {legacy}`

// recordEventColumns are the event columns in Record's order, after ID and
// Seq: eventColumns but the id and max_retries, headers never NULL.
var recordEventColumns = strings.Replace(strings.TrimSuffix(strings.TrimPrefix(eventColumns, "id, "), ", max_retries"),
	", headers", ", COALESCE(headers, '{}'::jsonb) AS headers", 1)

// recordsSQL is the rows of Record of the given statuses matching cond (see
// Filter.where) as one subquery, with the legacy table's when legacy. The
// condition applies to each table apart, with its own time (see
// recordSource), so that each table's indexes serve it.
func (n outboxNames) recordsSQL(statuses []string, legacy bool, cond string) string {
	var parts []string
	add := func(sql, at string) {
		parts = append(parts, "SELECT * FROM ("+sql+") s WHERE "+strings.ReplaceAll(cond, "{at}", at))
	}
	for _, src := range recordSources {
		if slices.Contains(statuses, src.status) {
			add(src.sql, src.at)
		}
	}
	if legacy {
		add(strings.ReplaceAll(legacySource, "{legacy}", n.legacy), lastAttempt)
	}
	return "(" + n.render(strings.Join(parts, "\nUNION ALL\n"), false) + ") r"
}

// existsSQL says whether the relation $1 exists.
const existsSQL = "SELECT to_regclass($1) IS NOT NULL"

// lastSeqSQL reads the last seq the queue's sequence gave out: no event
// has a higher one.
func (n outboxNames) lastSeqSQL() string { return "SELECT last_value FROM " + n.seq }

// listSQL reads the records from (see recordsSQL) with a seq above
// argument nargs-2 and at most argument nargs-1, in seq order, at most
// argument nargs of them.
func listSQL(from string, nargs int) string {
	return fmt.Sprintf("SELECT * FROM %s WHERE seq > $%d AND seq <= $%d ORDER BY seq LIMIT $%d", from, nargs-2, nargs-1, nargs)
}

// countSQL counts the records from (see recordsSQL), up to argument nargs.
func countSQL(from string, nargs int) string {
	return fmt.Sprintf("SELECT count(*) FROM (SELECT 1 FROM %s LIMIT $%d) c", from, nargs)
}

// getSQL reads the record of id $1 from (see recordsSQL).
func getSQL(from string) string { return "SELECT * FROM " + from + " LIMIT 1" }

// requeueFailed and requeueDead select the events Requeue resets, in
// {waiting} and {dead}: requeueSQL resets them and countRequeueSQL counts
// them.
const (
	requeueFailed = "{requeue_failed} AND status = 'failed' AND {where}"
	requeueDead   = "{requeue_dead} AND {where}"
)

// requeueSQL makes the matching failed events pending and due, and moves
// the matching dead letters back to waiting, pending and due; then it
// advances the queue's sequence, which wakes the relays.
const requeueSQL = `
WITH f AS (
    UPDATE {waiting} SET status = 'pending', retry_count = 0, first_failed_at = NULL, next_attempt_at = now()
    WHERE ` + requeueFailed + `
    RETURNING 1),
d AS (DELETE FROM {dead} WHERE ` + requeueDead + ` RETURNING *),
w AS (
    INSERT INTO {waiting} (seq, ` + eventColumns + `, created_at, status, retry_count, last_error, last_attempt_at,
        first_failed_at, next_attempt_at)
    SELECT seq, ` + eventColumns + `, created_at, 'pending', 0, last_error, last_attempt_at, NULL, now() FROM d
    RETURNING 1),
wake AS (SELECT nextval('{seq}'))
SELECT (SELECT count(*) FROM f) + (SELECT count(*) FROM w) FROM wake`

// countRequeueSQL counts the events requeueSQL would reset.
const countRequeueSQL = `
SELECT (SELECT count(*) FROM {waiting} WHERE ` + requeueFailed + `)
    + (SELECT count(*) FROM {dead} WHERE ` + requeueDead + `)`

// requeueFor renders sql (requeueSQL or countRequeueSQL) for the events
// matching cond (see Filter.where), failed ones when failed, dead letters
// when dead.
func (n outboxNames) requeueFor(sql, cond string, failed, dead bool) string {
	return n.render(strings.NewReplacer("{where}", strings.ReplaceAll(cond, "{at}", lastAttempt),
		"{requeue_failed}", fmt.Sprint(failed), "{requeue_dead}", fmt.Sprint(dead)).Replace(sql), false)
}

// purgeTarget is a table Purge deletes from: at is the time Filter.Since
// and Until bound there, only what else picks the events it deletes.
type purgeTarget struct {
	table, at, only string
}

// purgeTargets are the tables of the events of statuses, the legacy
// table's published events too when legacy.
func (n outboxNames) purgeTargets(statuses []string, legacy bool) []purgeTarget {
	var targets []purgeTarget
	if slices.Contains(statuses, StatusDeadLettered) {
		targets = append(targets, purgeTarget{n.dead, lastAttempt, "true"})
	}
	if slices.Contains(statuses, StatusPublished) {
		// Without historyKeys: an exact count or a delete of the events
		// of a frequent tenant reads the whole history anyway, and the
		// planner then reads it in parallel.
		targets = append(targets, purgeTarget{n.published, "published_at", "true"})
		if legacy {
			targets = append(targets, purgeTarget{n.legacy, lastAttempt, "status = 'published'"})
		}
	}
	return targets
}

// where selects the events of t matching cond (see Filter.where).
func (t purgeTarget) where(cond string) string {
	return t.only + " AND " + strings.ReplaceAll(cond, "{at}", t.at)
}

// purgeSQL deletes the events of t matching cond; countPurgeSQL counts
// them.
func (t purgeTarget) purgeSQL(cond string) string {
	return "DELETE FROM " + t.table + " WHERE " + t.where(cond)
}

func (t purgeTarget) countPurgeSQL(cond string) string {
	return "SELECT count(*) FROM " + t.table + " WHERE " + t.where(cond)
}

// activitySQL sums the activity of the relays ({activity}) over $2
// periods of $1 microseconds, the last one holding now, aligned on the
// epoch: each period's start, the events published in it, their lags from
// enqueue summed, in seconds, and the longest.
const activitySQL = `
WITH p AS (
    SELECT date_bin(s.step, statement_timestamp(), timestamptz 'epoch') - s.step * g AS at, s.step
    FROM (SELECT $1::bigint * interval '1 microsecond' AS step) s, generate_series(0, $2::int - 1) AS g)
SELECT p.at, COALESCE(sum(a.published), 0)::bigint, COALESCE(sum(a.lag_sum_seconds), 0), COALESCE(max(a.lag_max_seconds), 0)
FROM p LEFT JOIN {activity} a ON a.minute >= p.at AND a.minute < p.at + p.step
GROUP BY p.at
ORDER BY p.at`

// deadLetterGroupsSQL groups the dead letters by topic and last error,
// the largest groups first, at most $1 of them: each group's topic, error,
// size, and when its first and last events were dead-lettered.
const deadLetterGroupsSQL = `
SELECT topic, COALESCE(last_error, ''), count(*), min(dead_lettered_at), max(dead_lettered_at)
FROM {dead}
GROUP BY topic, last_error
ORDER BY count(*) DESC, topic, last_error NULLS FIRST
LIMIT $1`

// heldGroupsSQL groups the events Kafka's condition holds by topic and
// last error, the largest groups first, at most $1 of them: pending events
// that waited with an error and no attempt counted (held, or deferred
// while Kafka was unreachable) and are not due yet. A requeued event has
// its old error but is due at once, so it is not among them.
//
// It reads at most MaxHeldScan of them, the next due first (the due index
// finds them), so that a long outage's backlog does not make every look a
// scan of the whole table.
var heldGroupsSQL = `
SELECT topic, last_error, count(*), min(created_at), min(next_attempt_at)
FROM (SELECT topic, last_error, created_at, next_attempt_at FROM {waiting}
      WHERE next_attempt_at > now() AND status = 'pending' AND last_error IS NOT NULL
      ORDER BY next_attempt_at LIMIT ` + strconv.Itoa(MaxHeldScan) + `) h
GROUP BY topic, last_error
ORDER BY count(*) DESC, topic, last_error
LIMIT $1`

// auditSQL writes an entry of the audit log; auditLogSQL reads up to $2
// entries with an id below $1, newest first.
const (
	auditSQL = `INSERT INTO {audit} (actor, remote, action, target, filter, count, detail)
VALUES ($1, $2, $3, $4, $5, $6, $7)`
	auditLogSQL = `SELECT id, at, actor, remote, action, target, filter, count, detail FROM {audit}
WHERE id < $1 ORDER BY id DESC LIMIT $2`
)

// ---- retention ----

// maintainLockKey is the advisory lock that lets one transaction at a time
// change the history's partitions.
func maintainLockKey(table pgname.Table) string {
	return fmt.Sprintf("hashtext('courier maintain %s')", table)
}

// maintainBeginSQL starts maintain's transaction: it takes the lock of
// maintainLockKey, reads now ($1, see dbNow), bounds lock waits to a
// second, and says whether the legacy table ($2) exists.
func (n outboxNames) maintainBeginSQL() string {
	return "SELECT pg_try_advisory_xact_lock(" + maintainLockKey(n.table) + ", 0), " + dbNow + ", " +
		"set_config('lock_timeout', '1s', true), to_regclass($2) IS NOT NULL"
}

// strayEventsSQL says whether the default partition of the history holds
// events published from $1 to $2.
func (n outboxNames) strayEventsSQL() string {
	return "SELECT EXISTS (SELECT FROM " + n.partitionDefault + " WHERE published_at >= $1 AND published_at < $2)"
}

// createPartitionSQL makes the day partition name of the history, for the
// day from.
func (n outboxNames) createPartitionSQL(name string, from time.Time) string {
	return fmt.Sprintf("CREATE TABLE %s.%s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')", n.table.Schema, name,
		n.published, from.Format(time.RFC3339), from.AddDate(0, 0, 1).Format(time.RFC3339))
}

// countPartitionSQL counts the events of the day partition name.
func (n outboxNames) countPartitionSQL(name string) string {
	return "SELECT count(*) FROM " + n.table.Schema + "." + name
}

// countLegacySQL counts the events of the legacy table and finds its newest.
func (n outboxNames) countLegacySQL() string {
	return "SELECT count(*), max(published_at) FROM " + n.legacy
}

// dropTableSQL drops the table name of the outbox's schema: a day
// partition, or the legacy table.
func (n outboxNames) dropTableSQL(name string) string {
	return "DROP TABLE " + n.table.Schema + "." + name
}

// expireSQL deletes up to $2 rows of table whose column is before $1:
// published events of the history's default partition, idempotency keys,
// minutes of activity.
func expireSQL(table, column string) string {
	return "DELETE FROM " + table + " WHERE ctid IN (SELECT ctid FROM " +
		table + " WHERE " + column + " < $1 LIMIT $2 FOR UPDATE SKIP LOCKED)"
}

// summarizeTimeoutSQL bounds the lock waits of summarizeSQL's transaction
// well below deadlock_timeout (1s by default), after which a wait would
// cancel an autovacuum of the partition.
const summarizeTimeoutSQL = "SELECT set_config('lock_timeout', '100ms', true)"

// historyBRIN selects the BRIN indexes (i) of the partitions of the
// history ($1).
const historyBRIN = `
FROM pg_inherits h
JOIN pg_index i ON i.indrelid = h.inhrelid
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_am a ON a.oid = c.relam
WHERE h.inhparent = $1::regclass AND a.amname = 'brin'`

// summarizeSQL summarizes the block ranges not yet summarized of every
// BRIN index of the partitions of the history, the last, partly filled one
// too (brin_summarize_new_values does); unsummarizeTailSQL then drops the
// summary of that last range, so that the inserts filling it do not each
// have to widen it (an insert into an unsummarized range leaves the index
// alone).
const (
	summarizeSQL       = `SELECT count(brin_summarize_new_values(i.indexrelid))` + historyBRIN
	unsummarizeTailSQL = `SELECT count(brin_desummarize_range(i.indexrelid, pg_relation_size(i.indrelid) / current_setting('block_size')::bigint - 1))` +
		historyBRIN + ` AND pg_relation_size(i.indrelid) > 0`
)

// partitionsSQL lists the partitions of the history ($1).
const partitionsSQL = `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass`

// ---- vacuum ----

// deadSQL reads the dead and live rows PostgreSQL counts in the queue and
// in waiting.
const deadSQL = `
SELECT relid::regclass::text, n_dead_tup, n_live_tup FROM pg_stat_user_tables
WHERE relid IN ('{queue}'::regclass, '{waiting}'::regclass)`

// vacuumSQL vacuums table, unless another vacuum holds it, leaving its
// empty tail in place.
func vacuumSQL(table string) string { return "VACUUM (SKIP_LOCKED, TRUNCATE false) " + table }
