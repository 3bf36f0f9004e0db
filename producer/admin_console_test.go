package producer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// refusingAdmin is an Admin on failingDB: a call that returns another
// error than failingDB's refused its arguments before any SQL.
func refusingAdmin(t *testing.T) *producer.Admin {
	t.Helper()
	admin, err := producer.NewAdmin(failingDB{}, producer.AdminConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return admin
}

// consoleFixture is an outbox whose events have tenants and aggregates,
// in every status.
type consoleFixture struct {
	pg    *testkit.PG
	admin *producer.Admin
	// published o-1 (acme), failed o-2 (acme), dead o-3 (globex), dead
	// i-1 (acme, topic invoices), published o-4 (globex), pending o-5
	// (acme).
	o1, o2, o3, i1, o4, o5 uuid.UUID
}

func newConsoleFixture(t *testing.T) consoleFixture {
	t.Helper()
	pg, out := setup(t)
	ev := func(topic, tenant, aggType, aggID string) producer.Event {
		return producer.Event{Topic: topic, Key: aggID, Type: "Changed", Payload: []byte(`{}`),
			TenantID: tenant, AggregateType: aggType, AggregateID: aggID}
	}
	f := consoleFixture{pg: pg}
	f.o1 = enqueue(t, pg, out, ev("orders", "acme", "Order", "o-1"))
	f.o2 = enqueue(t, pg, out, ev("orders", "acme", "Order", "o-2"))
	f.o3 = enqueue(t, pg, out, ev("orders", "globex", "Order", "o-3"))
	f.i1 = enqueue(t, pg, out, ev("invoices", "acme", "Invoice", "i-1"))
	f.o4 = enqueue(t, pg, out, ev("orders", "globex", "Order", "o-4"))
	pub := &fakePublisher{}
	pub.setFail(func(m *record.Record) error {
		switch recordHeader(m, producer.HeaderID) {
		case f.o2.String():
			return sarama.ErrInvalidMessage
		case f.o3.String(), f.i1.String():
			return sarama.ErrMessageSizeTooLarge
		}
		return nil
	})
	runOnce(t, newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, Now: newFakeClock().Now}))
	f.o5 = enqueue(t, pg, out, ev("orders", "acme", "Order", "o-5"))
	admin := newAdmin(t, pg)
	f.admin = admin
	return f
}

func TestAdminFiltersByTenantAndAggregate(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t)
	ctx := context.Background()
	all := []string{"pending", "failed", "dead_lettered", "published"}
	for _, c := range []struct {
		name   string
		filter producer.Filter
		want   []uuid.UUID
	}{
		{"tenant, default statuses", producer.Filter{TenantID: "acme"}, []uuid.UUID{f.o2, f.i1}},
		{"tenant, every status", producer.Filter{TenantID: "acme", Statuses: all}, []uuid.UUID{f.o1, f.o2, f.i1, f.o5}},
		{"aggregate type", producer.Filter{AggregateType: "Order"}, []uuid.UUID{f.o2, f.o3}},
		{"aggregate type and id", producer.Filter{AggregateType: "Order", AggregateID: "o-3"}, []uuid.UUID{f.o3}},
		{"aggregate id, published", producer.Filter{AggregateID: "o-1", Statuses: []string{"published"}}, []uuid.UUID{f.o1}},
		{"tenant, published", producer.Filter{TenantID: "globex", Statuses: []string{"published"}}, []uuid.UUID{f.o4}},
		{"tenant and aggregate type that do not meet", producer.Filter{TenantID: "globex", AggregateType: "Invoice", Statuses: all}, nil},
		{"unknown tenant", producer.Filter{TenantID: "nobody", Statuses: all}, nil},
	} {
		got, err := f.admin.List(ctx, c.filter)
		if err != nil || !slices.Equal(ids(got), c.want) {
			t.Errorf("%s: List = %v, %v; want %v", c.name, ids(got), err, c.want)
		}
		if n, err := f.admin.Count(ctx, c.filter); err != nil || n != int64(len(c.want)) {
			t.Errorf("%s: Count = %d, %v; want %d", c.name, n, err, len(c.want))
		}
	}
}

