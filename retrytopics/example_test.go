package retrytopics_test

import (
	"fmt"
	"log"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/record"
	"github.com/courierkit/courier/retrytopics"
)

// The retry tiers of "orders": equal delays share a topic.
func ExampleNew() {
	topo, err := retrytopics.New("orders", retrytopics.Config{
		Delays: []time.Duration{5 * time.Second, time.Minute, time.Minute, 10 * time.Minute},
	}, "")
	if err != nil {
		log.Fatal(err)
	}
	for _, tier := range topo.Tiers {
		fmt.Printf("tier %d: %s after %v\n", tier.Round, tier.Topic, tier.Delay)
	}
	fmt.Println("then:", topo.DeadLetter)
	fmt.Println("topics to create:", topo.Topics())
	// Output:
	// tier 1: orders.retry.5s after 5s
	// tier 2: orders.retry.1m after 1m0s
	// tier 3: orders.retry.1m after 1m0s
	// tier 4: orders.retry.10m after 10m0s
	// then: orders.dlq
	// topics to create: [orders.retry.5s orders.retry.1m orders.retry.10m]
}

// The headers of a record moving to its second tier, and back.
func ExampleHeaders() {
	original := []*record.Header{{Key: []byte("ce_id"), Value: []byte("0195f3c4-0000-7000-8000-000000000001")}}
	failed := time.Date(2026, 1, 16, 9, 59, 59, 0, time.UTC)
	headers := retrytopics.Headers(original, retrytopics.Info{
		Round: 2, FailedAttempts: 6, OriginalTopic: "orders", OriginalPartition: 3, OriginalOffset: 1842,
		NotBefore: failed.Add(time.Minute), FirstFailedAt: failed, LastError: "psp timeout", ConsumerGroup: "payouts",
	})
	for _, h := range headers {
		fmt.Printf("%s=%s\n", h.Key, h.Value)
	}
	in := make([]*record.Header, len(headers))
	for i := range headers {
		in[i] = &headers[i]
	}
	info, _, err := retrytopics.Parse(in)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("due:", info.NotBefore.UTC().Format(time.RFC3339), "next attempt:", info.FailedAttempts+1)
	// Output:
	// ce_id=0195f3c4-0000-7000-8000-000000000001
	// retry_attempt=2
	// retry_failed_attempts=6
	// retry_original_topic=orders
	// retry_original_partition=3
	// retry_original_offset=1842
	// retry_not_before=1768557659000
	// retry_first_failed_at=1768557599000
	// retry_last_error=psp timeout
	// retry_consumer_group=payouts
	// due: 2026-01-16T10:00:59Z next attempt: 7
}

// A dead letter the group payouts gave up on, replayed to payouts alone:
// into the first tier of its topic, due now, naming the group, which the
// other groups reading the tier leave alone. dlq.Replay writes it (with
// Route: topo.ReplayToGroup, or retrytopics.ReplayRoute for a dead-letter
// topic of several topics) and adds replay_count.
func ExampleTopology_ReplayToGroup() {
	topo, err := retrytopics.New("payouts", retrytopics.Config{Delays: []time.Duration{5 * time.Second, time.Minute}}, "")
	if err != nil {
		log.Fatal(err)
	}
	failed := time.Date(2026, 1, 16, 9, 59, 59, 0, time.UTC)
	env, err := dlq.New(dlq.Original{Topic: "payouts", Partition: 3, Offset: 1842, Key: []byte("order-3"), Value: []byte(`{"amount_cents":4200}`),
		Headers: []dlq.Header{{Key: []byte("ce_id"), Value: []byte("0195f3c4-0000-7000-8000-000000000003")}}},
		dlq.Failure{Error: "psp timeout after 30s", Kind: dlq.KindRetriesExhausted, Attempts: 6, FailedAt: failed, FirstFailedAt: failed, ConsumerGroup: "payouts"})
	if err != nil {
		log.Fatal(err)
	}
	rec, err := topo.ReplayToGroup(env)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("to %s partition %d, key %s\n", rec.Topic, rec.Partition, rec.Key)
	for _, h := range rec.Headers {
		if string(h.Key) == retrytopics.HeaderNotBefore {
			h.Value = []byte("(now)")
		}
		fmt.Printf("%s=%s\n", h.Key, h.Value)
	}

	relay, _ := dlq.New(dlq.Original{Topic: "payouts", Partition: dlq.NoPartition, Offset: dlq.NoOffset},
		dlq.Failure{Error: "record too large", Kind: dlq.KindPermanent})
	_, err = topo.ReplayToGroup(relay)
	fmt.Println(err)
	// Output:
	// to payouts.retry.5s partition 3, key order-3
	// ce_id=0195f3c4-0000-7000-8000-000000000003
	// retry_attempt=1
	// retry_failed_attempts=6
	// retry_original_topic=payouts
	// retry_original_partition=3
	// retry_original_offset=1842
	// retry_not_before=(now)
	// retry_first_failed_at=1768557599000
	// retry_last_error=psp timeout after 30s
	// retry_consumer_group=payouts
	// retrytopics: cannot replay to the failed group: the dead letter names no consumer group: the relay dead-lettered it before it reached Kafka; replay it to its topic
}
