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
)

// Event statuses, as Admin reports them.
const (
	StatusPending      = "pending"
	StatusFailed       = "failed"
	StatusPublished    = "published"
	StatusDeadLettered = "dead_lettered"
)

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
	MaxAttempts   *int
	CreatedAt     time.Time
	// traceParent, when set, is published as the traceparent instead of
	// the one in Headers, and traceState as the tracestate (none when
	// empty): the relay's span of the event (see startSpans).
	traceParent, traceState string
	// scheduled says a new event's NotBefore is ahead; blocked that its
	// key has events waiting before it.
	scheduled bool
	blocked   bool
	// status, Attempts (retry_count), LastError and FirstFailedAt are a
	// waiting event's state; a new event has none.
	status        string
	Attempts      int
	LastError     *string
	FirstFailedAt *time.Time
	// heldOn is the partition a waiting event was held on (held_partition,
	// see wakeHeldSQL); NULL for one no hold keeps.
	heldOn pgtype.Int4
	// partition is where Kafka acknowledged the event, once it did, and
	// endedHold says the acknowledgement ended a hold of this relay's.
	partition int32
	endedHold bool
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
		&e.CorrelationID, &e.CausationID, &e.Payload, &e.ContentType, &headers, &e.MaxAttempts,
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
		&e.CorrelationID, &e.CausationID, &e.Payload, &e.ContentType, &headers, &e.MaxAttempts,
		&created, &e.status, &e.Attempts, &e.LastError, &firstFailed, &e.heldOn)
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
	// sleeping are the partitions whose events slept through a hold as the
	// claim began (see sleepingSQL).
	sleeping partitionSet
}

// partitionSet is a set of partitions; anyPartition stands for a whole
// topic's. One that had more than maxListedSleeping to list holds every
// partition (all).
type partitionSet struct {
	all  bool
	some map[topicPartition]bool
}

// maxListedSleeping is the most sleeping partitions a claim lists (see
// sleepingSQL); beyond them, as when a broker of many partitions is down,
// a batch wakes every partition it takes a write on, a probe of the index
// of sleepers each.
const maxListedSleeping = 256

// has reports whether the set holds partition p of topic or the whole
// topic.
func (s partitionSet) has(topic string, p int32) bool {
	return s.all || s.some[topicPartition{topic, p}] || s.some[topicPartition{topic, anyPartition}]
}