// TestAdminCountsWhatRequeueAndPurgeTouch: CountRequeue and CountPurge
// count what Requeue and Purge then change, with their defaults and
// refusals.
func TestAdminCountsWhatRequeueAndPurgeTouch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	y2029 := time.Date(2029, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name  string
		purge bool
		f     producer.Filter
		want  int64
	}{
		{"requeue: default statuses", false, producer.Filter{}, 3},
		{"requeue: tenant", false, producer.Filter{TenantID: "acme"}, 2},
		{"requeue: aggregate id", false, producer.Filter{AggregateID: "o-3"}, 1},
		{"requeue: none", false, producer.Filter{TenantID: "nobody"}, 0},
		{"purge: default status", true, producer.Filter{}, 2},
		{"purge: tenant", true, producer.Filter{TenantID: "acme"}, 1},
		{"purge: published of a tenant", true, producer.Filter{TenantID: "globex", Statuses: []string{"published"}}, 1},
		// The relay's fake clock published them in 2030, enqueued now.
		{"purge: published before 2029", true, producer.Filter{Statuses: []string{"published"}, Until: y2029}, 0},
		{"purge: published since 2029", true, producer.Filter{Statuses: []string{"published"}, Since: y2029}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newConsoleFixture(t)
			count, act := f.admin.CountRequeue, f.admin.Requeue
			if c.purge {
				count, act = f.admin.CountPurge, f.admin.Purge
			}
			n, err := count(ctx, c.f)
			if err != nil || n != c.want {
				t.Fatalf("count = %d, %v; want %d", n, err, c.want)
			}
			if done, err := act(ctx, c.f); err != nil || done != n {
				t.Fatalf("the action touched %d, %v; its count said %d", done, err, n)
			}
			if n, err := count(ctx, c.f); err != nil || n != 0 {
				t.Fatalf("count after the action = %d, %v; want 0", n, err)
			}
		})
	}
	f := newConsoleFixture(t)
	for _, c := range []struct {
		name  string
		count func(context.Context, producer.Filter) (int64, error)
		f     producer.Filter
	}{
		{"CountRequeue of published events", f.admin.CountRequeue, producer.Filter{Statuses: []string{"published"}}},
		{"CountRequeue of pending events", f.admin.CountRequeue, producer.Filter{Statuses: []string{"pending"}}},
		{"CountPurge of pending events", f.admin.CountPurge, producer.Filter{Statuses: []string{"pending"}}},
		{"CountPurge of failed events", f.admin.CountPurge, producer.Filter{Statuses: []string{"failed", "dead_lettered"}}},
	} {
		if n, err := c.count(ctx, c.f); !errors.Is(err, producer.ErrInvalidFilter) {
			t.Errorf("%s = %d, %v; want ErrInvalidFilter", c.name, n, err)
		}
	}
}

