package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// outboxDB is a migrated outbox table in a schema of the test's own.
type outboxDB struct {
	*testkit.PG
	outbox *producer.Outbox
}

// newOutboxDB migrates the outbox table into a schema of the test's own.
func newOutboxDB(t *testing.T) *outboxDB {
	t.Helper()
	pg := testkit.Postgres(t)
	pg.Migrate(t)
	out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	return &outboxDB{PG: pg, outbox: out}
}

// flags point a command at the table.
func (o *outboxDB) flags() []string { return []string{"--database-url", o.URL, "--schema", o.Schema} }

// cli runs `courier outbox <args>` in-process against the table.
func (o *outboxDB) cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return courier(t, append(append([]string{"outbox"}, args...), o.flags()...)...)
}

// enqueue writes events in one transaction and returns their ids.
func (o *outboxDB) enqueue(t *testing.T, events ...producer.Event) []uuid.UUID {
	t.Helper()
	res, err := o.outbox.EnqueueBatch(context.Background(), o.Pool, events)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]uuid.UUID, len(res))
	for i, r := range res {
		ids[i] = r.ID
	}
	return ids
}

// exec runs sql, which must change one row ($1 is id), e.g. to put an event
// in a state only a relay would otherwise reach.
func (o *outboxDB) exec(t *testing.T, id uuid.UUID, sql string, args ...any) {
	t.Helper()
	tag, err := o.Pool.Exec(context.Background(), sql, append([]any{id}, args...)...)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("event %s: %s: %v (%d rows)", id, sql, err, tag.RowsAffected())
	}
}

// move takes a new event out of the queue into table, with the columns of
// the event and those of more, whose values are vals ($2 on).
func (o *outboxDB) move(t *testing.T, id uuid.UUID, table, more, vals string, args ...any) {
	t.Helper()
	const cols = `seq, id, topic, partition_key, event_type, aggregate_type, aggregate_id, tenant_id, correlation_id,
		causation_id, idempotency_key, payload, content_type, headers, max_retries, created_at`
	o.exec(t, id, "WITH m AS (DELETE FROM courier_outbox WHERE id = $1 RETURNING *) INSERT INTO "+table+
		" ("+cols+", "+more+") SELECT "+cols+", "+vals+" FROM m", args...)
}

// deadLetter puts an event where a relay that gave up on it would.
func (o *outboxDB) deadLetter(t *testing.T, id uuid.UUID, lastError string) {
	t.Helper()
	o.move(t, id, "courier_outbox_dead", "retry_count, last_error, last_attempt_at, first_failed_at, dead_lettered_at",
		"6, $2, now(), now(), now()", lastError)
}

// fail puts an event where a relay that will retry it would.
func (o *outboxDB) fail(t *testing.T, id uuid.UUID, lastError string) {
	t.Helper()
	o.move(t, id, "courier_outbox_waiting", "status, retry_count, last_error, last_attempt_at, next_attempt_at",
		"'failed', 2, $2, now(), now() + interval '1 hour'", lastError)
}

// hold puts an event where a relay holds it for Kafka's condition: pending,
// no attempt counted, with the error, due in due.
func (o *outboxDB) hold(t *testing.T, id uuid.UUID, lastError string, due time.Duration) {
	t.Helper()
	o.move(t, id, "courier_outbox_waiting", "status, retry_count, last_error, next_attempt_at",
		"'pending', 0, $2, now() + $3::interval", lastError, due)
}

// publish puts an event where a relay that published it ago would.
func (o *outboxDB) publish(t *testing.T, id uuid.UUID, ago time.Duration) {
	t.Helper()
	o.move(t, id, "courier_outbox_published", "published_at", "now() - $2::interval", ago)
}

// status returns an event's status, or "gone".
func (o *outboxDB) status(t *testing.T, id uuid.UUID) string {
	t.Helper()
	var status string
	err := o.Pool.QueryRow(context.Background(), "SELECT COALESCE((SELECT status FROM courier_events WHERE id = $1), 'gone')", id).Scan(&status)
	if err != nil {
		t.Fatal(err)
	}
	return status
}

