// Package producer is the producer half of courier: a transactional outbox in
// PostgreSQL. The application enqueues events in the same transaction as its
// business rows; committing the transaction makes them visible to the relay,
// rolling it back removes them. An event is therefore published if and only
// if the transaction that enqueued it commits.
//
// The guides tell how to use it: [The outbox], [The relay] and [Inspect and repair the outbox].
//
// [The outbox]: https://github.com/courierkit/courier/blob/main/docs/outbox.md
// [The relay]: https://github.com/courierkit/courier/blob/main/docs/relay.md
// [Inspect and repair the outbox]: https://github.com/courierkit/courier/blob/main/docs/outbox-operations.md
package producer

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/courierkit/courier/internal/pgname"
)

// DefaultMaxPayloadBytes is Kafka's default message size limit, 1 MiB.
const DefaultMaxPayloadBytes = 1 << 20

// Config configures an Outbox. The zero value is valid.
type Config struct {
	// Schema holds the outbox table. Defaults to "public".
	Schema string
	// Table is the outbox table, as created by the migrations package.
	// Defaults to "courier_outbox".
	Table string
	// MaxPayloadBytes refuses, at enqueue, before they can fail at the
	// relay or the broker, larger payloads (ErrPayloadTooLarge) and events
	// whose whole Kafka record is larger (ErrRecordTooLarge): the key, the
	// payload, the event's headers and trace context, the headers the relay
	// adds in binary mode (ce_id, ce_type, ce_time, content-type, …, with a
	// ce_source counted at MaxSourceBytes) and Kafka's framing of a record
	// batch holding it alone, as the relay counts them against Sarama's
	// Producer.MaxMessageBytes. So with the default of 1 MiB, every event
	// Enqueue accepts fits the relay's default Producer.MaxMessageBytes and
	// Kafka's default message.max.bytes (both 1048588 bytes); the largest
	// payload it accepts is a few hundred bytes short of 1 MiB (MaxPayload
	// gives it for an event). Set it to the smallest of the relay's
	// Producer.MaxMessageBytes, the broker's message.max.bytes and the
	// topic's max.message.bytes when those were raised. In structured mode
	// (RelayConfig.Structured) the record is a JSON document, larger still
	// (a payload that is not JSON is written in base64, a third larger):
	// leave room for it. Defaults to 1 MiB (DefaultMaxPayloadBytes).
	MaxPayloadBytes int
}

// ErrInvalidConfig is matched by every error of a bad configuration: those
// NewOutbox, NewRelay and NewAdmin return (and LookupOutbox for a bad
// name). Each names the field and what to set it to.
var ErrInvalidConfig = errors.New("producer: invalid config")

// WithDefaults returns c with every zero field set to its default: Schema
// "public", Table "courier_outbox", MaxPayloadBytes DefaultMaxPayloadBytes.
func (c Config) WithDefaults() Config {
	c.Schema, c.Table = defaultNames(c.Schema, c.Table)
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	return c
}

// MaxPayload returns the largest payload Enqueue accepts under c (its
// defaults applied) in an event like e: e's key, type, content type,
// attributes and headers as they are, and room for the headers the relay
// adds and a traceparent (see MaxPayloadBytes); a tracestate of the span
// Enqueue runs in takes room too. The result is negative when e is too
// large even without a payload; it ignores e's own payload and checks
// nothing else, so Enqueue may still refuse e for another reason.
func (c Config) MaxPayload(e Event) int {
	e.Payload = nil
	e.ContentType = cmp.Or(e.ContentType, DefaultContentType)
	return c.WithDefaults().MaxPayloadBytes - recordBytes(&e)
}

// defaultNames are schema and table, each defaulted: "public" and
// "courier_outbox".
func defaultNames(schema, table string) (string, string) {
	return cmp.Or(schema, pgname.DefaultSchema), cmp.Or(table, pgname.DefaultTable)
}

