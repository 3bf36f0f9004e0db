package producer_test

import (
	"testing"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// TestRelayStartsWhileKafkaIsDown: a relay pointed at a closed port starts,
// counts no attempts, and stops cleanly.
func TestRelayStartsWhileKafkaIsDown(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	id := enqueue(t, pg, out, orderCreated("o-1"))
	saramaCfg := producer.NewSaramaConfig()
	saramaCfg.Metadata.Retry.Max = 0
	relay, err := producer.NewRelay(pg.Pool, producer.RelayConfig{Schema: pg.Schema, Brokers: []string{"127.0.0.1:1"},
		Sarama: saramaCfg, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	res := runOnce(t, relay)
	if res.Deferred != 1 {
		t.Fatalf("batch %+v, want the event deferred", res)
	}
	if row := rowOf(t, pg, id); row.Attempts != 0 || row.Status != producer.StatusPending {
		t.Fatalf("row %+v, want untouched", row)
	}
}