// count counts the events matching a condition.
func (o *outboxDB) count(t *testing.T, where string) int {
	t.Helper()
	var n int
	if err := o.Pool.QueryRow(context.Background(), "SELECT count(*) FROM courier_events WHERE "+where).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// event is a JSON event for topic and key.
func event(topic, key, typ string) producer.Event {
	return producer.Event{Topic: topic, Key: key, Type: typ, Payload: fmt.Appendf(nil, `{"key":%q}`, key)}
}

// decode parses a command's JSON output into v, failing the test with the
// output when it is not what was expected.
func decode(t *testing.T, code int, stdout, stderr string, v any) {
	t.Helper()
	if code != exitOK {
		t.Fatalf("exit %d, want 0\n%s%s", code, stdout, stderr)
	}
	if err := json.Unmarshal([]byte(stdout), v); err != nil {
		t.Fatalf("output is not the JSON expected: %v\n%s", err, stdout)
	}
}

func TestOutboxStats(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	ids := o.enqueue(t, event("orders", "a", "OrderCreated"), event("orders", "b", "OrderCreated"),
		event("orders", "c", "OrderCreated"), event("orders", "d", "OrderCreated"), event("orders", "e", "OrderCreated"))
	o.exec(t, ids[0], "UPDATE courier_outbox SET created_at = now() - interval '90 seconds' WHERE id = $1") // due for 90 s
	o.fail(t, ids[2], "not enough replicas")
	o.publish(t, ids[3], 0)
	o.deadLetter(t, ids[4], "too large")

	code, out, errOut := o.cli(t, "stats")
	if code != exitOK {
		t.Fatalf("stats: exit %d\n%s%s", code, out, errOut)
	}
	for _, line := range []string{"pending        2", "failed         1", "published      1", "dead_lettered  1", "oldest due event: waiting 1m3"} {
		if !strings.Contains(out, line) {
			t.Errorf("stats output lacks %q:\n%s", line, out)
		}
	}

	var stats statsJSON
	code, out, errOut = o.cli(t, "stats", "--output", "json")
	decode(t, code, out, errOut, &stats)
	want := map[string]int64{"pending": 2, "failed": 1, "published": 1, "dead_lettered": 1}
	for status, n := range want {
		if stats.Counts[status] != n {
			t.Errorf("counts[%s] = %d, want %d (%v)", status, stats.Counts[status], n, stats.Counts)
		}
	}
	if stats.Table != o.Schema+".courier_outbox" || stats.OldestDue == nil || stats.OldestDueAgeSeconds < 90 || stats.OldestDueAgeSeconds > 3600 {
		t.Errorf("stats = %+v, want the table and an event due for about 90s", stats)
	}
}

// TestOutboxStatsShowsTheHeldEvents: stats groups the events Kafka's
// condition holds by topic and error (two of orders/3, one of
// invoices/0), and leaves out a requeued event that still carries its old
// error but is due now, and a failed one.
func TestOutboxStatsShowsTheHeldEvents(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	ids := o.enqueue(t, event("orders", "a", "OrderCreated"), event("orders", "b", "OrderCreated"),
		event("invoices", "c", "InvoiceSent"), event("orders", "d", "OrderCreated"), event("orders", "e", "OrderCreated"))
	const replicas = "orders/3: kafka server: Messages are rejected since there are fewer in-sync replicas than required: NOT_ENOUGH_REPLICAS"
	o.hold(t, ids[0], replicas, time.Minute)
	o.hold(t, ids[1], replicas, 2*time.Minute)
	o.hold(t, ids[2], "invoices/0: kafka server: In the middle of a leadership election: LEADER_NOT_AVAILABLE", time.Minute)
	o.hold(t, ids[3], "requeued after: too large", -time.Second)
	o.fail(t, ids[4], "orders/1: CORRUPT_MESSAGE")

	var stats statsJSON
	code, out, errOut := o.cli(t, "stats", "--output", "json")
	decode(t, code, out, errOut, &stats)
	if len(stats.Held) != 2 || stats.Held[0].Topic != "orders" || stats.Held[0].Events != 2 || stats.Held[0].Error != replicas ||
		stats.Held[1].Topic != "invoices" || stats.Held[1].Events != 1 || stats.Held[0].NextTry.After(stats.Held[0].Oldest.Add(2*time.Minute)) {
		t.Errorf("stats held = %+v, want orders/3's two events, then invoices/0's one", stats.Held)
	}
	code, out, errOut = o.cli(t, "stats")
	if code != exitOK {
		t.Fatalf("stats: exit %d\n%s%s", code, out, errOut)
	}
	if !regexp.MustCompile(`(?m)^orders\s+2\s+\S+\s+\S+\s+orders/3: kafka server: Messages are rejected`).MatchString(out) ||
		!strings.Contains(out, "held by Kafka's condition") || strings.Contains(out, "requeued after") {
		t.Errorf("stats output does not show the held groups alone:\n%s", out)
	}
}

// TestOutboxStatsEstimatesALargeHistory: beyond 100,000 published events
// stats prints PostgreSQL's estimate, marked ~, and says so in JSON.
func TestOutboxStatsEstimatesALargeHistory(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	_, err := o.Pool.Exec(context.Background(), `INSERT INTO courier_outbox_published (seq, id, topic, event_type, payload,
		content_type, created_at, published_at)
		SELECT g, gen_random_uuid(), 'orders', 'OrderCreated', '{}', 'application/json', now(), now()
		FROM generate_series(1, $1) AS g`, producer.ExactPublishedLimit+20_000)
	if err == nil {
		_, err = o.Pool.Exec(context.Background(), "ANALYZE courier_outbox_published")
	}
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := o.cli(t, "stats")
	if code != exitOK || !strings.Contains(out, "published      ~1") {
		t.Errorf("stats of a large history: exit %d, want the published count marked ~\n%s%s", code, out, errOut)
	}
	var stats statsJSON
	code, out, errOut = o.cli(t, "stats", "--output", "json")
	decode(t, code, out, errOut, &stats)
	if !stats.PublishedEstimated || stats.Counts["published"] <= producer.ExactPublishedLimit {
		t.Errorf("stats --output json = %+v, want an estimate over %d", stats, producer.ExactPublishedLimit)
	}
}

func TestOutboxStatsOfAnIdleOutbox(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	code, out, errOut := o.cli(t, "stats")
	if code != exitOK || !strings.Contains(out, "no event is due") || !strings.Contains(out, "pending        0") {
		t.Fatalf("stats of an empty outbox: exit %d\n%s%s", code, out, errOut)
	}
	var stats map[string]any
	code, out, errOut = o.cli(t, "stats", "-o", "json")
	decode(t, code, out, errOut, &stats)
	if stats["oldest_due"] != nil || stats["oldest_due_age_seconds"] != 0.0 {
		t.Errorf("stats of an empty outbox = %v, want oldest_due null and age 0", stats)
	}
}

func TestOutboxListFiltersAndPages(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	ids := o.enqueue(t,
		event("orders", "o-1", "OrderCreated"),   // 0 dead: too large, 3 hours ago
		event("orders", "o-2", "OrderCreated"),   // 1 failed: replicas
		event("payments", "p-1", "PaymentTaken"), // 2 dead: too large
		event("orders", "o-3", "OrderCreated"),   // 3 pending
		event("orders", "o-4", "OrderShipped"),   // 4 published
	)
	o.deadLetter(t, ids[0], "kafka server: Message was too LARGE")
	o.exec(t, ids[0], "UPDATE courier_outbox_dead SET last_attempt_at = now() - interval '3 hours' WHERE id = $1")
	o.fail(t, ids[1], "kafka server: not enough replicas")
	o.deadLetter(t, ids[2], "kafka server: message was too large")
	o.publish(t, ids[4], 0)

	list := func(args ...string) []uuid.UUID { return o.listIDs(t, args...) }
	for _, c := range []struct {
		args []string
		want []uuid.UUID
	}{
		{nil, []uuid.UUID{ids[0], ids[1], ids[2]}}, // failed and dead-lettered
		{[]string{"--status", "dead_lettered"}, []uuid.UUID{ids[0], ids[2]}},
		{[]string{"--status", "pending", "--status", "published"}, []uuid.UUID{ids[3], ids[4]}},
		{[]string{"--status", "pending,failed"}, []uuid.UUID{ids[1], ids[3]}},
		{[]string{"--topic", "payments"}, []uuid.UUID{ids[2]}},
		{[]string{"--key", "o-2"}, []uuid.UUID{ids[1]}},
		{[]string{"--error", "too large"}, []uuid.UUID{ids[0], ids[2]}},
		{[]string{"--since", "1h"}, []uuid.UUID{ids[1], ids[2]}},
		{[]string{"--until", "1h"}, []uuid.UUID{ids[0]}},
		{[]string{"--since", time.Now().Add(-4 * time.Hour).UTC().Format(time.RFC3339), "--until", "2h"}, []uuid.UUID{ids[0]}},
		{[]string{"--topic", "nothing-here"}, nil},
	} {
		if got := list(c.args...); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("list %v = %v, want %v", c.args, got, c.want)
		}
	}

	// Pages of one: next_after leads through all three, then ends.
	var seen []uuid.UUID
	after := "0"
	for range 4 {
		var page listJSON
		code, out, errOut := o.cli(t, "list", "--output", "json", "--limit", "1", "--after", after)
		decode(t, code, out, errOut, &page)
		for _, e := range page.Events {
			seen = append(seen, e.ID)
		}
		if page.NextAfter == nil {
			break
		}
		after = fmt.Sprint(*page.NextAfter)
	}
	if fmt.Sprint(seen) != fmt.Sprint([]uuid.UUID{ids[0], ids[1], ids[2]}) {
		t.Errorf("paging with --limit 1 saw %v, want %v", seen, ids[:3])
	}

	code, out, errOut := o.cli(t, "list", "--limit", "2")
	if code != exitOK || !strings.Contains(out, ids[0].String()) || !strings.Contains(out, "dead_lettered") ||
		!strings.Contains(out, "kafka server: Message was too LARGE") || strings.Contains(out, ids[2].String()) ||
		!strings.Contains(out, "more may follow: add --after") {
		t.Errorf("list --limit 2: exit %d, want the first two events and a pointer to the next page\n%s%s", code, out, errOut)
	}
	if code, out, _ = o.cli(t, "list", "--key", "nobody"); code != exitOK || out != "no events match\n" {
		t.Errorf("list of nothing: exit %d\n%s", code, out)
	}
}

