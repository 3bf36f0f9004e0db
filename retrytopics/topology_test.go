package retrytopics_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/retrytopics"
)

func TestNewNamesTheTiers(t *testing.T) {
	topo, err := retrytopics.New("orders", retrytopics.Config{Delays: []time.Duration{5 * time.Second, time.Minute, time.Minute, 10 * time.Minute}}, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []retrytopics.Tier{
		{Round: 1, Topic: "orders.retry.5s", Delay: 5 * time.Second},
		{Round: 2, Topic: "orders.retry.1m", Delay: time.Minute},
		{Round: 3, Topic: "orders.retry.1m", Delay: time.Minute},
		{Round: 4, Topic: "orders.retry.10m", Delay: 10 * time.Minute},
	}
	if !slices.Equal(topo.Tiers, want) || topo.DeadLetter != "orders.dlq" || topo.Topic != "orders" {
		t.Errorf("topology %+v", topo)
	}
	if got := topo.Topics(); !slices.Equal(got, []string{"orders.retry.5s", "orders.retry.1m", "orders.retry.10m"}) {
		t.Errorf("Topics() = %q: equal delays share one topic", got)
	}
	for round, want := range map[int]string{0: "orders.retry.5s", 1: "orders.retry.1m", 3: "orders.retry.10m"} {
		if tier, ok := topo.Next(round); !ok || tier.Topic != want || tier.Round != round+1 {
			t.Errorf("Next(%d) = %+v, %t; want %s", round, tier, ok, want)
		}
	}
	if _, ok := topo.Next(4); ok {
		t.Error("Next(4) found a tier after the last")
	}
	if !topo.IsRetryTopic("orders.retry.1m") || topo.IsRetryTopic("orders") || topo.IsRetryTopic("orders.dlq") {
		t.Error("IsRetryTopic is wrong")
	}
}

func TestSuffixes(t *testing.T) {
	topo, err := retrytopics.New("orders", retrytopics.Config{Delays: []time.Duration{time.Second}, Suffix: "-payouts-retry"}, "-dead")
	if err != nil {
		t.Fatal(err)
	}
	if topo.Tiers[0].Topic != "orders-payouts-retry.1s" || topo.DeadLetter != "orders-dead" {
		t.Errorf("topology %+v", topo)
	}
}

func TestFormatDelay(t *testing.T) {
	for d, want := range map[time.Duration]string{
		500 * time.Millisecond: "500ms", 5 * time.Second: "5s", 90 * time.Second: "90s", time.Minute: "1m",
		10 * time.Minute: "10m", 2 * time.Hour: "2h", 1500 * time.Millisecond: "1500ms", 36 * time.Hour: "36h",
	} {
		if got := retrytopics.FormatDelay(d); got != want {
			t.Errorf("FormatDelay(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		name  string
		topic string
		cfg   retrytopics.Config
		want  string
		dlq   string // the dead-letter suffix
	}{
		{"zero delay", "orders", retrytopics.Config{Delays: []time.Duration{0}}, "Delays[0]", ""},
		{"sub-millisecond delay", "orders", retrytopics.Config{Delays: []time.Duration{time.Second, 1500 * time.Microsecond}}, "Delays[1]", ""},
		{"bad suffix", "orders", retrytopics.Config{Delays: []time.Duration{time.Second}, Suffix: "/retry"}, "Suffix", ""},
		{"bad dead-letter suffix", "orders", retrytopics.Config{}, "DeadLetterSuffix", " dlq"},
		{"bad topic", "", retrytopics.Config{}, "topic", ""},
		{"too long", strings.Repeat("o", 245), retrytopics.Config{Delays: []time.Duration{time.Second}}, "249", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := retrytopics.New(tc.topic, tc.cfg, tc.dlq)
			if !errors.Is(err, retrytopics.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("New: %v; want ErrInvalidConfig naming %q", err, tc.want)
			}
		})
	}
}

func TestHolding(t *testing.T) {
	topo, err := retrytopics.New("orders", retrytopics.Config{Delays: []time.Duration{time.Minute, 5 * time.Second, 10 * time.Minute}}, "")
	if err != nil {
		t.Fatal(err)
	}
	for wait, want := range map[time.Duration]time.Duration{
		-time.Second: 5 * time.Second, 0: 5 * time.Second, 5 * time.Second: 5 * time.Second, 6 * time.Second: time.Minute,
		9 * time.Minute: 10 * time.Minute, time.Hour: 10 * time.Minute,
	} {
		if tier, ok := topo.Holding(wait); !ok || tier.Delay != want {
			t.Errorf("Holding(%v) = %v, want the tier of %v", wait, tier.Delay, want)
		}
	}
	if _, ok := (retrytopics.Topology{}).Holding(time.Second); ok {
		t.Error("a topology without tiers holds something")
	}
}