// claim begins a transaction on conn, locks what it can of shares, and reads
// up to limit waiting events that are due and up to limit new events of
// those shares. End the claim with settle or abort.
func (s *store) claim(ctx context.Context, conn *pgx.Conn, now pgtype.Timestamptz, limit int, shares []int32, txTimeout time.Duration) (*claim, error) {
	c := &claim{conn: conn}
	batch := &pgx.Batch{}
	batch.Queue("BEGIN ISOLATION LEVEL READ COMMITTED")
	batch.Queue(s.lockShares, fmt.Sprint(txTimeout.Milliseconds()), shares)
	batch.Queue(s.sleeping, maxListedSleeping+1)
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
		rows, err := results.Query()
		if err != nil {
			return err
		}
		var tp topicPartition
		if _, err := pgx.ForEachRow(rows, []any{&tp.topic, &tp.partition}, func() error {
			if c.sleeping.some == nil {
				c.sleeping.some = map[topicPartition]bool{}
			}
			c.sleeping.some[tp] = true
			c.sleeping.all = len(c.sleeping.some) > maxListedSleeping
			return nil
		}); err != nil {
			return err
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
	// heldOn is the partition whose hold the event waits through (see
	// wakeHeldSQL); NULL for none.
	heldOn pgtype.Int4
	// sleepBehind, for a waiting event a hold keeps, is how long the
	// events of its key behind it that would be due before it sleep (see
	// sleepBehindHeldSQL); 0 for none.
	sleepBehind time.Duration
}

// outcomeSet is the arrays of outcomeArrays for one statement.
type outcomeSet struct {
	seq       []int64
	status    []string
	attempted []bool
	err       []pgtype.Text
	delay     []pgtype.Float8
	heldOn    []pgtype.Int4
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
	o.heldOn = append(o.heldOn, st.heldOn)
}

// queue adds the statement sql on o to batch, unless o is empty.
func (o *outcomeSet) queue(batch *pgx.Batch, sql string, now pgtype.Timestamptz) {
	if len(o.seq) > 0 {
		batch.Queue(sql, now, o.seq, o.status, o.attempted, o.err, o.delay, o.heldOn)
	}
}

// queueOutcomes adds to batch the statements that record outcomes.
func (s *store) queueOutcomes(batch *pgx.Batch, now pgtype.Timestamptz, outcomes []settlement) {
	var pubQueue, discardQueue []pgtype.TID
	var pubWaiting, discardWaiting []int64
	var park, update, deadQ, deadW outcomeSet
	var behindHeld []int64
	var sleeps []float64
	for _, st := range outcomes {
		if st.sleepBehind > 0 {
			behindHeld = append(behindHeld, st.e.seq)
			sleeps = append(sleeps, float64(st.sleepBehind)/float64(time.Millisecond))
		}
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
		batch.Queue(s.discardQueue, now, discardQueue)
	}
	if len(discardWaiting) > 0 {
		batch.Queue(s.discardWaiting, now, discardWaiting)
	}
	park.queue(batch, s.parkQueue, now)
	update.queue(batch, s.updateWaiting, now)
	if len(behindHeld) > 0 {
		batch.Queue(s.sleepBehindHeld, now, behindHeld, sleeps)
	}
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
// returns the events so isolated. First it wakes the events that sleep
// through the holds of the partitions in answered, over now (see
// wakeHeldSQL).
func (s *store) settle(ctx context.Context, c *claim, now pgtype.Timestamptz, outcomes []settlement, answered []topicPartition) ([]isolatedRow, error) {
	batch := &pgx.Batch{}
	if len(answered) > 0 {
		topics, partitions := make([]string, len(answered)), make([]int32, len(answered))
		for i, tp := range answered {
			topics[i], partitions[i] = tp.topic, tp.partition
		}
		batch.Queue(s.wakeHeld, now, topics, partitions)
	}
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
// partition, the idempotency keys and the activity lose their expired rows
// in statements of at most batch rows, and then the history's new block
// ranges are summarized (see summarize); and the legacy table is dropped once all of it is
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
	var legacy bool
	if err := tx.QueryRow(ctx, s.names.maintainBeginSQL(), now, s.names.legacy).Scan(&ok, &today, nil, &legacy); err != nil || !ok {
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
		err := tx.QueryRow(ctx, s.names.strayEventsSQL(),
			from, from.AddDate(0, 0, 1)).Scan(&stray)
		if err != nil {
			return c, true, s.maintainErr(err)
		}
		if stray {
			continue
		}
		if _, err := tx.Exec(ctx, s.names.createPartitionSQL(name, from)); err != nil {
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
			if err := tx.QueryRow(ctx, s.names.countPartitionSQL(name)).Scan(&n); err != nil {
				return c, true, s.maintainErr(err)
			}
			c.Events += n
		}
		if legacy {
			var n int64
			var newest *time.Time
			err := tx.QueryRow(ctx, s.names.countLegacySQL()).Scan(&n, &newest)
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
		if _, err := tx.Exec(ctx, s.names.dropTableSQL(name)); err != nil {
			return Cleanup{}, true, s.maintainErr(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Cleanup{}, true, s.maintainErr(err)
	}
	c.Partitions = drop[:len(drop)-boolInt(c.Legacy)]
	if retention <= 0 {
		return c, true, s.summarize(ctx, db)
	}
	cutoff := pgtype.Timestamptz{Time: today.Add(-retention), Valid: true}
	deleted, err := s.deleteExpired(ctx, db, expireSQL(s.names.partitionDefault, "published_at"), cutoff, batch)
	c.Events += deleted
	if err != nil {
		return c, true, err
	}
	if c.Keys, err = s.deleteExpired(ctx, db, expireSQL(s.names.keys, "created_at"), cutoff, batch); err != nil {
		return c, true, err
	}
	if _, err = s.deleteExpired(ctx, db, expireSQL(s.names.activity, "minute"), cutoff, batch); err != nil {
		return c, true, err
	}
	return c, true, s.summarize(ctx, db)
}

// summarize summarizes the full block ranges of the history's BRIN
// indexes that no vacuum has yet. Until a range is summarized, every
// lookup through the index reads it whole, and autovacuum comes to a
// partition only once a fifth of its rows are new: the console's lookups
// by time, key or id (migration 6) would read that fifth every time. The
// last range, still filling, is left unsummarized (see summarizeSQL), so
// the relay's inserts do not pay for widening its summary; a full range is
// summarized once, by whichever of this or a vacuum comes first. It gives
// up at once when a vacuum holds a partition (and summarizes it).
func (s *store) summarize(ctx context.Context, db beginner) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return s.maintainErr(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, summarizeTimeoutSQL); err != nil {
		return s.maintainErr(err)
	}
	for _, sql := range []string{summarizeSQL, unsummarizeTailSQL} {
		if _, err := tx.Exec(ctx, sql, s.names.published); err != nil {
			if pgErr, ok := pgError(err); ok && pgErr.Code == "55P03" { // lock_not_available
				return nil
			}
			return s.maintainErr(err)
		}
	}
	return s.maintainErr(tx.Commit(ctx))
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
	rows, err := db.Query(ctx, partitionsSQL, s.names.published)
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
		if _, err := db.Exec(ctx, vacuumSQL(table)); err != nil {
			return due[:i], s.maintainErr(err)
		}
	}
	return due, nil
}