// validate refuses what c, its defaults applied, cannot run with.
func (c Config) validate() (pgname.Table, error) {
	table, err := pgname.NewTable(c.Schema, c.Table)
	if err != nil {
		return table, err
	}
	if c.MaxPayloadBytes < 0 {
		return table, fmt.Errorf("MaxPayloadBytes is %d; use a positive size, or 0 for the default of %d", c.MaxPayloadBytes, DefaultMaxPayloadBytes)
	}
	return table, nil
}

// DBTX is what Enqueue needs from PostgreSQL: a pgx.Tx, *pgx.Conn,
// *pgxpool.Pool and *pgxpool.Conn all satisfy it, and so does the DBTX
// interface that sqlc generates.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Enqueued reports what Enqueue did with one event.
type Enqueued struct {
	// ID is the id of the event in the outbox: the new event's, or, for a
	// duplicate, the id of the event enqueued first with the same topic and
	// idempotency key.
	ID uuid.UUID
	// Duplicate is true when an event with the same topic and idempotency
	// key was already in the outbox, so nothing was written.
	Duplicate bool
}

// Outbox writes events into the outbox table.
type Outbox struct {
	table      pgname.Table
	maxPayload int
	store      *store
}

// NewOutbox applies cfg's defaults, validates it and returns an Outbox. Its
// errors match ErrInvalidConfig.
func NewOutbox(cfg Config) (*Outbox, error) {
	cfg = cfg.WithDefaults()
	table, err := cfg.validate()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return &Outbox{table: table, maxPayload: cfg.MaxPayloadBytes, store: newStore(table, false, false)}, nil
}

// Enqueue writes one event to the outbox through db, normally the caller's
// transaction: commit publishes, rollback removes. Through a pool or a
// connection outside a transaction the event commits at once.
//
// When ctx carries an OpenTelemetry span, its W3C trace context is stored
// with the event and published as the traceparent (and tracestate) header,
// unless Headers already has a traceparent.
//
// An invalid event returns an *EventError and writes nothing; every field
// is checked in Go before any SQL is sent, so the caller's transaction
// stays usable. An event whose Topic and IdempotencyKey were enqueued
// before writes nothing and reports the earlier event's ID, also when the
// earlier one is enqueued by a concurrent transaction (Enqueue then waits
// for that transaction to end).
//
// An ID of the caller's own is remembered (in the keys table, for as long
// as idempotency keys are, see RelayConfig.Retention) and an event with an
// ID remembered already is refused with an *EventError for ErrDuplicateID,
// Field "ID", which leaves the caller's transaction usable: nothing is
// written. Use it to make a retried enqueue safe, or use IdempotencyKey,
// which reports the earlier event instead. An ID left zero is assigned
// (UUIDv7) and costs no look-up: only IDs of the caller's own are checked,
// against one another.
func (o *Outbox) Enqueue(ctx context.Context, db DBTX, e Event) (Enqueued, error) {
	res, err := o.EnqueueBatch(ctx, db, []Event{e})
	if err != nil {
		return Enqueued{}, err
	}
	return res[0], nil
}

