package producer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/migrations"
	"github.com/courierkit/courier/producer"
)

// v1Event is a row of an outbox of version 1 (migrations 1 to 3): one table
// holding every event with its status.
type v1Event struct {
	id                   uuid.UUID
	key                  string
	status               string
	retries              int
	lastError            string
	notBefore, published time.Duration // from now; 0: none
	idempotencyKey       string
}

// migrateToV1 applies the outbox migrations 1 to 3 as an older courier did,
// recording them as applied, so that Up applies only what came after.
func migrateToV1(t *testing.T, pg *testkit.PG) {
	t.Helper()
	ctx := context.Background()
	for _, m := range migrations.All()[:3] {
		if _, err := pg.Pool.Exec(ctx, m.Up); err != nil {
			t.Fatalf("version %d: %v", m.Version, err)
		}
	}
	if _, err := pg.Pool.Exec(ctx, `CREATE TABLE courier_outbox_migrations (version integer PRIMARY KEY, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()); INSERT INTO courier_outbox_migrations (version, name)
		VALUES (1, 'create_outbox'), (2, 'notify_trigger'), (3, 'drop_key_order')`); err != nil {
		t.Fatal(err)
	}
}

// insertV1 writes events into a version 1 table as its relay left them,
// in slice order (their seq).
func insertV1(t *testing.T, pg *testkit.PG, topic string, events []v1Event) {
	t.Helper()
	for i, e := range events {
		_, err := pg.Pool.Exec(context.Background(), `
			INSERT INTO courier_outbox (id, topic, partition_key, event_type, payload, content_type, headers, status,
				retry_count, last_error, last_attempt_at, first_failed_at, next_attempt_at, published_at, idempotency_key)
			VALUES ($1, $2, $3, 'Counted', $4, 'application/json', '{"x-origin":"v1"}', $5, $6, NULLIF($7, ''),
				CASE WHEN $6 > 0 THEN now() END, CASE WHEN $6 > 0 THEN now() END,
				now() + $8::interval, CASE WHEN $5 = 'published' THEN now() + $9::interval END, NULLIF($10, ''))`,
			e.id, topic, e.key, fmt.Appendf(nil, `{"key":%q,"n":%d}`, e.key, i), e.status, e.retries, e.lastError,
			e.notBefore, e.published, e.idempotencyKey)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
}

// TestUpgradeMovesALiveTableWithoutLosingOrReordering fills an outbox of
// version 1 with events in every status and state (published long ago and
// today, failed and due, pending behind a failed one, scheduled for later,
// dead-lettered, with idempotency keys, and a backlog of 600 over 30 keys),
// upgrades it, and checks that every event kept its status, attempts, error
// and bytes; that the relay then publishes what was due in each key's order
// and holds what was not; that idempotency keys still hold; that new events
// follow the old ones; and that retention drops the old table only once all
// of it is past retention.
func TestUpgradeMovesALiveTableWithoutLosingOrReordering(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	ctx := context.Background()
	migrateToV1(t, pg)
	const topic = "counters"
	newID := func() uuid.UUID { return uuid.Must(uuid.NewV7()) }
	day := 24 * time.Hour
	events := []v1Event{
		{id: newID(), key: "a", status: "published", published: -10 * day, idempotencyKey: "k-old"},
		{id: newID(), key: "a", status: "published", published: -time.Minute},
		{id: newID(), key: "a", status: "failed", retries: 2, lastError: "not enough replicas"},
		{id: newID(), key: "a", status: "pending"},
		{id: newID(), key: "b", status: "dead_lettered", retries: 6, lastError: "too large"},
		{id: newID(), key: "b", status: "pending", idempotencyKey: "k-pending"},
		{id: newID(), key: "c", status: "pending", notBefore: time.Hour},
		{id: newID(), key: "c", status: "pending"},
		{id: newID(), key: "a", status: "pending"},
	}
	for i := range 600 {
		events = append(events, v1Event{id: newID(), key: fmt.Sprintf("k%02d", i%30), status: "pending"})
	}
	insertV1(t, pg, topic, events)
	var before []producer.Record
	admin := newAdmin(t, pg)

	m, err := migrations.New(migrations.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	// Read every event as version 1 had it, then upgrade.
	for _, e := range events {
		var r producer.Record
		err := pg.Pool.QueryRow(ctx, "SELECT id, seq, status, retry_count, last_error, payload, headers FROM courier_outbox WHERE id = $1", e.id).
			Scan(&r.ID, &r.Seq, &r.Status, &r.Attempts, &r.LastError, &r.Payload, &r.Headers)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, r)
	}
	applied, err := m.Up(ctx, pg.Pool)
	wantApplied(t, applied, err, 4)
	pg.Migrate(t) // nothing left to apply; adds the test's view

	for i, b := range before {
		got, err := admin.Get(ctx, b.ID)
		if err != nil {
			t.Fatalf("event %d (%s) after the upgrade: %v", i, b.Status, err)
		}
		if got.Seq != b.Seq || got.Status != b.Status || got.Attempts != b.Attempts || !equalText(got.LastError, b.LastError) ||
			string(got.Payload) != string(b.Payload) || got.Headers["x-origin"] != "v1" {
			t.Errorf("event %d after the upgrade: %+v; before: %+v", i, got, b)
		}
	}
	stats, err := admin.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int64{"published": 2, "failed": 1, "dead_lettered": 1, "pending": int64(len(events)) - 4}; !maps.Equal(stats.Counts, want) {
		t.Fatalf("counts after the upgrade %v, want %v", stats.Counts, want)
	}

	// Idempotency keys of old events still hold.
	out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []struct {
		key string
		id  uuid.UUID
	}{{"k-old", events[0].id}, {"k-pending", events[5].id}} {
		res, err := out.Enqueue(ctx, pg.Pool, producer.Event{Topic: topic, Type: "Counted", Payload: []byte(`{}`), IdempotencyKey: k.key})
		if err != nil || !res.Duplicate || res.ID != k.id {
			t.Errorf("enqueue with idempotency key %s after the upgrade: %+v, %v; want a duplicate of %s", k.key, res, err, k.id)
		}
	}
	// A new event follows the old ones.
	late, err := out.Enqueue(ctx, pg.Pool, producer.Event{Topic: topic, Key: "a", Type: "Counted", Payload: []byte(`{"late":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := admin.Get(ctx, late.ID); err != nil || rec.Seq <= before[len(before)-1].Seq {
		t.Fatalf("a new event got seq %d (%v), want more than the old table's last, %d", rec.Seq, err, before[len(before)-1].Seq)
	}

	// The relay publishes everything due, each key in order, and holds key
	// c behind its event scheduled for later.
	pub := &fakePublisher{}
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub})
	for {
		res := runOnce(t, relay)
		if res.Claimed == 0 {
			break
		}
	}
	wantOrder := map[string][]uuid.UUID{}
	for _, e := range events {
		if e.status == "pending" && e.key != "c" || e.status == "failed" {
			wantOrder[e.key] = append(wantOrder[e.key], e.id)
		}
	}
	wantOrder["a"] = append(wantOrder["a"], late.ID)
	gotOrder := map[string][]uuid.UUID{}
	for _, r := range pub.ackedOn(topic) {
		gotOrder[string(r.Key)] = append(gotOrder[string(r.Key)], uuid.MustParse(recordHeader(r, producer.HeaderID)))
	}
	for key, want := range wantOrder {
		if !slices.Equal(gotOrder[key], want) {
			t.Errorf("key %s published %v, want %v", key, gotOrder[key], want)
		}
	}
	if len(gotOrder["c"]) != 0 {
		t.Errorf("key c published %v before its first event's NotBefore", gotOrder["c"])
	}
	for _, id := range []uuid.UUID{events[6].id, events[7].id} {
		if rec, err := admin.Get(ctx, id); err != nil || rec.Status != "pending" {
			t.Errorf("key c's event %s: %+v, %v; want still pending", id, rec, err)
		}
	}

	// Retention: the old table holds an event published a minute ago, so
	// it stays; once all of it is past retention it is dropped whole.
	if n, err := admin.Cleanup(ctx, 7*day); err != nil || n != 0 {
		t.Fatalf("Cleanup(7 days) = %d, %v; want nothing removed while the old table holds recent events", n, err)
	}
	if _, err := admin.Get(ctx, events[0].id); err != nil {
		t.Fatalf("the event published 10 days ago went with the recent one's table: %v", err)
	}
	if _, err := pg.Pool.Exec(ctx, "UPDATE courier_outbox_legacy SET published_at = published_at - interval '30 days'"); err != nil {
		t.Fatal(err)
	}
	if n, err := admin.Cleanup(ctx, 7*day); err != nil || n != 2 {
		t.Fatalf("Cleanup(7 days) = %d, %v; want the old table's 2 events", n, err)
	}
	var legacy bool
	if err := pg.Pool.QueryRow(ctx, "SELECT to_regclass('courier_outbox_legacy') IS NOT NULL").Scan(&legacy); err != nil || legacy {
		t.Fatalf("the old table is still there (%v)", err)
	}
	if _, err := admin.Get(ctx, events[0].id); !errors.Is(err, producer.ErrNotFound) {
		t.Fatalf("Get of an event of the dropped table = %v, want ErrNotFound", err)
	}
}

// TestDowngradeKeepsEveryEvent: Down of version 4 puts every event, of every
// table, back into one table of version 1 with its status and seq, and Up
// again moves them out.
func TestDowngradeKeepsEveryEvent(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t)
	ctx := context.Background()
	before, err := f.admin.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m, err := migrations.New(migrations.Config{Schema: f.pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.pg.Pool.Exec(ctx, "DROP VIEW courier_events"); err != nil {
		t.Fatal(err)
	}
	downTo(t, m, f.pg, 3)
	rows, err := f.pg.Pool.Query(ctx, "SELECT status, count(*) FROM courier_outbox GROUP BY status")
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{"pending": 0, "failed": 0, "published": 0, "dead_lettered": 0}
	var status string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&status, &n}, func() error { counts[status] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(counts, before.Counts) {
		t.Fatalf("version 1 table after Down holds %v, want %v", counts, before.Counts)
	}
	if _, err := m.Up(ctx, f.pg.Pool); err != nil {
		t.Fatal(err)
	}
	after, err := f.admin.Stats(ctx)
	if err != nil || !maps.Equal(after.Counts, before.Counts) {
		t.Fatalf("after Down and Up again: %v, %v; want %v", after.Counts, err, before.Counts)
	}
	rec, err := f.admin.Get(ctx, f.dead)
	if err != nil || rec.Status != "dead_lettered" || rec.Attempts != 1 {
		t.Fatalf("the dead letter after Down and Up: %+v, %v", rec, err)
	}
}

// wantApplied checks that Up applied every migration from version from on,
// and nothing else.
func wantApplied(t *testing.T, applied []migrations.Migration, err error, from int) {
	t.Helper()
	var got, want []int
	for _, m := range applied {
		got = append(got, m.Version)
	}
	for v := from; v <= len(migrations.All()); v++ {
		want = append(want, v)
	}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("Up applied versions %v, %v; want %v", got, err, want)
	}
}

func equalText(a, b *string) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// TestUpgradeToKeyHashIndexesOnALiveOutbox upgrades an outbox of version 4
// whose waiting and dead tables hold events (a key retrying, with an event
// behind it; a key whose retry is an hour away; a dead letter) to version 5,
// which indexes them by a hash of topic and key, and checks that nothing
// moved: the relay then publishes the due key's events in order, holds the
// key that waits, lets the dead letter's key move on, finds the events by
// topic and key through Admin, and dead-letters a row whose key is too long
// to index, which version 4 could not hold.
func TestUpgradeToKeyHashIndexesOnALiveOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := testkit.Postgres(t)
	m := migrateOutbox(t, pg)
	downTo(t, m, pg, 4)
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 1)
	// As a relay of version 4 left them, in seq order.
	state := func(table, key, extra, values string) uuid.UUID {
		t.Helper()
		id := uuid.Must(uuid.NewV7())
		_, err := pg.Pool.Exec(ctx, "INSERT INTO "+table+` (seq, id, topic, partition_key, event_type, payload, content_type, created_at, retry_count, last_error, `+extra+`)
			VALUES (nextval('courier_outbox_seq'), $1, $2, $3, 'Counted', '{}', 'application/json', now(), 2, 'NOT_ENOUGH_REPLICAS', `+values+`)`, id, topic, key)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	retrying := state("courier_outbox_waiting", "k-due", "status, next_attempt_at", "'failed', now() - interval '1 second'")
	behind := state("courier_outbox_waiting", "k-due", "status, next_attempt_at", "'pending', now() - interval '1 second'")
	later := state("courier_outbox_waiting", "k-later", "status, next_attempt_at", "'failed', now() + interval '1 hour'")
	dead := state("courier_outbox_dead", "k-dead", "dead_lettered_at", "now()")

	applied, err := m.Up(ctx, pg.Pool)
	wantApplied(t, applied, err, 5)
	// Each index is looked up by name: pg_indexes would read the definition
	// of every index in the database, also of other tests' schemas being
	// dropped meanwhile.
	var hashed int
	if err := pg.Pool.QueryRow(ctx, `SELECT count(*) FROM unnest(ARRAY['courier_outbox_waiting_key', 'courier_outbox_dead_key']) AS i(name)
		WHERE pg_get_indexdef(to_regclass(quote_ident($1) || '.' || i.name)) LIKE '%hashtextextended(%'`, pg.Schema).Scan(&hashed); err != nil || hashed != 2 {
		t.Fatalf("%d indexes by key hash after the upgrade (%v), want 2", hashed, err)
	}
	pg.Migrate(t) // nothing left to apply; adds the test's view
	out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	next := enqueue(t, pg, out, producer.Event{Topic: topic, Key: "k-due", Type: "Counted", Payload: []byte(`{}`)})
	held := enqueue(t, pg, out, producer.Event{Topic: topic, Key: "k-later", Type: "Counted", Payload: []byte(`{}`)})
	moves := enqueue(t, pg, out, producer.Event{Topic: topic, Key: "k-dead", Type: "Counted", Payload: []byte(`{}`)})
	long := uuid.Must(uuid.NewV7())
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO courier_outbox (id, topic, partition_key, event_type, payload, content_type)
		VALUES ($1, $2, `+incompressible(9600)+`, 'Counted', '{}', 'application/json')`, long, topic); err != nil {
		t.Fatal(err)
	}

	kafka := consume(t, k, topic)
	runRelay(t, newRelay(t, pg, k, producer.RelayConfig{PollInterval: 20 * time.Millisecond}))
	msgs := kafka.waitDistinct(4, 30*time.Second)
	var order []string
	for _, msg := range msgs {
		order = append(order, headerValue(msg, producer.HeaderID))
	}
	if want := []string{retrying.String(), behind.String(), next.String()}; !slices.Equal(slices.DeleteFunc(slices.Clone(order),
		func(id string) bool { return !slices.Contains(want, id) }), want) {
		t.Errorf("k-due reached Kafka as %v, want %v in that order", order, want)
	}
	if !slices.Contains(order, moves.String()) || slices.Contains(order, held.String()) || len(order) != 4 {
		t.Errorf("Kafka holds %v: want k-dead's new event, and not k-later's, which waits behind its retry", order)
	}
	testkit.WaitFor(t, 30*time.Second, "the long key's row to be dead-lettered", func() bool {
		return rowOf(t, pg, long).Status == producer.StatusDeadLettered
	})
	if row := rowOf(t, pg, long); row.LastError == nil || !strings.Contains(*row.LastError, "partition_key: text is longer than courier allows: 9600 bytes") {
		t.Errorf("the long key's row was dead-lettered with %v, want an error naming partition_key", row.LastError)
	}
	for id, want := range map[uuid.UUID]string{later: producer.StatusFailed, held: producer.StatusPending, dead: producer.StatusDeadLettered} {
		if got := rowOf(t, pg, id).Status; got != want {
			t.Errorf("event %s is %s, want %s", id, got, want)
		}
	}
	admin := newAdmin(t, pg)
	recs, err := admin.List(ctx, producer.Filter{Topic: topic, Key: "k-later", Statuses: []string{producer.StatusPending, producer.StatusFailed}})
	if err != nil || len(recs) != 2 {
		t.Fatalf("Admin.List of k-later = %d records, %v; want its retry and the event behind it", len(recs), err)
	}
}
