package prom_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/prom"
)

func TestConsumerHooks(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Group: "payouts"})
	if err != nil {
		t.Fatal(err)
	}
	m.Message("orders", consumer.OutcomeHandled)
	m.Message("orders", consumer.OutcomeRetried)
	m.Message("orders", consumer.OutcomeRetried)
	m.HandlerDuration("orders", 30*time.Millisecond)
	m.InFlight("orders", 1)
	m.InFlight("orders", 1)
	m.InFlight("orders", -1)
	m.BreakerChanged("psp", gobreaker.StateOpen)
	m.Lag("orders", 3, 42)
	m.Lag("orders", 4, 7)
	m.OldestInFlight("orders", 3, 1500*time.Millisecond)
	m.OldestInFlight("orders", 4, time.Minute)
	m.Released("orders", 4)

	got := series(t, reg)
	for key, want := range map[string]float64{
		`courier_consumer_messages_total{group="payouts",outcome="handled",topic="orders"}`:       1,
		`courier_consumer_messages_total{group="payouts",outcome="retried",topic="orders"}`:       2,
		`courier_consumer_handler_seconds_count{group="payouts",topic="orders"}`:                  1,
		`courier_consumer_handler_seconds_sum{group="payouts",topic="orders"}`:                    0.03,
		`courier_consumer_inflight{group="payouts",topic="orders"}`:                               1,
		`courier_consumer_breaker_state{breaker="psp",group="payouts"}`:                           2,
		`courier_consumer_lag{group="payouts",partition="3",topic="orders"}`:                      42,
		`courier_consumer_oldest_in_flight_seconds{group="payouts",partition="3",topic="orders"}`: 1.5,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %t), want %v", key, v, ok, want)
		}
	}
	if _, ok := got[`courier_consumer_lag{group="payouts",partition="4",topic="orders"}`]; ok {
		t.Error("the lag of a released partition is still exposed")
	}
	if _, ok := got[`courier_consumer_oldest_in_flight_seconds{group="payouts",partition="4",topic="orders"}`]; ok {
		t.Error("the oldest in-flight age of a released partition is still exposed")
	}

	if _, err := prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Group: "payouts"}); err == nil {
		t.Error("a second ConsumerMetrics for the same group registered")
	}
	if _, err := prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Group: "billing", Buckets: []float64{1, 1}}); !errors.Is(err, prom.ErrInvalidConfig) {
		t.Errorf("unordered buckets: %v, want ErrInvalidConfig", err)
	}
	if _, err := prom.NewConsumerMetrics(nil, prom.ConsumerConfig{}); !errors.Is(err, prom.ErrInvalidConfig) {
		t.Errorf("nil registerer: %v, want ErrInvalidConfig", err)
	}
}

// TestConsumerFeedsTheMetrics runs a real consumer over a message handled
// at once, one handled on its retry and one dead-lettered.
func TestConsumerFeedsTheMetrics(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	k.CreateTopic(t, dlq.Topic(topic, ""), 1)
	p, err := sarama.NewSyncProducer(k.Brokers, k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, v := range []string{"ok", "flaky", "poison"} {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder(v)}); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	metrics, err := prom.NewConsumerMetrics(reg, prom.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := consumer.New(consumer.Config{
		Brokers: k.Brokers,
		Sarama:  k.Config(),
		Group:   "g." + testkit.UniqueName(t, 100),
		Topics:  []string{topic},
		Backoff: backoff.Backoff{Base: time.Millisecond, Max: time.Millisecond},
		Hooks:   []consumer.Hook{metrics},
		Handler: consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
			switch {
			case string(m.Value) == "poison":
				return consumer.Permanent(errors.New("bad payload"))
			case string(m.Value) == "flaky" && m.Attempt == 1:
				return errors.New("timeout")
			}
			return nil
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	deadLettered := `courier_consumer_messages_total{outcome="dead_lettered",topic="` + topic + `"}`
	lag := `courier_consumer_lag{partition="0",topic="` + topic + `"}`
	for deadline := time.Now().Add(10 * time.Second); ; {
		if got := series(t, reg); got[deadLettered] == 1 && got[lag] == 0 {
			if _, ok := got[lag]; ok {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for the dead letter and a lag of 0: %v", series(t, reg))
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := series(t, reg)
	for key, want := range map[string]float64{
		`courier_consumer_messages_total{outcome="handled",topic="` + topic + `"}`: 2,
		`courier_consumer_messages_total{outcome="retried",topic="` + topic + `"}`: 1,
		deadLettered: 1,
		`courier_consumer_handler_seconds_count{topic="` + topic + `"}`: 4,
		`courier_consumer_inflight{topic="` + topic + `"}`:              0,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	if _, ok := got[lag]; ok {
		t.Error("the lag of partition 0 is still exposed after Run returned")
	}
}

// TestConsumerMetricsShowAStuckPartition runs a real consumer whose
// handler hangs on the first message while more records arrive: the
// partition's lag rises to the records produced and its oldest in-flight
// age grows, both from the progress timer (nothing is marked meanwhile);
// once the handler returns both are 0, and once Run returns both series
// are gone.
func TestConsumerMetricsShowAStuckPartition(t *testing.T) {
	t.Parallel()
	const records = 10
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	k.CreateTopic(t, dlq.Topic(topic, ""), 1)
	p := k.Producer(t)
	reg := prometheus.NewRegistry()
	metrics, err := prom.NewConsumerMetrics(reg, prom.ConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	c, err := consumer.New(consumer.Config{
		Brokers:          k.Brokers,
		Sarama:           k.Config(),
		Group:            "g." + testkit.UniqueName(t, 100),
		Topics:           []string{topic},
		Hooks:            []consumer.Hook{metrics},
		ProgressInterval: 50 * time.Millisecond,
		AttemptTimeout:   time.Minute,
		Handler: consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	for range records {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("v")}); err != nil {
			t.Fatal(err)
		}
	}
	lag := `courier_consumer_lag{partition="0",topic="` + topic + `"}`
	oldest := `courier_consumer_oldest_in_flight_seconds{partition="0",topic="` + topic + `"}`
	testkit.WaitFor(t, 10*time.Second, "the lag at the records produced and the oldest message in flight for 300ms", func() bool {
		got := series(t, reg)
		return got[lag] == records && got[oldest] >= 0.3
	})
	close(release)
	testkit.WaitFor(t, 10*time.Second, "lag 0 and oldest in-flight age 0", func() bool {
		got := series(t, reg)
		_, present := got[oldest]
		return present && got[lag] == 0 && got[oldest] == 0
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := series(t, reg)
	for _, name := range []string{lag, oldest} {
		if _, ok := got[name]; ok {
			t.Errorf("%s is still exposed after Run returned", name)
		}
	}
}