// EnqueueBatch writes many events in one statement (two when some are
// duplicates), in slice order, with the semantics of Enqueue: a COPY for a
// batch of 32 events or more without idempotency keys, through a handle
// that can copy (pgx.Tx, *pgx.Conn, *pgxpool.Pool, *pgxpool.Conn), after
// a statement that claims their IDs if some are the caller's own; an
// INSERT of arrays, in one round trip, otherwise. The result has one entry per event. If any event is invalid,
// nothing is written and the *EventError's Index names it; so too when two
// events share an ID, or when an ID was enqueued before (ErrDuplicateID).
// Two events of one batch that share a topic and idempotency key are
// written once; the second reports the first's ID. An empty batch sends
// nothing and returns an empty result.
func (o *Outbox) EnqueueBatch(ctx context.Context, db DBTX, events []Event) ([]Enqueued, error) {
	if db == nil {
		return nil, errors.New("producer: Enqueue needs a database handle (a pgx.Tx, *pgx.Conn or *pgxpool.Pool); got nil")
	}
	if len(events) == 0 {
		return nil, nil
	}
	cols, err := o.columns(ctx, events)
	if err != nil {
		return nil, err
	}
	res := make([]Enqueued, len(events))
	for i, id := range cols.id {
		res[i] = Enqueued{ID: id.Bytes}
	}
	cp, canCopy := db.(copier)
	switch {
	case !cols.claims() && len(events) == 1:
		_, err = db.Exec(ctx, o.store.insertOne, cols.row(0)...)
		return res, o.insertErr(err)
	case !cols.claims() && canCopy && len(events) >= copyMin:
		rows := newCopyRows(cols)
		_, err = cp.CopyFrom(ctx, pgx.Identifier{o.table.Schema, o.table.Name}, rows.names, rows)
		return res, o.insertErr(err)
	case !cols.claims():
		_, err = db.Exec(ctx, o.store.insertMany, cols.args()...)
		return res, o.insertErr(err)
	case !cols.keyed && canCopy && len(events) >= copyMin:
		// Ids of the caller's own but no keys: claim the ids, then COPY,
		// which costs the server less than the INSERT that claims as it
		// goes, for a round trip more.
		if err := o.claimIDs(ctx, db, cols); err != nil {
			return nil, err
		}
		rows := newCopyRows(cols)
		_, err = cp.CopyFrom(ctx, pgx.Identifier{o.table.Schema, o.table.Name}, rows.names, rows)
		return res, o.insertErr(err)
	}
	return o.insertClaimed(ctx, db, cols, res)
}

// claimIDs claims the ids of the caller's own of a batch without
// idempotency keys (claimIDsSQL); when one was taken, it releases the
// others and returns the *EventError for ErrDuplicateID.
func (o *Outbox) claimIDs(ctx context.Context, db DBTX, cols *columns) error {
	rows, err := db.Query(ctx, o.store.claimIDs, cols.ownIDs)
	if err != nil {
		return o.insertErr(err)
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return o.insertErr(err)
	}
	if len(claimed) == len(cols.ownIDs) {
		return nil
	}
	idClaims := make(map[uuid.UUID]bool, len(claimed))
	for _, id := range claimed {
		idClaims[id] = true
	}
	return o.refuseTakenID(ctx, db, cols, cols.takenID(nil, idClaims), nil, idClaims)
}

