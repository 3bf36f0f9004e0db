package prom_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/prom"
)

func newDedupeMetrics(t *testing.T, cfg prom.DedupeConfig) (*prom.DedupeMetrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := prom.NewDedupeMetrics(reg, cfg)
	if err != nil {
		t.Fatalf("NewDedupeMetrics: %v", err)
	}
	return m, reg
}

func TestDedupeHooks(t *testing.T) {
	t.Parallel()
	m, reg := newDedupeMetrics(t, prom.DedupeConfig{Group: "payouts"})
	m.Hits(3)
	m.Hits(0)
	m.Error(dedupe.OpClaim)
	m.Error(dedupe.OpDone)
	m.Error(dedupe.OpDone)
	m.FailedOpen(2)
	m.Latency(dedupe.OpClaim, 256, 2*time.Millisecond)
	m.Latency(dedupe.OpClaim, 256, -time.Millisecond) // clock trouble: observed as 0
	m.Latency(dedupe.OpRelease, 1, 300*time.Microsecond)
	m.Error("lookup") // an operation a later Store may add
	m.Latency("lookup", 1, time.Millisecond)

	got := series(t, reg)
	for key, want := range map[string]float64{
		`courier_dedupe_hits_total{group="payouts"}`:                               3,
		`courier_dedupe_fail_open_total{group="payouts"}`:                          2,
		`courier_dedupe_errors_total{group="payouts",op="claim"}`:                  1,
		`courier_dedupe_errors_total{group="payouts",op="done"}`:                   2,
		`courier_dedupe_errors_total{group="payouts",op="extend"}`:                 0,
		`courier_dedupe_errors_total{group="payouts",op="release"}`:                0,
		`courier_dedupe_errors_total{group="payouts",op="lookup"}`:                 1,
		`courier_dedupe_seconds_count{group="payouts",op="claim"}`:                 2,
		`courier_dedupe_seconds_sum{group="payouts",op="claim"}`:                   0.002,
		`courier_dedupe_seconds_count{group="payouts",op="release"}`:               1,
		`courier_dedupe_seconds_count{group="payouts",op="done"}`:                  0,
		`courier_dedupe_seconds_count{group="payouts",op="lookup"}`:                1,
		`courier_dedupe_seconds_bucket{group="payouts",op="release",le="0.0005"}`:  1,
		`courier_dedupe_seconds_bucket{group="payouts",op="release",le="0.00025"}`: 0,
	} {
		if v, ok := got[key]; !ok || !approxEqual(v, want) {
			t.Errorf("%s = %v (present %t), want %v", key, v, ok, want)
		}
	}
}