// TestAdminRequeueAndPurgeInATransaction: through an Admin on a pgx.Tx,
// Requeue, Purge and Audit change nothing until the transaction commits,
// and nothing when it rolls back, as a console needs to requeue or purge
// exactly the count an operator confirmed.
func TestAdminRequeueAndPurgeInATransaction(t *testing.T) {
	t.Parallel()
	f := newConsoleFixture(t)
	ctx := context.Background()
	inTx := func(commit bool, fn func(*producer.Admin)) {
		t.Helper()
		tx, err := f.pg.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		admin, err := producer.NewAdmin(tx, producer.AdminConfig{Schema: f.pg.Schema})
		if err != nil {
			t.Fatal(err)
		}
		fn(admin)
		if commit {
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	status := func(id uuid.UUID) string {
		t.Helper()
		rec, err := f.admin.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Status
	}
	requeue := producer.Filter{TenantID: "acme"}
	confirmed, err := f.admin.CountRequeue(ctx, requeue)
	if err != nil || confirmed != 2 {
		t.Fatalf("CountRequeue = %d, %v; want 2", confirmed, err)
	}
	for _, commit := range []bool{false, true} {
		inTx(commit, func(admin *producer.Admin) {
			n, err := admin.Requeue(ctx, requeue)
			if err != nil || n != confirmed {
				t.Fatalf("Requeue in a transaction = %d, %v; want %d", n, err, confirmed)
			}
			if rec, err := admin.Get(ctx, f.i1); err != nil || rec.Status != "pending" {
				t.Fatalf("in the transaction, the dead letter is %q, %v; want pending", rec.Status, err)
			}
			if err := admin.Audit(ctx, producer.AuditEntry{Actor: "ops", Action: "requeue", Count: n}); err != nil {
				t.Fatal(err)
			}
		})
		want := map[bool][2]string{false: {"failed", "dead_lettered"}, true: {"pending", "pending"}}[commit]
		if got := [2]string{status(f.o2), status(f.i1)}; got != want {
			t.Errorf("after the transaction (commit %v): %v, want %v", commit, got, want)
		}
		if log, err := f.admin.AuditLog(ctx, 0, 10); err != nil || len(log) != map[bool]int{false: 0, true: 1}[commit] {
			t.Errorf("after the transaction (commit %v) the audit log holds %d entries, %v", commit, len(log), err)
		}
	}
	for _, commit := range []bool{false, true} {
		inTx(commit, func(admin *producer.Admin) {
			n, err := admin.Purge(ctx, producer.Filter{AggregateID: "o-3"})
			if err != nil || n != 1 {
				t.Fatalf("Purge in a transaction = %d, %v; want 1", n, err)
			}
		})
		want := map[bool]string{false: "dead_lettered", true: ""}[commit]
		rec, err := f.admin.Get(ctx, f.o3)
		if got := rec.Status; got != want || (commit && !errors.Is(err, producer.ErrNotFound)) {
			t.Errorf("after the purge's transaction (commit %v): %q, %v; want %q", commit, got, err, want)
		}
	}
}

// TestAdminListReadsTheHistoryInRangesOfSeq: published events far apart
// in seq (events of other tables, or rolled back, between them) are
// listed in order across the ranges List reads, each page from where the
// last ended, and counted.
func TestAdminListReadsTheHistoryInRangesOfSeq(t *testing.T) {
	t.Parallel()
	pg, _ := setup(t)
	ctx := context.Background()
	seqs := []int64{5, 40_000, 300_000, 2_000_000, 2_000_001}
	for i, seq := range seqs {
		_, err := pg.Pool.Exec(ctx, `INSERT INTO courier_outbox_published (seq, id, topic, partition_key, event_type, payload,
			content_type, created_at, published_at) VALUES ($1, gen_random_uuid(), 'orders', $2, 'OrderCreated', '{}', 'application/json', now(), now())`,
			seq, fmt.Sprintf("k-%d", i))
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pg.Pool.Exec(ctx, "SELECT setval('courier_outbox_seq', 2000001)"); err != nil {
		t.Fatal(err)
	}
	admin := newAdmin(t, pg)
	pub := []string{"published"}
	var seen []int64
	for after := int64(0); ; {
		page, err := admin.List(ctx, producer.Filter{Statuses: pub, Limit: 2, AfterSeq: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			seen = append(seen, r.Seq)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].Seq
	}
	if !slices.Equal(seen, seqs) {
		t.Fatalf("pages of 2 listed seqs %v, want %v", seen, seqs)
	}
	for _, c := range []struct {
		f    producer.Filter
		want []int64
	}{
		{producer.Filter{Statuses: pub, Key: "k-3"}, []int64{2_000_000}},
		{producer.Filter{Statuses: pub, Key: "k-3", AfterSeq: 2_000_000}, nil},
		{producer.Filter{Statuses: pub, AfterSeq: 1_000_000}, []int64{2_000_000, 2_000_001}},
		{producer.Filter{Statuses: pub, Key: "nobody"}, nil},
	} {
		page, err := admin.List(ctx, c.f)
		var got []int64
		for _, r := range page {
			got = append(got, r.Seq)
		}
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("List(%+v) = %v, %v; want %v", c.f, got, err, c.want)
		}
	}
	if n, err := admin.Count(ctx, producer.Filter{Statuses: pub}); err != nil || n != int64(len(seqs)) {
		t.Errorf("Count = %d, %v; want %d", n, err, len(seqs))
	}
}

// TestAdminCountStopsAtCountLimit: Count stops at CountLimit; CountPurge
// and CountRequeue count every event.
func TestAdminCountStopsAtCountLimit(t *testing.T) {
	t.Parallel()
	pg, _ := setup(t)
	ctx := context.Background()
	const n = producer.CountLimit + 5
	_, err := pg.Pool.Exec(ctx, `INSERT INTO courier_outbox_dead (seq, id, topic, event_type, payload, content_type, created_at,
		last_error, dead_lettered_at)
		SELECT g, gen_random_uuid(), 'orders', 'OrderCreated', '{}', 'application/json', now(), 'too large', now()
		FROM generate_series(1, $1) AS g`, n)
	if err != nil {
		t.Fatal(err)
	}
	admin := newAdmin(t, pg)
	if got, err := admin.Count(ctx, producer.Filter{}); err != nil || got != producer.CountLimit {
		t.Errorf("Count = %d, %v; want CountLimit (%d)", got, err, producer.CountLimit)
	}
	if got, err := admin.Count(ctx, producer.Filter{IDs: []uuid.UUID{uuid.New()}}); err != nil || got != 0 {
		t.Errorf("Count of an unknown id = %d, %v; want 0", got, err)
	}
	if got, err := admin.CountPurge(ctx, producer.Filter{}); err != nil || got != n {
		t.Errorf("CountPurge = %d, %v; want %d", got, err, n)
	}
	if got, err := admin.CountRequeue(ctx, producer.Filter{ErrorContains: "LARGE"}); err != nil || got != n {
		t.Errorf("CountRequeue = %d, %v; want %d", got, err, n)
	}
}

// TestAdminEstimatesALargeHistory: beyond ExactPublishedLimit published
// events, Stats estimates their count from the planner's statistics, and
// says so; below, it counts.
func TestAdminEstimatesALargeHistory(t *testing.T) {
	t.Parallel()
	pg, _ := setup(t)
	ctx := context.Background()
	admin := newAdmin(t, pg)
	publish := func(from, to int) {
		t.Helper()
		_, err := pg.Pool.Exec(ctx, `INSERT INTO courier_outbox_published (seq, id, topic, event_type, payload, content_type,
			created_at, published_at)
			SELECT g, gen_random_uuid(), 'orders', 'OrderCreated', '{}', 'application/json', now(), now()
			FROM generate_series($1::bigint, $2) AS g`, from, to)
		if err != nil {
			t.Fatal(err)
		}
	}
	publish(1, producer.ExactPublishedLimit)
	if s, err := admin.Stats(ctx); err != nil || s.Counts["published"] != producer.ExactPublishedLimit || s.PublishedEstimated {
		t.Fatalf("Stats of %d published events = %v, estimated %v, %v; want them counted", producer.ExactPublishedLimit,
			s.Counts, s.PublishedEstimated, err)
	}
	const n = producer.ExactPublishedLimit * 3 / 2
	publish(producer.ExactPublishedLimit+1, n)
	if _, err := pg.Pool.Exec(ctx, "ANALYZE courier_outbox_published"); err != nil {
		t.Fatal(err)
	}
	s, err := admin.Stats(ctx)
	if got := s.Counts["published"]; err != nil || !s.PublishedEstimated || got < n*9/10 || got > n*11/10 {
		t.Fatalf("Stats of %d published events = %d, estimated %v, %v; want an estimate within 10%%", n, got, s.PublishedEstimated, err)
	}
}

// TestAdminRefusesHostileFilters: a status that does not exist, text no
// event could hold (NUL, bytes that are not UTF-8, longer than Enqueue
// takes) are refused with ErrInvalidFilter before any SQL, by every call
// that takes a Filter.
func TestAdminRefusesHostileFilters(t *testing.T) {
	t.Parallel()
	admin := refusingAdmin(t)
	ctx := context.Background()
	calls := map[string]func(producer.Filter) error{
		"List":         func(f producer.Filter) error { _, err := admin.List(ctx, f); return err },
		"Count":        func(f producer.Filter) error { _, err := admin.Count(ctx, f); return err },
		"CountRequeue": func(f producer.Filter) error { _, err := admin.CountRequeue(ctx, f); return err },
		"CountPurge":   func(f producer.Filter) error { _, err := admin.CountPurge(ctx, f); return err },
		"Requeue":      func(f producer.Filter) error { _, err := admin.Requeue(ctx, f); return err },
		"Purge":        func(f producer.Filter) error { _, err := admin.Purge(ctx, f); return err },
	}
	for name, f := range map[string]producer.Filter{
		"unknown status":            {Statuses: []string{"lost"}},
		"status with NUL":           {Statuses: []string{"dead_lettered\x00"}},
		"NUL in topic":              {Topic: "orders\x00"},
		"NUL in key":                {Key: "o-1\x00; DROP TABLE courier_outbox"},
		"NUL in tenant":             {TenantID: "\x00"},
		"NUL in aggregate type":     {AggregateType: "Order\x00"},
		"NUL in aggregate id":       {AggregateID: "a\x00b"},
		"NUL in error text":         {ErrorContains: "too\x00large"},
		"tenant not UTF-8":          {TenantID: "acme\xff"},
		"aggregate id not UTF-8":    {AggregateID: "\xc3\x28"},
		"topic longer than Kafka's": {Topic: strings.Repeat("t", 250)},
		"key too long":              {Key: strings.Repeat("k", producer.MaxKeyBytes+1)},
		"tenant too long":           {TenantID: strings.Repeat("t", producer.MaxAttributeBytes+1)},
		"error text too long":       {ErrorContains: strings.Repeat("e", 5000)},
	} {
		for call, run := range calls {
			if err := run(f); !errors.Is(err, producer.ErrInvalidFilter) {
				t.Errorf("%s with %s: %v, want ErrInvalidFilter", call, name, err)
			}
		}
	}
	err := calls["List"](producer.Filter{TenantID: "a\x00"})
	if !strings.Contains(fmt.Sprint(err), "TenantID") || strings.ContainsRune(fmt.Sprint(err), 0) {
		t.Errorf("the error %q should name the field and show the NUL escaped", err)
	}
}

// TestActivityTalliesWhatTheRelaysPublish: every event a relay publishes,
// from the queue or from waiting, keeping it or not, counts once in the
// current minute of Activity, with its lag from enqueue; every other step
// is 0.
func TestActivityTalliesWhatTheRelaysPublish(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	admin := newAdmin(t, pg)
	before := time.Now()
	for i := range 4 {
		enqueue(t, pg, out, orderCreated(fmt.Sprintf("o-%d", i)))
	}
	retried := enqueue(t, pg, out, orderCreated("o-retried"))
	pub := &fakePublisher{}
	pub.setFail(failID(retried, sarama.ErrInvalidMessage))
	runOnce(t, newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub}))
	pub.setFail(nil)
	if n, err := admin.Requeue(ctx, producer.Filter{IDs: []uuid.UUID{retried}}); err != nil || n != 1 {
		t.Fatalf("Requeue = %d, %v", n, err)
	}
	runOnce(t, newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub})) // from waiting
	enqueue(t, pg, out, orderCreated("o-discarded"))
	runOnce(t, newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, DiscardPublished: true}))
	took := time.Since(before)

	points, err := admin.Activity(ctx, time.Hour, time.Minute)
	if err != nil || len(points) != 60 {
		t.Fatalf("Activity(1h, 1m) = %d points, %v; want 60", len(points), err)
	}
	var total int64
	for i, p := range points {
		total += p.Published
		if p.At.Second() != 0 || p.At.Nanosecond() != 0 || (i > 0 && p.At.Sub(points[i-1].At) != time.Minute) {
			t.Errorf("point %d at %v: want whole minutes, a minute apart", i, p.At)
		}
		if p.Published == 0 && (p.MeanLag != 0 || p.MaxLag != 0) {
			t.Errorf("point %d without events has lags %v and %v", i, p.MeanLag, p.MaxLag)
		}
		if p.Published > 0 && (p.MeanLag <= 0 || p.MaxLag < p.MeanLag || p.MaxLag > took+time.Second) {
			t.Errorf("point %d: %d events, mean lag %v, max %v; want 0 < mean <= max <= %v", i, p.Published, p.MeanLag, p.MaxLag, took)
		}
	}
	if last := points[len(points)-1]; total != 6 || time.Since(last.At) > 2*time.Minute || time.Until(last.At) > 0 {
		t.Fatalf("Activity counted %d events, the last step at %v; want 6, the last step now", total, last.At)
	}
	five, err := admin.Activity(ctx, time.Hour, 5*time.Minute)
	if err != nil || len(five) != 12 || five[11].At.Minute()%5 != 0 || five[11].Published+five[10].Published != 6 {
		t.Fatalf("Activity(1h, 5m) = %+v, %v; want 12 points on multiples of 5 minutes, the events in the last two", five, err)
	}
}

