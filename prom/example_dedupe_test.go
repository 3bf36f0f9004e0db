package prom_test

import (
	"fmt"
	"log"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/prom"
)

// Register the deduplication metrics beside the consumer's and hand them to
// the consumer's DedupeConfig. Here the hooks are called by hand to show
// what they expose.
func ExampleNewDedupeMetrics() {
	reg := prometheus.NewRegistry()
	metrics, err := prom.NewDedupeMetrics(reg, prom.DedupeConfig{Group: "payouts"})
	if err != nil {
		log.Fatal(err)
	}
	_ = consumer.DedupeConfig{Hooks: []dedupe.Hook{metrics} /* Store: a dedupe.Redis or dedupe.Inbox */}

	// What the consumer reports around its store:
	metrics.Latency(dedupe.OpClaim, 256, 800*time.Microsecond)
	metrics.Hits(3)
	metrics.Error(dedupe.OpDone)

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		fmt.Println(f.GetName(), len(f.GetMetric()), "series")
	}
	// Output:
	// courier_dedupe_errors_total 4 series
	// courier_dedupe_fail_open_total 1 series
	// courier_dedupe_hits_total 1 series
	// courier_dedupe_seconds 4 series
}
