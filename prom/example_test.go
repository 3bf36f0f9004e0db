package prom_test

import (
	"fmt"
	"log"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sony/gobreaker/v2"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/prom"
)

// Register the relay's metrics and hand them to the relay as
// one of producer.RelayConfig.Hooks. Here the hooks are called by hand to show
// what they expose.
func ExampleNewRelayMetrics() {
	reg := prometheus.NewRegistry() // or prometheus.DefaultRegisterer
	metrics, err := prom.NewRelayMetrics(reg, prom.Config{})
	if err != nil {
		log.Fatal(err)
	}
	_ = producer.RelayConfig{Hooks: []producer.Hook{metrics}}

	// What the relay reports while it works:
	metrics.Claimed(2)
	metrics.Batch(2, producer.BatchStages{Claim: time.Millisecond, Publish: 6 * time.Millisecond, Settle: time.Millisecond})
	metrics.Published("orders", 40*time.Millisecond)
	metrics.PublishFailed("orders", "retriable")
	metrics.DeadLettered("orders")
	metrics.BreakerChanged(producer.BreakerOpen)
	metrics.Backlog(12, 3*time.Second)

	families, err := reg.Gather() // sorted by name
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		fmt.Println(f.GetName())
	}
	n, err := testutil.GatherAndCount(reg, prom.NamePublished)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("published series:", n)
	// Output:
	// courier_outbox_batch_stage_seconds
	// courier_outbox_breaker_state
	// courier_outbox_claimed_events_total
	// courier_outbox_claims_total
	// courier_outbox_dead_lettered_total
	// courier_outbox_failures_total
	// courier_outbox_oldest_pending_age_seconds
	// courier_outbox_pending
	// courier_outbox_publish_latency_seconds
	// courier_outbox_published_total
	// published series: 1
}

// Two relays draining different outbox tables share one registry: Table
// sets a constant table label that keeps their series apart.
func ExampleConfig_table() {
	reg := prometheus.NewRegistry()
	shop, err := prom.NewRelayMetrics(reg, prom.Config{Table: "shop.courier_outbox"})
	if err != nil {
		log.Fatal(err)
	}
	billing, err := prom.NewRelayMetrics(reg, prom.Config{Table: "billing.courier_outbox"})
	if err != nil {
		log.Fatal(err)
	}
	shop.Published("orders", time.Second)
	billing.Published("invoices", time.Second)

	printCounter(reg, prom.NamePublished)

	// A third RelayMetrics for the same table collides.
	_, err = prom.NewRelayMetrics(reg, prom.Config{Table: "shop.courier_outbox"})
	fmt.Println("duplicate:", err != nil)
	// Output:
	// table=billing.courier_outbox topic=invoices 1
	// table=shop.courier_outbox topic=orders 1
	// duplicate: true
}

// Register the consumer's metrics and hand them to the consumer and to the
// breakers its handlers use. Here the hooks are called by hand to show what
// they expose.
func ExampleNewConsumerMetrics() {
	reg := prometheus.NewRegistry()
	metrics, err := prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Group: "payouts"})
	if err != nil {
		log.Fatal(err)
	}
	_ = consumer.Config{Hooks: []consumer.Hook{metrics}}
	_ = consumer.BreakerConfig{Name: "psp", Hooks: []consumer.Hook{metrics}}

	metrics.Message("payouts", consumer.OutcomeHandled)
	metrics.HandlerDuration("payouts", 12*time.Millisecond)
	metrics.InFlight("payouts", 1)
	metrics.BreakerChanged("psp", gobreaker.StateOpen)
	metrics.Lag("payouts", 0, 3)
	metrics.OldestInFlight("payouts", 0, 2*time.Second)

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		fmt.Println(f.GetName())
	}
	// Output:
	// courier_consumer_breaker_state
	// courier_consumer_handler_seconds
	// courier_consumer_inflight
	// courier_consumer_lag
	// courier_consumer_messages_total
	// courier_consumer_oldest_in_flight_seconds
}