// TestActivityCountsConcurrentWorkersAndExpires: relay workers running at
// once tally every event; rows of activity past retention go with the
// published events.
func TestActivityCountsConcurrentWorkersAndExpires(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	admin := newAdmin(t, pg)
	if _, err := pg.Pool.Exec(ctx, `INSERT INTO courier_outbox_activity (minute, shard, published, lag_sum_seconds, lag_max_seconds)
		VALUES (date_trunc('minute', now()) - interval '8 days', 0, 7, 1, 1)`); err != nil {
		t.Fatal(err)
	}
	const events = 400
	for i := range events {
		enqueue(t, pg, out, orderCreated(fmt.Sprintf("o-%d", i%50)))
	}
	runRelay(t, newRelay(t, pg, nil, producer.RelayConfig{Publisher: &fakePublisher{}, Workers: 4, BatchSize: 10}))
	runRelay(t, newRelay(t, pg, nil, producer.RelayConfig{Publisher: &fakePublisher{}, Workers: 4, BatchSize: 10}))
	testkit.WaitFor(t, 30*time.Second, "every event published", func() bool { return countRows(t, pg.Pool, "status = 'published'") == events })
	sum := func() int64 {
		t.Helper()
		points, err := admin.Activity(ctx, time.Hour, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, p := range points {
			n += p.Published
		}
		return n
	}
	if n := sum(); n != events {
		t.Fatalf("Activity counted %d events, want %d", n, events)
	}
	if _, err := admin.Cleanup(ctx, producer.DefaultRetention); err != nil {
		t.Fatal(err)
	}
	var rows, old int
	if err := pg.Pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE minute < now() - interval '7 days') FROM courier_outbox_activity").
		Scan(&rows, &old); err != nil || old != 0 || rows == 0 {
		t.Fatalf("after Cleanup the activity holds %d rows, %d of them past retention, %v; want the recent ones only", rows, old, err)
	}
	if n := sum(); n != events {
		t.Fatalf("after Cleanup Activity counts %d events, want %d", n, events)
	}
}