// TestOutboxFiltersByTenantAndAggregate: --tenant, --aggregate-type and
// --aggregate-id select events in list, requeue and purge, in every
// status; a value that is not UTF-8, or longer than an event's, is a usage
// error.
func TestOutboxFiltersByTenantAndAggregate(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	ev := func(tenant, aggType, aggID string) producer.Event {
		e := event("orders", aggID, "Changed")
		e.TenantID, e.AggregateType, e.AggregateID = tenant, aggType, aggID
		return e
	}
	ids := o.enqueue(t, ev("acme", "Order", "o-1"), ev("acme", "Order", "o-2"), ev("globex", "Order", "o-3"),
		ev("acme", "Invoice", "i-1"), ev("globex", "Invoice", "i-2"))
	o.deadLetter(t, ids[0], "too large")
	o.fail(t, ids[1], "not enough replicas")
	o.deadLetter(t, ids[2], "too large")
	o.publish(t, ids[3], 0)
	// ids[4] stays pending.

	list := func(args ...string) []uuid.UUID { return o.listIDs(t, args...) }
	every := "pending,failed,dead_lettered,published"
	for _, c := range []struct {
		args []string
		want []uuid.UUID
	}{
		{[]string{"--tenant", "acme"}, []uuid.UUID{ids[0], ids[1]}},
		{[]string{"--tenant", "acme", "--status", every}, []uuid.UUID{ids[0], ids[1], ids[3]}},
		{[]string{"--aggregate-type", "Invoice", "--status", every}, []uuid.UUID{ids[3], ids[4]}},
		{[]string{"--aggregate-type", "Order", "--aggregate-id", "o-3"}, []uuid.UUID{ids[2]}},
		{[]string{"--aggregate-id", "i-1", "--status", "published"}, []uuid.UUID{ids[3]}},
		{[]string{"--tenant", "globex", "--aggregate-type", "Invoice"}, nil},
	} {
		if got := list(c.args...); fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("list %v = %v, want %v", c.args, got, c.want)
		}
	}

	code, out, errOut := o.cli(t, "requeue", "--tenant", "acme")
	if code != exitOK || out != "requeued 2 event(s)\n" || o.status(t, ids[0]) != "pending" || o.status(t, ids[2]) != "dead_lettered" {
		t.Fatalf("requeue --tenant acme: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = o.cli(t, "purge", "--aggregate-type", "Order", "--aggregate-id", "o-3", "--yes")
	if code != exitOK || out != "purged 1 event(s)\n" || o.status(t, ids[2]) != "gone" {
		t.Fatalf("purge --aggregate-id o-3: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = o.cli(t, "purge", "--status", "published", "--tenant", "acme", "--yes")
	if code != exitOK || out != "purged 1 event(s)\n" || o.status(t, ids[3]) != "gone" {
		t.Fatalf("purge --status published --tenant acme: exit %d\n%s%s", code, out, errOut)
	}

	for _, args := range [][]string{
		{"list", "--tenant", "acme\xff"},
		{"list", "--aggregate-id", strings.Repeat("a", producer.MaxAttributeBytes+1)},
		{"requeue", "--aggregate-type", "\xc3\x28"},
		{"purge", "--tenant", "\xff", "--yes"},
	} {
		code, out, errOut := o.cli(t, args...)
		if code != exitUsage || !strings.Contains(errOut, "invalid filter") || !utf8.ValidString(errOut) {
			t.Errorf("outbox %q: exit %d, want %d with the filter refused, in valid UTF-8\n%s%s", args, code, exitUsage, out, errOut)
		}
	}
}

func TestOutboxShow(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	jsonEvent := event("orders", "o-1", "OrderCreated")
	jsonEvent.Headers = map[string]string{"x-origin": "checkout"}
	jsonEvent.TenantID = "acme"
	textEvent := producer.Event{Topic: "notes", Type: "NoteAdded", Payload: []byte("plain text\nsecond line"), ContentType: "text/plain"}
	binaryEvent := producer.Event{Topic: "blobs", Type: "BlobStored", Payload: []byte{0x00, 0xff, 0x1b, '['}, ContentType: "application/octet-stream"}
	ids := o.enqueue(t, jsonEvent, textEvent, binaryEvent)
	o.deadLetter(t, ids[0], "kafka server: message was too large")

	show := func(id uuid.UUID) (text string, v eventJSON) {
		t.Helper()
		code, out, errOut := o.cli(t, "show", id.String())
		if code != exitOK {
			t.Fatalf("show %s: exit %d\n%s%s", id, code, out, errOut)
		}
		code, js, errOut := o.cli(t, "show", id.String(), "--output", "json")
		decode(t, code, js, errOut, &v)
		return out, v
	}

	out, v := show(ids[0])
	for _, want := range []string{ids[0].String(), "dead_lettered", "o-1", "OrderCreated", "acme", "x-origin: checkout",
		"kafka server: message was too large", "payload (application/json, 13 bytes):\n{\"key\":\"o-1\"}"} {
		if !strings.Contains(out, want) {
			t.Errorf("show of a JSON event lacks %q:\n%s", want, out)
		}
	}
	var payload map[string]string
	if err := json.Unmarshal(v.Payload, &payload); err != nil || payload["key"] != "o-1" || v.PayloadText != nil || v.PayloadBase64 != nil ||
		v.Headers["x-origin"] != "checkout" || v.Status != "dead_lettered" || *v.PayloadBytes != 13 || *v.LastError != "kafka server: message was too large" {
		t.Errorf("show --output json of a JSON event = %+v (payload %s, %v)", v, v.Payload, err)
	}

	out, v = show(ids[1])
	if !strings.Contains(out, "payload (text/plain, 22 bytes):\nplain text\nsecond line\n") || v.PayloadText == nil ||
		*v.PayloadText != "plain text\nsecond line" || v.Payload != nil || v.Key != nil {
		t.Errorf("show of a text event: %+v\n%s", v, out)
	}

	out, v = show(ids[2])
	encoded := base64.StdEncoding.EncodeToString(binaryEvent.Payload)
	if !strings.Contains(out, "payload (application/octet-stream, 4 bytes, base64):\n"+encoded+"\n") || strings.Contains(out, "\x1b") ||
		v.PayloadBase64 == nil || *v.PayloadBase64 != encoded || v.PayloadText != nil {
		t.Errorf("show of a binary event (with an escape byte): %+v\n%q", v, out)
	}

	unknown := uuid.New()
	if code, _, errOut := o.cli(t, "show", unknown.String()); code != exitFailure || !strings.Contains(errOut, "no event "+unknown.String()) {
		t.Errorf("show of an unknown id: exit %d, want %d with its id\n%s", code, exitFailure, errOut)
	}
}

func TestOutboxRequeue(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	ids := o.enqueue(t, event("orders", "o-1", "OrderCreated"), event("orders", "o-2", "OrderCreated"),
		event("payments", "p-1", "PaymentTaken"), event("payments", "p-2", "PaymentTaken"), event("orders", "o-3", "OrderCreated"))
	o.deadLetter(t, ids[0], "too large")
	o.deadLetter(t, ids[1], "too large")
	o.fail(t, ids[2], "not enough replicas")
	o.deadLetter(t, ids[3], "too large")
	o.publish(t, ids[4], 0)

	code, out, errOut := o.cli(t, "requeue", "--id", ids[0].String())
	if code != exitOK || out != "requeued 1 event(s)\n" {
		t.Fatalf("requeue --id: exit %d\n%s%s", code, out, errOut)
	}
	var retries int
	var lastError string
	if err := o.Pool.QueryRow(context.Background(), "SELECT retry_count, last_error FROM courier_events WHERE id = $1", ids[0]).Scan(&retries, &lastError); err != nil {
		t.Fatal(err)
	}
	if s := o.status(t, ids[0]); s != "pending" || retries != 0 || lastError != "too large" {
		t.Errorf("requeued event: status %s, retry_count %d, last_error %q; want pending, 0, the error kept", s, retries, lastError)
	}

	var res map[string]int64
	code, out, errOut = o.cli(t, "requeue", "--topic", "payments", "--status", "failed", "-o", "json")
	decode(t, code, out, errOut, &res)
	if res["requeued"] != 1 || o.status(t, ids[2]) != "pending" || o.status(t, ids[3]) != "dead_lettered" {
		t.Errorf("requeue --topic payments --status failed: %v; statuses %s, %s", res, o.status(t, ids[2]), o.status(t, ids[3]))
	}

	// An id that is not failed or dead-lettered is left alone.
	if code, out, _ = o.cli(t, "requeue", "--id", ids[4].String()); code != exitOK || out != "requeued 0 event(s)\n" || o.status(t, ids[4]) != "published" {
		t.Errorf("requeue of a published event: exit %d, %s, status %s", code, out, o.status(t, ids[4]))
	}

	code, out, errOut = o.cli(t, "requeue", "--all", "--output", "json")
	decode(t, code, out, errOut, &res)
	if res["requeued"] != 2 || o.count(t, "status = 'dead_lettered'") != 0 {
		t.Errorf("requeue --all = %v, want the 2 dead letters left", res)
	}
}

func TestOutboxPurge(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	ids := o.enqueue(t, event("orders", "o-1", "OrderCreated"), event("orders", "o-2", "OrderCreated"),
		event("payments", "p-1", "PaymentTaken"), event("orders", "o-3", "OrderCreated"), event("orders", "o-4", "OrderCreated"))
	o.deadLetter(t, ids[0], "too large")
	o.deadLetter(t, ids[1], "invalid record")
	o.deadLetter(t, ids[2], "too large")
	o.publish(t, ids[3], 0)

	code, out, errOut := o.cli(t, "purge", "--error", "TOO LARGE", "--topic", "orders", "--yes")
	if code != exitOK || out != "purged 1 event(s)\n" || o.status(t, ids[0]) != "gone" || o.status(t, ids[1]) != "dead_lettered" {
		t.Fatalf("purge --error --topic --yes: exit %d\n%s%s", code, out, errOut)
	}

	var res map[string]int64
	code, out, errOut = o.cli(t, "purge", "--all", "--status", "published", "-y", "-o", "json")
	decode(t, code, out, errOut, &res)
	if res["purged"] != 1 || o.status(t, ids[3]) != "gone" || o.status(t, ids[1]) != "dead_lettered" {
		t.Errorf("purge --all --status published = %v", res)
	}

	code, out, errOut = o.cli(t, "purge", "--all", "--yes", "--output", "json")
	decode(t, code, out, errOut, &res)
	if res["purged"] != 2 || o.status(t, ids[4]) != "pending" {
		t.Errorf("purge --all = %v, want the 2 dead letters left, the pending event kept (status %s)", res, o.status(t, ids[4]))
	}
}

// TestOutboxPurgeWithoutTerminalNeedsYes runs the binary with stdin from
// /dev/null, as cron does, and from a pipe that says yes: neither is a
// terminal to confirm on, so both must be refused and delete nothing.
func TestOutboxPurgeWithoutTerminalNeedsYes(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	ids := o.enqueue(t, event("orders", "o-1", "OrderCreated"))
	o.deadLetter(t, ids[0], "too large")
	for _, stdin := range []string{"", "yes\n"} {
		cmd := exec.Command(testkit.CourierBinary(t), append([]string{"outbox", "purge", "--key", "o-1"}, o.flags()...)...)
		if stdin != "" {
			cmd.Stdin = strings.NewReader(stdin)
		}
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(string(out), "pass --yes") {
			t.Errorf("purge with stdin %q: exit %d (%v), want %d saying to pass --yes\n%s", stdin, code, err, exitUsage, out)
		}
	}
	if s := o.status(t, ids[0]); s != "dead_lettered" {
		t.Errorf("the dead letter is %s after refused purges, want it kept", s)
	}
}

func TestOutboxPurgeConfirmation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		answer string
		want   bool
	}{{"yes\n", true}, {"  yes  \n", true}, {"yes", true}, {"y\n", false}, {"YES\n", false}, {"no\n", false}, {"", false}} {
		var prompt strings.Builder
		got, err := confirm(strings.NewReader(c.answer), &prompt, "Type yes to continue: ")
		if err != nil || got != c.want || prompt.String() != "Type yes to continue: " {
			t.Errorf("confirm(%q) = %v, %v (prompt %q), want %v", c.answer, got, err, prompt.String(), c.want)
		}
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if isTerminal(null) || isTerminal(r) || isTerminal(strings.NewReader("yes\n")) {
		t.Error("isTerminal took /dev/null, a pipe or a reader for a terminal")
	}
}

func TestOutboxCleanup(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	ids := o.enqueue(t, event("orders", "o-1", "OrderCreated"), event("orders", "o-2", "OrderCreated"),
		event("orders", "o-3", "OrderCreated"), event("orders", "o-4", "OrderCreated"))
	o.publish(t, ids[0], 8*24*time.Hour)
	o.publish(t, ids[1], 2*24*time.Hour)
	o.deadLetter(t, ids[2], "too large")
	o.exec(t, ids[2], "UPDATE courier_outbox_dead SET created_at = now() - interval '30 days' WHERE id = $1")

	code, out, errOut := o.cli(t, "cleanup", "--yes")
	if code != exitOK || out != "deleted 1 published event(s) older than 168h0m0s\n" || o.status(t, ids[0]) != "gone" || o.status(t, ids[1]) != "published" {
		t.Fatalf("cleanup with the default retention: exit %d\n%s%s", code, out, errOut)
	}
	var res map[string]float64
	code, out, errOut = o.cli(t, "cleanup", "--retention", "24h", "--output", "json", "--yes")
	decode(t, code, out, errOut, &res)
	if res["deleted"] != 1 || res["retention_seconds"] != 86400 || o.status(t, ids[1]) != "gone" {
		t.Errorf("cleanup --retention 24h = %v", res)
	}
	if o.status(t, ids[2]) != "dead_lettered" || o.status(t, ids[3]) != "pending" {
		t.Errorf("cleanup touched a dead letter (%s) or a pending event (%s)", o.status(t, ids[2]), o.status(t, ids[3]))
	}
}

func TestOutboxCleanupRetentionFromEnvironment(t *testing.T) {
	o := newOutboxDB(t)
	ids := o.enqueue(t, event("orders", "o-1", "OrderCreated"))
	o.publish(t, ids[0], 48*time.Hour) // retention removes whole days: this one is past an hour's
	t.Setenv("COURIER_RETENTION", "1h")
	if code, out, errOut := o.cli(t, "cleanup", "--yes"); code != exitOK || !strings.Contains(out, "deleted 1 published event(s) older than 1h0m0s") {
		t.Fatalf("cleanup with COURIER_RETENTION=1h: exit %d\n%s%s", code, out, errOut)
	}
	t.Setenv("COURIER_RETENTION", "soon")
	if code, _, errOut := o.cli(t, "cleanup"); code != exitUsage || !strings.Contains(errOut, "COURIER_RETENTION") {
		t.Errorf("cleanup with COURIER_RETENTION=soon: exit %d, want %d naming the variable\n%s", code, exitUsage, errOut)
	}
}

// TestOutboxMissingTableNamesMigrate: every subcommand on a schema without
// the table says how to create it.
func TestOutboxMissingTableNamesMigrate(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	id := uuid.NewString()
	for _, args := range [][]string{
		{"stats"}, {"list"}, {"show", id}, {"requeue", "--id", id}, {"purge", "--id", id, "--yes"}, {"cleanup", "--yes"},
	} {
		code, out, errOut := courier(t, append(append([]string{"outbox"}, args...), "--database-url", pg.URL, "--schema", pg.Schema)...)
		if code != exitFailure || !strings.Contains(errOut, "courier migrate up --schema "+pg.Schema+" --table courier_outbox") {
			t.Errorf("outbox %v without the table: exit %d, want %d naming `courier migrate`\n%s%s", args, code, exitFailure, out, errOut)
		}
	}
}

// TestOutboxUsageErrorsExitTwo: bad calls fail before touching the database
// (its URL points nowhere) with exit code 2.
func TestOutboxUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	nowhere := []string{"--database-url", "postgres://app:s3cr3t@127.0.0.1:1/shop?connect_timeout=1"}
	for _, args := range [][]string{
		{"outbox", "bogus"},
		{"outbox", "stats", "extra"},
		{"outbox", "stats", "--output", "yaml"},
		{"outbox", "stats", "--schema", "Bad-Schema"},
		{"outbox", "list", "--limit", "0"},
		{"outbox", "list", "--status", "lost"},
		{"outbox", "list", "--since", "yesterday"},
		{"outbox", "list", "--until", "-5m"},
		{"outbox", "list", "--since", "1h", "--until", "2h"},
		{"outbox", "list", "--after", "x"},
		{"outbox", "show"},
		{"outbox", "show", "not-a-uuid"},
		{"outbox", "requeue"},
		{"outbox", "requeue", "--status", "dead_lettered"},
		{"outbox", "requeue", "--id", "42"},
		{"outbox", "requeue", "--all", "--status", "published"},
		{"outbox", "purge", "--yes"},
		{"outbox", "purge", "--all", "--status", "pending", "--yes"},
		{"outbox", "cleanup", "--retention", "-1h"},
		{"outbox", "cleanup", "--retention", "a week"},
	} {
		code, out, errOut := courier(t, append(args, nowhere...)...)
		if code != exitUsage || !strings.Contains(errOut, "courier --help") || strings.Contains(out+errOut, "s3cr3t") {
			t.Errorf("courier %v: exit %d, want %d with a pointer to --help and no password\n%s%s", args, code, exitUsage, out, errOut)
		}
	}
	for _, raw := range []string{"postgres://app@db/shop?password=s3cr3t&sslmode=sideways", "host=db password=s3cr3t sslmode=sideways"} {
		code, out, errOut := courier(t, "outbox", "stats", "--database-url", raw)
		if code != exitUsage || !strings.Contains(errOut, "--database-url") || strings.Contains(out+errOut, "s3cr3t") {
			t.Errorf("outbox stats --database-url %q: exit %d, want %d naming the flag without the password\n%s%s", raw, code, exitUsage, out, errOut)
		}
	}
}

func TestOutboxHelpHasExamples(t *testing.T) {
	t.Parallel()
	for _, sub := range []string{"stats", "list", "show", "requeue", "purge", "cleanup"} {
		code, out, _ := courier(t, "outbox", sub, "--help")
		if code != exitOK || !strings.Contains(out, "Examples:\n  courier outbox "+sub) {
			t.Errorf("courier outbox %s --help: exit %d, want examples\n%s", sub, code, out)
		}
	}
}

// listIDs runs `courier outbox list --output json` with args and returns
// the ids it lists, in order.
func (o *outboxDB) listIDs(t *testing.T, args ...string) []uuid.UUID {
	t.Helper()
	var page listJSON
	code, out, errOut := o.cli(t, append([]string{"list", "--output", "json"}, args...)...)
	decode(t, code, out, errOut, &page)
	var got []uuid.UUID
	for _, e := range page.Events {
		got = append(got, e.ID)
	}
	return got
}

// TestOutboxActionsExpectTheCountTheyWereGiven: requeue and purge with
// --dry-run count their selection and change nothing; with --expect they
// change nothing and exit 1 when the selection no longer holds that count
// (an event of the key was dead-lettered since), and act on exactly it
// when it does, leaving other keys alone. --expect with --dry-run, or
// below 0, is a usage error.
func TestOutboxActionsExpectTheCountTheyWereGiven(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		verb, done, after string
		yes               []string
	}{{"requeue", "requeued", "pending", nil}, {"purge", "purged", "gone", []string{"--yes"}}} {
		t.Run(c.verb, func(t *testing.T) {
			t.Parallel()
			o := newOutboxDB(t)
			ids := o.enqueue(t, event("orders", "k", "T"), event("orders", "k", "T"), event("orders", "other", "T"), event("orders", "k", "T"))
			for _, id := range ids[:3] {
				o.deadLetter(t, id, "too large")
			}
			var res map[string]int64
			code, out, errOut := o.cli(t, c.verb, "--key", "k", "--dry-run", "-o", "json")
			decode(t, code, out, errOut, &res)
			if res["would_"+c.verb] != 2 || o.count(t, "status = 'dead_lettered'") != 3 {
				t.Fatalf("%s --dry-run: %v, want would_%s 2 and nothing changed", c.verb, res, c.verb)
			}
			if code, out, _ := o.cli(t, c.verb, "--key", "k", "--dry-run"); code != exitOK || !strings.Contains(out, "--expect 2") {
				t.Errorf("%s --dry-run: exit %d, %q; want the count and how to act on it", c.verb, code, out)
			}
			o.deadLetter(t, ids[3], "too large") // the set changes after the count
			code, out, errOut = o.cli(t, append([]string{c.verb, "--key", "k", "--expect", "2"}, c.yes...)...)
			if code != exitFailure || !strings.Contains(errOut, "holds 3 event(s), not the 2 --expect names") || o.count(t, "status = 'dead_lettered'") != 4 {
				t.Fatalf("%s --expect 2 of 3: exit %d\n%s%s\nwant exit 1 saying the set changed, and nothing changed", c.verb, code, out, errOut)
			}
			code, out, errOut = o.cli(t, append([]string{c.verb, "--key", "k", "--expect", "3", "-o", "json"}, c.yes...)...)
			decode(t, code, out, errOut, &res)
			if res[c.done] != 3 || o.status(t, ids[0]) != c.after || o.status(t, ids[1]) != c.after || o.status(t, ids[3]) != c.after ||
				o.status(t, ids[2]) != "dead_lettered" {
				t.Errorf("%s --expect 3: %v; statuses %s %s %s %s, want key k's %s and the other key's dead_lettered", c.verb, res,
					o.status(t, ids[0]), o.status(t, ids[1]), o.status(t, ids[2]), o.status(t, ids[3]), c.after)
			}
			if code, _, errOut := o.cli(t, slices.Concat([]string{c.verb, "--key", "other", "--expect", "0"}, c.yes)...); code != exitFailure ||
				!strings.Contains(errOut, "not the 0 --expect names") || o.status(t, ids[2]) != "dead_lettered" {
				t.Errorf("%s --expect 0 of 1: exit %d %s, want exit 1 and nothing changed", c.verb, code, errOut)
			}
			if code, out, _ := o.cli(t, slices.Concat([]string{c.verb, "--key", "none", "--expect", "0"}, c.yes)...); code != exitOK || out != c.done+" 0 event(s)\n" {
				t.Errorf("%s --expect 0 of none: exit %d %q, want 0 and nothing done", c.verb, code, out)
			}
			for _, args := range [][]string{{"--expect", "-1"}, {"--expect", "2", "--dry-run"}, {"--expect", "0", "--dry-run"}} {
				if code, _, errOut := o.cli(t, slices.Concat([]string{c.verb, "--key", "other"}, c.yes, args)...); code != exitUsage || !strings.Contains(errOut, "--expect") {
					t.Errorf("%s %v: exit %d %s, want a usage error naming --expect", c.verb, args, code, errOut)
				}
			}
		})
	}
}
