package producer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// TestRetentionDropsDayPartitionsWhileRelaysRun gives the history five days
// of old published events (6 to 10 days ago), each day in its partition,
// then runs two relays with a retention of 7 days whose upkeep runs every
// 20ms, while events keep being enqueued and published. The days wholly
// past retention (8 to 10 days ago) are dropped whole, each by exactly one
// of the relays; the days that are not stay with their events; and every
// event enqueued meanwhile is published.
func TestRetentionDropsDayPartitionsWhileRelaysRun(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ctx := context.Background()
	var today time.Time
	if err := pg.Pool.QueryRow(ctx, "SELECT date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'").Scan(&today); err != nil {
		t.Fatal(err)
	}
	const perDay = 500
	var old []string // the partitions past 7 days
	for ago := 6; ago <= 10; ago++ {
		day := today.AddDate(0, 0, -ago)
		name := "courier_outbox_published_p" + day.Format("20060102")
		if ago > 7 { // the day ends more than 7 days ago
			old = append(old, name)
		}
		_, err := pg.Pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s PARTITION OF courier_outbox_published FOR VALUES FROM ('%[2]s') TO ('%[3]s');
			INSERT INTO courier_outbox_published (seq, id, topic, event_type, payload, content_type, created_at, published_at)
			SELECT -g, gen_random_uuid(), 'orders', 'OrderCreated', '{}', 'application/json', '%[2]s', '%[2]s'::timestamptz + g * interval '1 second'
			FROM generate_series(1, %[4]d) g`, name, day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339), perDay))
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(old)

	k := testkit.NewKafka(t)
	topic := k.Topic(t, 3)
	c := consume(t, k, topic)
	logs := &testkit.Buffer{}
	for range 2 {
		runRelay(t, newRelay(t, pg, k, producer.RelayConfig{Retention: 7 * 24 * time.Hour, CleanupInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.NewJSONHandler(logs, nil))}))
	}
	partition := func(name string) bool {
		var ok bool
		if err := pg.Pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	const events = 300
	for i := range events {
		ev := orderCreated(fmt.Sprintf("o-%d", i%20))
		ev.Topic = topic
		enqueue(t, pg, out, ev)
	}
	testkit.WaitFor(t, 30*time.Second, "the days past retention to be dropped", func() bool {
		return !slices.ContainsFunc(old, partition)
	})
	c.waitDistinct(events, 30*time.Second)
	testkit.WaitFor(t, 30*time.Second, "every event recorded as published", func() bool {
		return countRows(t, pg.Pool, "status <> 'published'") == 0
	})
	if n := countRows(t, pg.Pool, "published_at < $1", today.AddDate(0, 0, -5)); n != 2*perDay {
		t.Errorf("%d old events left, want the %d of the days 6 and 7 days ago, which are not wholly past retention", n, 2*perDay)
	}

	// Each dropped partition was dropped once, by one relay, which counted
	// its events.
	var dropped []string
	var removed float64
	for _, line := range logs.Lines() {
		var rec struct {
			Msg        string   `json:"msg"`
			Events     float64  `json:"events"`
			Partitions []string `json:"partitions"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "removed published events past retention" {
			dropped = append(dropped, rec.Partitions...)
			removed += rec.Events
		}
	}
	slices.Sort(dropped)
	if !slices.Equal(dropped, old) || removed != float64(len(old)*perDay) {
		t.Errorf("the relays dropped %v with %v events, want %v once each with %d events", dropped, removed, old, len(old)*perDay)
	}
}

// TestDiscardPublishedKeepsNoHistory: with DiscardPublished, a published
// event leaves the outbox at once, and a failed one still waits for its
// retry.
func TestDiscardPublishedKeepsNoHistory(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	pub := &fakePublisher{}
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, DiscardPublished: true})
	sent := enqueue(t, pg, out, orderCreated("o-1"))
	failing := enqueue(t, pg, out, orderCreated("o-2"))
	pub.setFail(func(m *record.Record) error {
		if recordHeader(m, producer.HeaderID) == failing.String() {
			return sarama.ErrInvalidMessage
		}
		return nil
	})
	if res := runOnce(t, relay); res.Published != 1 || res.Failed != 1 {
		t.Fatalf("batch %+v, want one published and one failed", res)
	}
	if got := pub.ackedIDs("orders"); !slices.Equal(got, []string{sent.String()}) {
		t.Fatalf("published %v, want %s", got, sent)
	}
	if n := countRows(t, pg.Pool, "true"); n != 1 {
		t.Fatalf("%d events left in the outbox, want only the failed one", n)
	}
	if row := rowOf(t, pg, failing); row.Status != producer.StatusFailed || row.Attempts != 1 {
		t.Fatalf("the failed event: %+v, want failed after one attempt", row)
	}
}
