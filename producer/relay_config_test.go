package producer_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

func TestNewRelayRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	brokers := []string{"localhost:9092"}
	for _, tc := range []struct {
		cfg   producer.RelayConfig
		field string
	}{
		{producer.RelayConfig{}, "Brokers"},
		{producer.RelayConfig{Brokers: brokers, Schema: "Bad"}, "Schema"},
		{producer.RelayConfig{Brokers: brokers, BatchSize: -1}, "BatchSize"},
		{producer.RelayConfig{Brokers: brokers, Workers: -1}, "Workers"},
		{producer.RelayConfig{Brokers: brokers, Workers: 65}, "Workers"},
		{producer.RelayConfig{Brokers: brokers, PollInterval: -time.Second}, "PollInterval"},
		{producer.RelayConfig{Brokers: brokers, MaxRetries: -2}, "MaxRetries"},
		{producer.RelayConfig{Brokers: brokers, Backoff: producer.Backoff{Factor: 0.5}}, "Backoff.Factor"},
		{producer.RelayConfig{Brokers: brokers, Backoff: producer.Backoff{Jitter: 1.5}}, "Backoff.Jitter"},
		{producer.RelayConfig{Brokers: brokers, Backoff: producer.Backoff{Base: time.Minute, Max: time.Second}}, "Backoff.Max"},
		{producer.RelayConfig{Brokers: brokers, Breaker: producer.Breaker{ConsecutiveFailures: -1}}, "Breaker.ConsecutiveFailures"},
		{producer.RelayConfig{Brokers: brokers, DeadLetterSuffix: "/dlq"}, "DeadLetterSuffix"},
		{producer.RelayConfig{Brokers: brokers, Source: strings.Repeat("s", producer.MaxSourceBytes+1)}, "Source: text is longer than courier allows: 257 bytes"},
		{producer.RelayConfig{Brokers: brokers, Source: "orders\x00"}, `Source: text must be valid UTF-8 without NUL bytes: "orders\x00"`},
	} {
		_, err := producer.NewRelay(pg.Pool, tc.cfg)
		if !errors.Is(err, producer.ErrInvalidRelayConfig) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("NewRelay(%+v) = %v, want ErrInvalidRelayConfig naming %s", tc.cfg, err, tc.field)
		}
	}
	if _, err := producer.NewRelay(nil, producer.RelayConfig{Brokers: brokers}); !errors.Is(err, producer.ErrInvalidRelayConfig) {
		t.Errorf("NewRelay(nil pool) = %v", err)
	}
}

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
	if row := rowOf(t, pg, id); row.RetryCount != 0 || row.Status != producer.StatusPending {
		t.Fatalf("row %+v, want untouched", row)
	}
}