func TestDedupeMetricsRegistration(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	if _, err := prom.NewDedupeMetrics(reg, prom.DedupeConfig{Group: "payouts"}); err != nil {
		t.Fatal(err)
	}
	// Beside the consumer's metrics of the same group, and another group's.
	if _, err := prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Group: "payouts"}); err != nil {
		t.Fatalf("consumer metrics beside dedupe metrics: %v", err)
	}
	if _, err := prom.NewDedupeMetrics(reg, prom.DedupeConfig{Group: "billing"}); err != nil {
		t.Fatalf("a second group: %v", err)
	}
	_, err := prom.NewDedupeMetrics(reg, prom.DedupeConfig{Group: "payouts"})
	if _, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); !ok || !strings.Contains(err.Error(), `another DedupeMetrics with Group "payouts"`) {
		t.Errorf("the same group twice: %v, want AlreadyRegisteredError naming the group", err)
	}
	n, err := testutil.GatherAndCount(reg, prom.NameDedupeHits)
	if err != nil || n != 2 {
		t.Errorf("%s series = %d, %v; want one per group, the failed registration leaving none", prom.NameDedupeHits, n, err)
	}

	for name, err := range map[string]error{
		"nil registerer":    errOf(prom.NewDedupeMetrics(nil, prom.DedupeConfig{})),
		"unordered buckets": errOf(prom.NewDedupeMetrics(prometheus.NewRegistry(), prom.DedupeConfig{Buckets: []float64{0.1, 0.01}})),
		"group not UTF-8":   errOf(prom.NewDedupeMetrics(prometheus.NewRegistry(), prom.DedupeConfig{Group: "\xff"})),
	} {
		if !errors.Is(err, prom.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

func errOf[T any](_ T, err error) error { return err }

// TestDedupeExposition checks the text a scrape returns, HELP and TYPE
// included, and lints it: every operation's series exists from the start.
func TestDedupeExposition(t *testing.T) {
	t.Parallel()
	m, reg := newDedupeMetrics(t, prom.DedupeConfig{Buckets: []float64{0.001, 0.01}})
	m.Hits(5)
	m.Error(dedupe.OpExtend)
	m.Latency(dedupe.OpDone, 100, 4*time.Millisecond)

	var want strings.Builder
	want.WriteString(`
# HELP courier_dedupe_errors_total Failed round trips to the dedupe store, per operation: claim, extend, done or release.
# TYPE courier_dedupe_errors_total counter
courier_dedupe_errors_total{op="claim"} 0
courier_dedupe_errors_total{op="done"} 0
courier_dedupe_errors_total{op="extend"} 1
courier_dedupe_errors_total{op="release"} 0
# HELP courier_dedupe_fail_open_total Messages handled without deduplication because the dedupe store failed and the consumer fails open.
# TYPE courier_dedupe_fail_open_total counter
courier_dedupe_fail_open_total 0
# HELP courier_dedupe_hits_total Messages skipped because the dedupe store found their ids processed already.
# TYPE courier_dedupe_hits_total counter
courier_dedupe_hits_total 5
# HELP courier_dedupe_seconds Seconds one round trip to the dedupe store took, for a batch of ids, failed or not, per operation.
# TYPE courier_dedupe_seconds histogram
`)
	for _, op := range []string{"claim", "done", "extend", "release"} {
		n, sum := 0, "0"
		if op == "done" {
			n, sum = 1, "0.004"
		}
		fmt.Fprintf(&want, "courier_dedupe_seconds_bucket{op=%q,le=\"0.001\"} 0\n", op)
		fmt.Fprintf(&want, "courier_dedupe_seconds_bucket{op=%q,le=\"0.01\"} %d\n", op, n)
		fmt.Fprintf(&want, "courier_dedupe_seconds_bucket{op=%q,le=\"+Inf\"} %d\n", op, n)
		fmt.Fprintf(&want, "courier_dedupe_seconds_sum{op=%q} %s\n", op, sum)
		fmt.Fprintf(&want, "courier_dedupe_seconds_count{op=%q} %d\n", op, n)
	}
	expectExposition(t, reg, want.String())
}

// TestDedupeHooksConcurrent calls the hooks from many goroutines, as the
// partitions of a consumer do, while scrapes run; run with -race.
func TestDedupeHooksConcurrent(t *testing.T) {
	t.Parallel()
	m, reg := newDedupeMetrics(t, prom.DedupeConfig{})
	const workers, rounds = 8, 500
	concurrently(t, reg, workers, func(int) {
		for range rounds {
			m.Hits(1)
			m.Error(dedupe.OpClaim)
			m.FailedOpen(1)
			m.Latency(dedupe.OpClaim, 256, time.Millisecond)
		}
	})
	got := series(t, reg)
	for _, key := range []string{
		"courier_dedupe_hits_total", "courier_dedupe_fail_open_total",
		`courier_dedupe_errors_total{op="claim"}`, `courier_dedupe_seconds_count{op="claim"}`,
	} {
		if got[key] != workers*rounds {
			t.Errorf("%s = %v, want %d", key, got[key], workers*rounds)
		}
	}
}

func TestDefaultDedupeBuckets(t *testing.T) {
	t.Parallel()
	d := prom.DefaultDedupeBuckets()
	d[0] = 42
	if first := prom.DefaultDedupeBuckets()[0]; first != 0.0001 {
		t.Errorf("DefaultDedupeBuckets()[0] = %v after a caller changed its copy, want 0.0001", first)
	}
}