// TestActivityRefusesBadSteps: a window or step that is not a positive
// whole number of minutes, a window that is not a whole number of steps,
// or more than MaxActivityPoints points, are refused before any SQL.
func TestActivityRefusesBadSteps(t *testing.T) {
	t.Parallel()
	admin := refusingAdmin(t)
	for _, c := range []struct{ window, step time.Duration }{
		{-time.Hour, time.Minute}, {time.Hour, -time.Minute}, {time.Hour, 0}, {0, time.Minute},
		{time.Hour, 30 * time.Second}, {time.Hour, 90 * time.Second}, {90 * time.Minute, time.Hour},
		{time.Minute, time.Hour}, {2 * 24 * time.Hour, time.Minute}, {time.Duration(1<<63 - 1), time.Minute},
	} {
		if _, err := admin.Activity(context.Background(), c.window, c.step); !errors.Is(err, producer.ErrInvalidFilter) {
			t.Errorf("Activity(%v, %v) = %v, want ErrInvalidFilter", c.window, c.step, err)
		}
	}
}

func TestDeadLetterGroups(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	deadLetter := func(topic, lastError string, minutesAgo int) {
		t.Helper()
		id := enqueue(t, pg, out, producer.Event{Topic: topic, Key: "k", Type: "T", Payload: []byte(`{}`)})
		_, err := pg.Pool.Exec(ctx, `WITH m AS (DELETE FROM courier_outbox WHERE id = $1 RETURNING *)
			INSERT INTO courier_outbox_dead (seq, id, topic, partition_key, event_type, payload, content_type, created_at,
				retry_count, last_error, dead_lettered_at)
			SELECT seq, id, topic, partition_key, event_type, payload, content_type, created_at, 1, $2,
				date_trunc('minute', now()) - $3 * interval '1 minute' FROM m`, id, lastError, minutesAgo)
		if err != nil {
			t.Fatal(err)
		}
	}
	deadLetter("orders", "too large", 30)
	deadLetter("orders", "too large", 10)
	deadLetter("orders", "too large", 20)
	deadLetter("invoices", "too large", 5)
	deadLetter("invoices", "too large", 6)
	deadLetter("orders", "invalid topic", 1)
	admin := newAdmin(t, pg)
	groups, err := admin.DeadLetterGroups(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, g := range groups {
		got = append(got, fmt.Sprintf("%s/%s/%d/%v", g.Topic, g.Error, g.Count, g.Newest.Sub(g.Oldest)))
	}
	want := []string{"orders/too large/3/20m0s", "invoices/too large/2/1m0s", "orders/invalid topic/1/0s"}
	if !slices.Equal(got, want) {
		t.Fatalf("DeadLetterGroups = %v, want %v", got, want)
	}
	if top, err := admin.DeadLetterGroups(ctx, 1); err != nil || len(top) != 1 || top[0].Count != 3 {
		t.Fatalf("DeadLetterGroups(1) = %+v, %v; want the largest group", top, err)
	}
	refusing := refusingAdmin(t)
	for _, limit := range []int{0, -1, producer.MaxPage + 1} {
		if _, err := refusing.DeadLetterGroups(ctx, limit); !errors.Is(err, producer.ErrInvalidFilter) {
			t.Errorf("DeadLetterGroups(%d) = %v, want ErrInvalidFilter", limit, err)
		}
	}
}
