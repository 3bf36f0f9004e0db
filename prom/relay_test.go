package prom_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/prom"
)

// TestRelayFeedsTheMetrics runs a real relay against PostgreSQL and the
// in-process broker and reads what a Prometheus scrape would.
func TestRelayFeedsTheMetrics(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	pg.Migrate(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		ev := producer.Event{Topic: topic, Key: fmt.Sprint(i % 3), Type: "T", Payload: []byte(`{}`)}
		if i == 24 {
			ev.Topic = "no-such-topic-" + topic[:20] // missing past MissingTopicGrace: a dead letter
		}
		if _, err := out.Enqueue(context.Background(), pg.Pool, ev); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewRegistry()
	metrics, err := prom.NewRelayMetrics(reg, prom.Config{})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := producer.NewRelay(pg.Pool, producer.RelayConfig{Schema: pg.Schema, Brokers: k.Brokers, Hooks: []producer.Hook{metrics},
		MaxAttempts: 1, MissingTopicGrace: time.Millisecond, StatsInterval: 20 * time.Millisecond, PollInterval: 20 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	deadline := time.Now().Add(30 * time.Second)
	for gathered(t, reg, prom.NamePublished) < 24 || gathered(t, reg, prom.NamePending) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("published_total = %v after 30s, want 24", gathered(t, reg, prom.NamePublished))
		}
		time.Sleep(20 * time.Millisecond)
	}
	expected := fmt.Sprintf(`
# HELP %[1]s %[2]s
# TYPE %[1]s counter
%[1]s{topic=%[3]q} 24
`, prom.NamePublished, helpOf(t, reg, prom.NamePublished), topic)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), prom.NamePublished); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, prom.NamePublishLatency); err != nil || n != 1 {
		t.Fatalf("latency histogram series = %d, %v", n, err)
	}
	if n, err := testutil.GatherAndCount(reg, prom.NameDeadLettered); err != nil || n != 1 {
		t.Fatalf("dead-lettered series = %d, %v; want one for the unknown topic", n, err)
	}
}

// gathered sums the counter or gauge values of one metric family.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func helpOf(t *testing.T, reg *prometheus.Registry, name string) string {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetHelp()
		}
	}
	t.Fatalf("no metric %s", name)
	return ""
}
