package retrytopics_test

import (
	"fmt"
	"log"
	"time"

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
