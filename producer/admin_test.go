package producer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// adminFixture is an outbox holding events in every status.
type adminFixture struct {
	pg                            *testkit.PG
	admin                         *producer.Admin
	pending, failed, dead, pubbed uuid.UUID
	deadOther                     uuid.UUID
}

func newAdminFixture(t *testing.T) adminFixture {
	t.Helper()
	pg, out := setup(t)
	clock := newFakeClock()
	pub := &fakePublisher{}
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, Now: clock.Now})
	f := adminFixture{pg: pg}
	f.pubbed = enqueue(t, pg, out, orderCreated("o-1"))
	failing := orderCreated("o-2")
	f.failed = enqueue(t, pg, out, failing)
	poison := orderCreated("o-3")
	f.dead = enqueue(t, pg, out, poison)
	other := orderCreated("o-4")
	other.Topic = "invoices"
	f.deadOther = enqueue(t, pg, out, other)
	pub.setFail(func(m *record.Record) error {
		switch recordHeader(m, producer.HeaderID) {
		case f.failed.String():
			return sarama.ErrInvalidMessage
		case f.dead.String():
			return sarama.ErrMessageSizeTooLarge
		case f.deadOther.String():
			return sarama.ErrInvalidTopic
		}
		return nil
	})
	runOnce(t, relay)
	later := orderCreated("o-5")
	later.NotBefore = time.Now().Add(time.Hour)
	f.pending = enqueue(t, pg, out, later)
	admin := newAdmin(t, pg)
	f.admin = admin
	return f
}

func ids(records []producer.Record) []uuid.UUID {
	var out []uuid.UUID
	for _, r := range records {
		out = append(out, r.ID)
	}
	return out
}

func TestAdminStatsAndList(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t)
	ctx := context.Background()
	stats, err := f.admin.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"pending": 1, "failed": 1, "published": 1, "dead_lettered": 2}
	for status, n := range want {
		if stats.Counts[status] != n {
			t.Errorf("Counts[%s] = %d, want %d (all: %v)", status, stats.Counts[status], n, stats.Counts)
		}
	}
	// The failed event's retry is due in 1s of the relay's fake clock, in 2030: nothing is due now.
	if !stats.OldestDue.IsZero() {
		t.Errorf("OldestDue = %v, want none due", stats.OldestDue)
	}

	for name, tc := range map[string]struct {
		filter producer.Filter
		want   []uuid.UUID
	}{
		"default: failed and dead":  {producer.Filter{}, []uuid.UUID{f.failed, f.dead, f.deadOther}},
		"dead only":                 {producer.Filter{Statuses: []string{"dead_lettered"}}, []uuid.UUID{f.dead, f.deadOther}},
		"by topic":                  {producer.Filter{Topic: "invoices"}, []uuid.UUID{f.deadOther}},
		"by key":                    {producer.Filter{Key: "o-2"}, []uuid.UUID{f.failed}},
		"by error, any case":        {producer.Filter{ErrorContains: "TOO LARGE"}, []uuid.UUID{f.dead}},
		"pending by status":         {producer.Filter{Statuses: []string{"pending"}}, []uuid.UUID{f.pending}},
		"since the future":          {producer.Filter{Since: time.Now().AddDate(20, 0, 0)}, nil},
		"until the fake 2030 clock": {producer.Filter{Until: time.Date(2030, 1, 1, 13, 0, 0, 0, time.UTC)}, []uuid.UUID{f.failed, f.dead, f.deadOther}},
		"page of one":               {producer.Filter{Limit: 1}, []uuid.UUID{f.failed}},
	} {
		got, err := f.admin.List(ctx, tc.filter)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if gotIDs := ids(got); len(gotIDs) != len(tc.want) || (len(gotIDs) > 0 && gotIDs[0] != tc.want[0]) {
			t.Errorf("%s: List = %v, want %v", name, gotIDs, tc.want)
		}
	}
	first, _ := f.admin.List(ctx, producer.Filter{Limit: 1})
	next, err := f.admin.List(ctx, producer.Filter{Limit: 10, AfterSeq: first[0].Seq})
	if err != nil || len(next) != 2 || next[0].ID != f.dead {
		t.Fatalf("next page = %v, %v; want the two dead letters", ids(next), err)
	}

	rec, err := f.admin.Get(ctx, f.dead)
	if err != nil || rec.Status != "dead_lettered" || rec.Attempts != 1 || rec.LastError == nil || rec.Key == nil || *rec.Key != "o-3" {
		t.Fatalf("Get = %+v, %v", rec, err)
	}
	if _, err := f.admin.Get(ctx, uuid.New()); !errors.Is(err, producer.ErrNotFound) {
		t.Fatalf("Get(unknown) = %v, want ErrNotFound", err)
	}
	if _, err := f.admin.List(ctx, producer.Filter{Statuses: []string{"lost"}}); !errors.Is(err, producer.ErrInvalidFilter) {
		t.Fatalf("List with a bad status = %v, want ErrInvalidFilter", err)
	}
}