// insertClaimed writes a batch that claims idempotency keys or ids of the
// caller's own in the keys table, in one statement (insertKeyedSQL). An
// id claimed before makes it write no event: it then deletes the claims
// it made, in a second statement, so that the caller's transaction goes
// on as if nothing had been tried, and returns an *EventError for
// ErrDuplicateID. (Through a handle outside a transaction, the claims are
// visible to others between the two statements.) Events whose idempotency
// keys were taken are looked up (resolveDuplicates).
func (o *Outbox) insertClaimed(ctx context.Context, db DBTX, cols *columns, res []Enqueued) ([]Enqueued, error) {
	rows, err := db.Query(ctx, o.store.insertKeyed, append(cols.args(), cols.ownIDs)...)
	if err != nil {
		return nil, o.insertErr(err)
	}
	type claimRow struct {
		Kind string
		ID   uuid.UUID
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[claimRow])
	if err != nil {
		return nil, o.insertErr(err)
	}
	written := make(map[uuid.UUID]bool, len(out))
	keyClaims, idClaims := map[uuid.UUID]bool{}, map[uuid.UUID]bool{}
	for _, r := range out {
		switch r.Kind {
		case "queue":
			written[r.ID] = true
		case "key":
			keyClaims[r.ID] = true
		default:
			idClaims[r.ID] = true
		}
	}
	if i := cols.takenID(keyClaims, idClaims); i >= 0 {
		return nil, o.refuseTakenID(ctx, db, cols, i, keyClaims, idClaims)
	}
	var dupes []int
	for i, id := range cols.id {
		if !written[id.Bytes] {
			dupes = append(dupes, i)
		}
	}
	if len(dupes) > 0 {
		if err := o.resolveDuplicates(ctx, db, cols, dupes, res); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// takenID is the index of the first event whose id of the caller's own
// is taken: an event with such an id whose key, if it has one, is in
// keyClaims (its id was to be claimed), and whose id is not in idClaims.
// It is -1 when there is none.
func (c *columns) takenID(keyClaims, idClaims map[uuid.UUID]bool) int {
	for i, id := range c.id {
		if j, own := c.ownAt[id.Bytes]; own && j == i && (c.idempotencyKey[i] == "" || keyClaims[id.Bytes]) && !idClaims[id.Bytes] {
			return i
		}
	}
	return -1
}

// refuseTakenID releases the claims a batch made (unclaim) and returns the
// *EventError for event i, whose id of the caller's own was taken.
func (o *Outbox) refuseTakenID(ctx context.Context, db DBTX, cols *columns, i int, keyClaims, idClaims map[uuid.UUID]bool) error {
	if err := o.unclaim(ctx, db, cols, keyClaims, idClaims); err != nil {
		return err
	}
	if i < 0 { // a claim was refused, yet every id to claim is claimed
		return fmt.Errorf("producer: enqueue into %s: an id of the batch was taken, and none is missing from the claims", o.table)
	}
	return &EventError{Index: i, Field: "ID", Err: fmt.Errorf(
		"%w: an event with id %s was enqueued before (or is being enqueued by a transaction still open); nothing of the batch was written. "+
			"If this enqueue retries that one, it is done; otherwise give the event a new id, or leave ID zero", ErrDuplicateID, uuid.UUID(cols.id[i].Bytes))}
}

// unclaim deletes the keys and ids a refused batch claimed: rows this
// transaction wrote a moment ago.
func (o *Outbox) unclaim(ctx context.Context, db DBTX, cols *columns, keyClaims, idClaims map[uuid.UUID]bool) error {
	var topics, keys []string
	var ids []pgtype.UUID
	for i, id := range cols.id {
		if keyClaims[id.Bytes] {
			topics, keys, ids = append(topics, cols.topic[i]), append(keys, cols.idempotencyKey[i]), append(ids, id)
		}
		if idClaims[id.Bytes] {
			topics, keys, ids = append(topics, ""), append(keys, uuid.UUID(id.Bytes).String()), append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := db.Exec(ctx, o.store.unclaim, topics, keys, ids); err != nil {
		return fmt.Errorf("producer: release the claims of a refused batch in %s: %w", o.table, err)
	}
	return nil
}

// insertErr wraps an insert failure; a missing table gets the fix.
func (o *Outbox) insertErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("producer: enqueue into %s: %w", o.table, o.store.undefinedObject(err))
}

// resolveDuplicates fills res for the events that ON CONFLICT skipped with
// the ids of the events that hold their idempotency keys.
func (o *Outbox) resolveDuplicates(ctx context.Context, db DBTX, cols *columns, dupes []int, res []Enqueued) error {
	type topicKey struct{ topic, key string }
	topics := make([]string, len(dupes))
	keys := make([]string, len(dupes))
	for j, i := range dupes {
		topics[j], keys[j] = cols.topic[i], cols.idempotencyKey[i]
	}
	rows, err := db.Query(ctx, o.store.lookupKeys, topics, keys)
	if err != nil {
		return fmt.Errorf("producer: look up idempotency keys in %s: %w", o.table, err)
	}
	holders := map[topicKey]uuid.UUID{}
	var k topicKey
	var id uuid.UUID
	if _, err := pgx.ForEachRow(rows, []any{&k.topic, &k.key, &id}, func() error {
		holders[k] = id
		return nil
	}); err != nil {
		return fmt.Errorf("producer: look up idempotency keys in %s: %w", o.table, err)
	}
	for _, i := range dupes {
		holder, ok := holders[topicKey{cols.topic[i], cols.idempotencyKey[i]}]
		if !ok {
			// ON CONFLICT skipped the event, yet the row holding its key is
			// not visible: it was deleted in between, e.g. by retention.
			return fmt.Errorf("producer: event %d (topic %q, idempotency key %q) conflicted with an event that is gone; enqueue it again",
				i, cols.topic[i], cols.idempotencyKey[i])
		}
		res[i] = Enqueued{ID: holder, Duplicate: true}
	}
	return nil
}

// columns holds a batch column by column, as the insert's arrays. Ids are
// pgtype.UUIDs: pgx encodes an array of them natively, and an array of
// uuid.UUIDs about thirty times slower (as text, through driver.Valuer).
type columns struct {
	id                                         []pgtype.UUID
	topic, partitionKey, eventType             []string
	aggregateType, aggregateID, tenantID       []string
	correlationID, causationID, idempotencyKey []string
	payload                                    [][]byte
	contentType                                []string
	headers                                    [][]byte // JSON, nil for none
	maxAttempts                                []int32
	notBefore                                  []pgtype.Timestamptz
	keyed                                      bool // some event has an idempotency key
	// ownIDs are the ids the caller chose (Enqueue assigned the others),
	// and ownAt their events' indexes.
	ownIDs []pgtype.UUID
	ownAt  map[uuid.UUID]int
}

// claims reports whether the batch claims rows in the keys table: for
// idempotency keys, or for ids of the caller's own.
func (c *columns) claims() bool { return c.keyed || len(c.ownIDs) > 0 }

func (o *Outbox) columns(ctx context.Context, events []Event) (*columns, error) {
	n := len(events)
	c := &columns{
		id: make([]pgtype.UUID, n), topic: make([]string, n), partitionKey: make([]string, n),
		eventType: make([]string, n), aggregateType: make([]string, n), aggregateID: make([]string, n),
		tenantID: make([]string, n), correlationID: make([]string, n), causationID: make([]string, n),
		idempotencyKey: make([]string, n), payload: make([][]byte, n), contentType: make([]string, n),
		headers: make([][]byte, n), maxAttempts: make([]int32, n), notBefore: make([]pgtype.Timestamptz, n),
	}
	trace := traceHeaders(ctx)
	// The batch's ids come from one read of the system's randomness, not
	// one each.
	var random io.Reader = rand.Reader
	if n > 1 {
		random = bufio.NewReaderSize(rand.Reader, 16*n)
	}
	for i, raw := range events {
		if raw.ID == uuid.Nil {
			id, err := uuid.NewV7FromReader(random)
			if err != nil {
				return nil, fmt.Errorf("producer: assign event %d an id: %w", i, err)
			}
			raw.ID = id
		} else {
			if c.ownAt == nil {
				c.ownAt = map[uuid.UUID]int{}
			}
			if first, seen := c.ownAt[raw.ID]; seen {
				return nil, &EventError{Index: i, Field: "ID", Err: fmt.Errorf("%w: %s is event %d's id too; give each event its own id, or leave ID zero", ErrDuplicateID, raw.ID, first)}
			}
			c.ownAt[raw.ID] = i
			c.ownIDs = append(c.ownIDs, pgtype.UUID{Bytes: raw.ID, Valid: true})
		}
		e, err := normalize(raw, o.maxPayload, trace)
		if err != nil {
			if evErr, ok := errors.AsType[*EventError](err); ok {
				evErr.Index = i
			}
			return nil, err
		}
		var headers []byte
		if len(e.Headers) > 0 {
			if headers, err = json.Marshal(e.Headers); err != nil {
				return nil, fmt.Errorf("producer: event %d: encode headers: %w", i, err)
			}
		}
		payload := e.Payload
		if payload == nil {
			payload = []byte{} // the column is NOT NULL; no payload is an empty one
		}
		c.id[i] = pgtype.UUID{Bytes: e.ID, Valid: true}
		c.topic[i], c.partitionKey[i], c.eventType[i] = e.Topic, e.Key, e.Type
		c.aggregateType[i], c.aggregateID[i], c.tenantID[i] = e.AggregateType, e.AggregateID, e.TenantID
		c.correlationID[i], c.causationID[i], c.idempotencyKey[i] = e.CorrelationID, e.CausationID, e.IdempotencyKey
		c.payload[i], c.contentType[i], c.headers[i] = payload, e.ContentType, headers
		c.keyed = c.keyed || e.IdempotencyKey != ""
		c.maxAttempts[i] = int32(e.MaxAttempts) // normalize bounds it
		c.notBefore[i] = pgtype.Timestamptz{Time: e.NotBefore, Valid: !e.NotBefore.IsZero()}
	}
	return c, nil
}

// copier is what a COPY needs from the database handle: pgx.Tx, *pgx.Conn,
// *pgxpool.Pool and *pgxpool.Conn have it.
type copier interface {
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, rows pgx.CopyFromSource) (int64, error)
}

// copyMin is the smallest batch EnqueueBatch writes with COPY rather than
// one INSERT, when no event carries an idempotency key and the handle can
// copy: COPY writes rows in bulk, several times cheaper per row for the
// server, for a round trip or two more.
const copyMin = 32

// copyRows is a batch as a pgx.CopyFromSource, row by row in slice order,
// of the columns some event of the batch sets: a column left out costs the
// COPY nothing, where a column of NULLs costs it about as much as one of
// values.
type copyRows struct {
	cols  *columns
	names []string
	keep  []int // indexes into copyColumns and row
	next  int
	row   []any
}

func newCopyRows(cols *columns) *copyRows {
	r := &copyRows{cols: cols, next: -1}
	for col, name := range copyColumns {
		if cols.anySet(col) {
			r.names, r.keep = append(r.names, name), append(r.keep, col)
		}
	}
	r.row = make([]any, len(r.keep))
	return r
}

func (r *copyRows) Next() bool { r.next++; return r.next < len(r.cols.id) }
func (r *copyRows) Err() error { return nil }

// Values is the row's values, empty texts and a zero MaxAttempts as NULL
// as the INSERT statements store them.
func (r *copyRows) Values() ([]any, error) {
	for i, col := range r.keep {
		r.row[i] = r.cols.value(col, r.next, true)
	}
	return r.row, nil
}

// row is event i's values, in the order of the columns' arrays.
func (c *columns) row(i int) []any {
	row := make([]any, len(copyColumns))
	for col := range row {
		row[col] = c.value(col, i, false)
	}
	return row
}

// value is column col (in copyColumns' order) of event i, as the INSERT
// statements take it (their SQL turns an empty text and a zero max_retries
// into NULL), or, for a COPY, with nil for each of those.
func (c *columns) value(col, i int, forCopy bool) any {
	text := func(s string) any {
		if s == "" && forCopy {
			return nil
		}
		return s
	}
	switch copyColumns[col] {
	case "id":
		return c.id[i]
	case "topic":
		return c.topic[i]
	case "partition_key":
		return text(c.partitionKey[i])
	case "event_type":
		return c.eventType[i]
	case "aggregate_type":
		return text(c.aggregateType[i])
	case "aggregate_id":
		return text(c.aggregateID[i])
	case "tenant_id":
		return text(c.tenantID[i])
	case "correlation_id":
		return text(c.correlationID[i])
	case "causation_id":
		return text(c.causationID[i])
	case "idempotency_key":
		return text(c.idempotencyKey[i])
	case "payload":
		return c.payload[i]
	case "content_type":
		return c.contentType[i]
	case "headers":
		if c.headers[i] == nil {
			return nil
		}
		return string(c.headers[i]) // a jsonb parameter, as text
	case "max_retries":
		if c.maxAttempts[i] == 0 && forCopy {
			return nil
		}
		return c.maxAttempts[i]
	default: // not_before
		if !c.notBefore[i].Valid && forCopy {
			return nil
		}
		return c.notBefore[i]
	}
}

// anySet reports whether some event of the batch sets column col.
func (c *columns) anySet(col int) bool {
	for i := range c.id {
		if c.value(col, i, true) != nil {
			return true
		}
	}
	return false
}

func (c *columns) args() []any {
	return []any{
		c.id, c.topic, c.partitionKey, c.eventType, c.aggregateType, c.aggregateID, c.tenantID,
		c.correlationID, c.causationID, c.idempotencyKey, c.payload, c.contentType, c.headers,
		c.maxAttempts, c.notBefore,
	}
}