func TestAdminRequeueResetsAndWakesTheRelays(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t)
	ctx := context.Background()
	sequence := func() (v int64) {
		t.Helper()
		if err := f.pg.Pool.QueryRow(ctx, "SELECT last_value FROM courier_outbox_seq").Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := sequence()
	n, err := f.admin.Requeue(ctx, producer.Filter{Topic: "orders"})
	if err != nil || n != 2 {
		t.Fatalf("Requeue(topic orders) = %d, %v; want the failed and the dead-lettered event", n, err)
	}
	// The relays' probe watches the queue's sequence.
	if after := sequence(); after <= before {
		t.Fatalf("no wake-up for the relays after requeue: the sequence stayed at %d", after)
	}
	for _, id := range []uuid.UUID{f.failed, f.dead} {
		rec, err := f.admin.Get(ctx, id)
		if err != nil || rec.Status != "pending" || rec.Attempts != 0 || rec.FirstFailedAt != nil || time.Since(rec.NextAttemptAt) < 0 {
			t.Fatalf("requeued event %+v, %v: want pending, retry_count 0, due now", rec, err)
		}
	}
	if rec, _ := f.admin.Get(ctx, f.deadOther); rec.Status != "dead_lettered" {
		t.Fatalf("requeue by topic touched another topic's event: %s", rec.Status)
	}
	if _, err := f.admin.Requeue(ctx, producer.Filter{Statuses: []string{"published"}}); !errors.Is(err, producer.ErrInvalidFilter) {
		t.Fatalf("Requeue of published events = %v, want ErrInvalidFilter", err)
	}
}

func TestAdminPurgeNeverTouchesLiveEvents(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t)
	ctx := context.Background()
	for _, status := range []string{"pending", "failed"} {
		if _, err := f.admin.Purge(ctx, producer.Filter{Statuses: []string{status}}); !errors.Is(err, producer.ErrInvalidFilter) {
			t.Fatalf("Purge of %s events = %v, want ErrInvalidFilter", status, err)
		}
	}
	n, err := f.admin.Purge(ctx, producer.Filter{Key: "o-3"})
	if err != nil || n != 1 {
		t.Fatalf("Purge(key o-3) = %d, %v; want 1", n, err)
	}
	n, err = f.admin.Purge(ctx, producer.Filter{})
	if err != nil || n != 1 {
		t.Fatalf("Purge() = %d, %v; want the other dead letter", n, err)
	}
	if c := countRows(t, f.pg.Pool, "true"); c != 3 {
		t.Fatalf("%d rows left, want the pending, failed and published ones", c)
	}
}

func TestRetentionDeletesOnlyOldPublishedEvents(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t)
	ctx := context.Background()
	if _, err := f.pg.Pool.Exec(ctx, "UPDATE courier_outbox_published SET published_at = now() - interval '8 days' WHERE id = $1", f.pubbed); err != nil {
		t.Fatal(err)
	}
	if n, err := f.admin.Cleanup(ctx, producer.DefaultRetention); err != nil || n != 1 {
		t.Fatalf("Cleanup = %d, %v; want the one event published 8 days ago", n, err)
	}
	if c := countRows(t, f.pg.Pool, "status = 'dead_lettered'"); c != 2 {
		t.Fatalf("retention deleted dead letters: %d left, want 2", c)
	}
}

// TestRelayRunsRetentionInBatches: the relay's own cleanup deletes every
// expired event even when they take several bounded deletes.
func TestRelayRunsRetentionInBatches(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	for range 35 {
		enqueue(t, pg, out, orderCreated("o-1"))
	}
	pub := &fakePublisher{}
	clock := newFakeClock()
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, Now: clock.Now, CleanupBatch: 10,
		CleanupInterval: 10 * time.Millisecond, Retention: time.Hour})
	for countRows(t, pg.Pool, "status = 'pending'") > 0 {
		runOnce(t, relay)
	}
	clock.Advance(2 * time.Hour)
	runRelay(t, relay)
	testkit.WaitFor(t, 10*time.Second, "retention to delete all 35 events", func() bool { return countRows(t, pg.Pool, "true") == 0 })
}
