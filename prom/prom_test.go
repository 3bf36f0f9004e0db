package prom_test

import (
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/prom"
)

func newMetrics(t *testing.T, cfg prom.Config) (*prom.RelayMetrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := prom.NewRelayMetrics(reg, cfg)
	if err != nil {
		t.Fatalf("NewRelayMetrics: %v", err)
	}
	return m, reg
}

// series gathers reg into one value per series, keyed by name and labels
// (`courier_outbox_published_total{topic="orders"}`). A histogram gives
// its _count, its _sum and one _bucket per upper bound.
func series(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+`="`+l.GetValue()+`"`)
			}
			key := func(suffix string, extra ...string) string {
				all := append(slices.Clone(labels), extra...)
				if len(all) == 0 {
					return f.GetName() + suffix
				}
				return f.GetName() + suffix + "{" + strings.Join(all, ",") + "}"
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				out[key("")] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key("")] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				out[key("_count")] = float64(h.GetSampleCount())
				out[key("_sum")] = h.GetSampleSum()
				for _, b := range h.GetBucket() {
					out[key("_bucket", `le="`+formatBound(b.GetUpperBound())+`"`)] = float64(b.GetCumulativeCount())
				}
				// The +Inf bucket is implicit in the protobuf form.
				out[key("_bucket", `le="+Inf"`)] = float64(h.GetSampleCount())
			default:
				t.Fatalf("%s has unexpected type %v", f.GetName(), f.GetType())
			}
		}
	}
	return out
}

func formatBound(b float64) string {
	if math.IsInf(b, +1) {
		return "+Inf"
	}
	return strconvFormat(b)
}

func strconvFormat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// changed returns the series of after that are new or differ from before.
func changed(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if old, ok := before[k]; !ok || old != v {
			out[k] = v
		}
	}
	return out
}

// TestNewRelayMetricsStartsAtZero checks what a fresh RelayMetrics exposes:
// the metrics without labels at 0, and no per-topic series yet.
func TestNewRelayMetricsStartsAtZero(t *testing.T) {
	t.Parallel()
	_, reg := newMetrics(t, prom.Config{})
	want := map[string]float64{
		"courier_outbox_pending":                    0,
		"courier_outbox_oldest_pending_age_seconds": 0,
		"courier_outbox_breaker_state":              0,
		"courier_outbox_claims_total":               0,
		"courier_outbox_claimed_events_total":       0,
	}
	if got := series(t, reg); !maps.Equal(got, want) {
		t.Errorf("fresh series = %v, want %v", got, want)
	}
}

// TestHooksMoveOnlyTheirMetric calls each hook on a fresh registry and
// checks that exactly the series it owns changed.
func TestHooksMoveOnlyTheirMetric(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		call func(*prom.RelayMetrics)
		want map[string]float64
	}{
		{
			name: "Claimed",
			call: func(m *prom.RelayMetrics) { m.Claimed(7) },
			want: map[string]float64{
				"courier_outbox_claims_total":         1,
				"courier_outbox_claimed_events_total": 7,
			},
		},
		{
			name: "Claimed nothing",
			call: func(m *prom.RelayMetrics) { m.Claimed(0) },
			want: map[string]float64{"courier_outbox_claims_total": 1},
		},
		{
			name: "Published",
			call: func(m *prom.RelayMetrics) { m.Published("orders", 30*time.Millisecond) },
			want: map[string]float64{
				`courier_outbox_published_total{topic="orders"}`:                            1,
				`courier_outbox_publish_latency_seconds_count{topic="orders"}`:              1,
				`courier_outbox_publish_latency_seconds_sum{topic="orders"}`:                0.03,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="0.001"}`:  0,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="0.0025"}`: 0,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="0.005"}`:  0,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="0.01"}`:   0,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="0.025"}`:  0,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="0.05"}`:   1,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="0.1"}`:    1,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="0.25"}`:   1,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="0.5"}`:    1,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="1"}`:      1,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="2.5"}`:    1,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="5"}`:      1,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="10"}`:     1,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="30"}`:     1,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="60"}`:     1,
				`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="+Inf"}`:   1,
			},
		},
		{
			name: "PublishFailed",
			call: func(m *prom.RelayMetrics) { m.PublishFailed("orders", "broker_unavailable") },
			want: map[string]float64{
				`courier_outbox_failures_total{reason="broker_unavailable",topic="orders"}`: 1,
			},
		},
		{
			name: "DeadLettered",
			call: func(m *prom.RelayMetrics) { m.DeadLettered("orders") },
			want: map[string]float64{
				`courier_outbox_dead_lettered_total{topic="orders"}`: 1,
			},
		},
		{
			name: "BreakerChanged",
			call: func(m *prom.RelayMetrics) { m.BreakerChanged(producer.BreakerOpen) },
			want: map[string]float64{"courier_outbox_breaker_state": 2},
		},
		{
			name: "Held",
			call: func(m *prom.RelayMetrics) { m.Held("orders", 3, time.Unix(1700000000, 500e6)) },
			want: map[string]float64{
				`courier_outbox_held_since_seconds{partition="3",topic="orders"}`: 1700000000.5,
			},
		},
		{
			name: "Unheld",
			call: func(m *prom.RelayMetrics) { m.Held("orders", -1, time.Unix(60, 0)); m.Unheld("orders", -1) },
			want: map[string]float64{},
		},
		{
			name: "Backlog",
			call: func(m *prom.RelayMetrics) { m.Backlog(42, 90*time.Second) },
			want: map[string]float64{
				"courier_outbox_pending":                    42,
				"courier_outbox_oldest_pending_age_seconds": 90,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, reg := newMetrics(t, prom.Config{})
			before := series(t, reg)
			tt.call(m)
			got := changed(before, series(t, reg))
			if !maps.EqualFunc(got, tt.want, approxEqual) {
				t.Errorf("changed series:\n%s\nwant:\n%s", dump(got), dump(tt.want))
			}
		})
	}
}

func approxEqual(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func dump(m map[string]float64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b.WriteString("\t" + k + " " + strconvFormat(m[k]) + "\n")
	}
	return b.String()
}

// TestExposition checks the text a scrape returns, HELP and TYPE included.
func TestExposition(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t, prom.Config{Buckets: []float64{0.1, 1}})
	m.Published("orders", 200*time.Millisecond)
	m.Published("orders", 2*time.Second)
	m.Published("payments", 50*time.Millisecond)
	m.PublishFailed("orders", "refused")
	m.PublishFailed("orders", "refused")
	m.PublishFailed("orders", "permanent")
	m.Held("orders", 3, time.Unix(1700000000, 0))
	m.DeadLettered("orders")
	m.BreakerChanged(producer.BreakerHalfOpen)
	m.Claimed(3)
	m.Claimed(0)
	m.Backlog(5, 1500*time.Millisecond)
	m.Batch(3, producer.BatchStages{Claim: 50 * time.Millisecond, Publish: 500 * time.Millisecond, Settle: 2 * time.Second})
	m.Batch(1, producer.BatchStages{Claim: 50 * time.Millisecond, Settle: 50 * time.Millisecond}) // held back: no publish

	const want = `
# HELP courier_outbox_batch_stage_seconds Seconds one stage of a relay's batch took, per stage: claim (a round trip to PostgreSQL that reads the events), publish (until the brokers answered every record; batches that published nothing are not observed) and settle (recording the outcomes and the commit).
# TYPE courier_outbox_batch_stage_seconds histogram
courier_outbox_batch_stage_seconds_bucket{stage="claim",le="0.1"} 2
courier_outbox_batch_stage_seconds_bucket{stage="claim",le="1"} 2
courier_outbox_batch_stage_seconds_bucket{stage="claim",le="+Inf"} 2
courier_outbox_batch_stage_seconds_sum{stage="claim"} 0.1
courier_outbox_batch_stage_seconds_count{stage="claim"} 2
courier_outbox_batch_stage_seconds_bucket{stage="publish",le="0.1"} 0
courier_outbox_batch_stage_seconds_bucket{stage="publish",le="1"} 1
courier_outbox_batch_stage_seconds_bucket{stage="publish",le="+Inf"} 1
courier_outbox_batch_stage_seconds_sum{stage="publish"} 0.5
courier_outbox_batch_stage_seconds_count{stage="publish"} 1
courier_outbox_batch_stage_seconds_bucket{stage="settle",le="0.1"} 1
courier_outbox_batch_stage_seconds_bucket{stage="settle",le="1"} 1
courier_outbox_batch_stage_seconds_bucket{stage="settle",le="+Inf"} 2
courier_outbox_batch_stage_seconds_sum{stage="settle"} 2.05
courier_outbox_batch_stage_seconds_count{stage="settle"} 2
# HELP courier_outbox_breaker_state State of the relay's circuit breaker around Kafka: 0 closed, 1 half-open, 2 open.
# TYPE courier_outbox_breaker_state gauge
courier_outbox_breaker_state 1
# HELP courier_outbox_claimed_events_total Outbox events the claim queries locked for publishing.
# TYPE courier_outbox_claimed_events_total counter
courier_outbox_claimed_events_total 3
# HELP courier_outbox_claims_total Claim queries the relay ran against the outbox table, including those that found nothing.
# TYPE courier_outbox_claims_total counter
courier_outbox_claims_total 2
# HELP courier_outbox_dead_lettered_total Outbox events that became dead_lettered (a permanent failure or retries exhausted), per topic.
# TYPE courier_outbox_dead_lettered_total counter
courier_outbox_dead_lettered_total{topic="orders"} 1
# HELP courier_outbox_failures_total Failed publishes, per topic and reason: held (the cluster's condition: no leader, too few in-sync replicas, a timeout; no attempt counted, the partition is held), refused (the broker refused the record; an attempt counted, retried after a backoff), broker_unavailable (Kafka unreachable; no attempt counted) or permanent (the event is dead-lettered).
# TYPE courier_outbox_failures_total counter
courier_outbox_failures_total{reason="permanent",topic="orders"} 1
courier_outbox_failures_total{reason="refused",topic="orders"} 2
# HELP courier_outbox_held_since_seconds Unix time since which the cluster's condition (no leader, too few in-sync replicas, timeouts, refused access) holds a partition's events, per topic and partition (-1: the whole topic); no series while none is held.
# TYPE courier_outbox_held_since_seconds gauge
courier_outbox_held_since_seconds{partition="3",topic="orders"} 1.7e+09
# HELP courier_outbox_oldest_pending_age_seconds Seconds the oldest due outbox event has waited since it became due (its next_attempt_at), 0 when none is due, measured every RelayConfig.StatsInterval.
# TYPE courier_outbox_oldest_pending_age_seconds gauge
courier_outbox_oldest_pending_age_seconds 1.5
# HELP courier_outbox_pending Outbox events waiting to be published (status pending or failed, due now or later), measured every RelayConfig.StatsInterval.
# TYPE courier_outbox_pending gauge
courier_outbox_pending 5
# HELP courier_outbox_publish_latency_seconds Seconds from an event's enqueue to the broker's acknowledgement of its publish, per topic.
# TYPE courier_outbox_publish_latency_seconds histogram
courier_outbox_publish_latency_seconds_bucket{topic="orders",le="0.1"} 0
courier_outbox_publish_latency_seconds_bucket{topic="orders",le="1"} 1
courier_outbox_publish_latency_seconds_bucket{topic="orders",le="+Inf"} 2
courier_outbox_publish_latency_seconds_sum{topic="orders"} 2.2
courier_outbox_publish_latency_seconds_count{topic="orders"} 2
courier_outbox_publish_latency_seconds_bucket{topic="payments",le="0.1"} 1
courier_outbox_publish_latency_seconds_bucket{topic="payments",le="1"} 1
courier_outbox_publish_latency_seconds_bucket{topic="payments",le="+Inf"} 1
courier_outbox_publish_latency_seconds_sum{topic="payments"} 0.05
courier_outbox_publish_latency_seconds_count{topic="payments"} 1
# HELP courier_outbox_published_total Outbox events the broker acknowledged, per topic.
# TYPE courier_outbox_published_total counter
courier_outbox_published_total{topic="orders"} 2
courier_outbox_published_total{topic="payments"} 1
`
	expectExposition(t, reg, want)
}

// expectExposition checks that a scrape of reg returns want, and that
// promlint finds nothing to say about it.
func expectExposition(t *testing.T, reg prometheus.Gatherer, want string) {
	t.Helper()
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
}

// TestPublishedObservesSeconds checks that the histogram's unit is the
// second, not the nanosecond of time.Duration.
func TestPublishedObservesSeconds(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t, prom.Config{})
	m.Published("orders", 1500*time.Millisecond)
	m.Published("orders", -time.Second) // clock skew: observed as 0

	got := series(t, reg)
	for key, want := range map[string]float64{
		`courier_outbox_publish_latency_seconds_sum{topic="orders"}`:               1.5,
		`courier_outbox_publish_latency_seconds_count{topic="orders"}`:             2,
		`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="0.001"}`: 1,
		`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="1"}`:     1,
		`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="2.5"}`:   2,
	} {
		if !approxEqual(got[key], want) {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
}

func TestBreakerStates(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t, prom.Config{})
	for _, state := range []producer.BreakerState{producer.BreakerOpen, producer.BreakerHalfOpen, producer.BreakerClosed} {
		m.BreakerChanged(state)
		if got := series(t, reg)["courier_outbox_breaker_state"]; got != float64(state) {
			t.Errorf("after BreakerChanged(%v): courier_outbox_breaker_state = %v, want %d", state, got, state)
		}
	}
}

// TestBacklogSetsNotAdds checks that the backlog gauges hold the latest
// measurement.
func TestBacklogSetsNotAdds(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t, prom.Config{})
	m.Backlog(10, time.Minute)
	m.Backlog(0, 0)
	got := series(t, reg)
	if got["courier_outbox_pending"] != 0 || got["courier_outbox_oldest_pending_age_seconds"] != 0 {
		t.Errorf("after Backlog(0, 0): pending = %v, age = %v, want 0 and 0",
			got["courier_outbox_pending"], got["courier_outbox_oldest_pending_age_seconds"])
	}
}

func TestDuplicateRegistrationReturnsError(t *testing.T) {
	t.Parallel()
	_, reg := newMetrics(t, prom.Config{})
	m, err := prom.NewRelayMetrics(reg, prom.Config{})
	if err == nil {
		t.Fatal("second NewRelayMetrics on one registry: got nil error")
	}
	if m != nil {
		t.Errorf("second NewRelayMetrics returned %v with its error, want nil", m)
	}
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) {
		t.Errorf("error %q does not wrap a prometheus.AlreadyRegisteredError", err)
	}
	if !strings.Contains(err.Error(), "Config.Table") {
		t.Errorf("error %q does not say how to fix it (Config.Table)", err)
	}
}

// TestFailedRegistrationRegistersNothing makes the fifth metric collide
// and checks the first four were unregistered again.
func TestFailedRegistrationRegistersNothing(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	squatter := prometheus.NewGauge(prometheus.GaugeOpts{Name: "courier_outbox_failures_total", Help: "Not ours."})
	reg.MustRegister(squatter)

	if _, err := prom.NewRelayMetrics(reg, prom.Config{}); err == nil {
		t.Fatal("NewRelayMetrics with courier_outbox_failures_total taken: got nil error")
	}
	want := map[string]float64{"courier_outbox_failures_total": 0}
	if got := series(t, reg); !maps.Equal(got, want) {
		t.Errorf("after the failed registration the registry holds %v, want only %v", got, want)
	}
}

// failingRegisterer fails the failAt-th Register call and tracks what
// stays registered.
type failingRegisterer struct {
	failAt     int
	calls      int
	registered map[prometheus.Collector]bool
}

func (r *failingRegisterer) Register(c prometheus.Collector) error {
	r.calls++
	if r.calls == r.failAt {
		return errors.New("injected failure")
	}
	r.registered[c] = true
	return nil
}

func (r *failingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *failingRegisterer) Unregister(c prometheus.Collector) bool {
	ok := r.registered[c]
	delete(r.registered, c)
	return ok
}

func TestFailedRegistrationRollsBack(t *testing.T) {
	t.Parallel()
	for failAt := 1; failAt <= 10; failAt++ {
		reg := &failingRegisterer{failAt: failAt, registered: map[prometheus.Collector]bool{}}
		_, err := prom.NewRelayMetrics(reg, prom.Config{})
		if err == nil || !strings.Contains(err.Error(), "injected failure") {
			t.Errorf("failure at metric %d: error %v, want the injected failure", failAt, err)
		}
		if len(reg.registered) != 0 {
			t.Errorf("failure at metric %d: %d collectors left registered, want 0", failAt, len(reg.registered))
		}
	}
	reg := &failingRegisterer{registered: map[prometheus.Collector]bool{}}
	if _, err := prom.NewRelayMetrics(reg, prom.Config{}); err != nil {
		t.Fatal(err)
	}
	if len(reg.registered) != 11 {
		t.Errorf("NewRelayMetrics registered %d collectors, want 11", len(reg.registered))
	}
}

// TestTableLabel registers two relays' metrics on one registry.
func TestTableLabel(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	shop, err := prom.NewRelayMetrics(reg, prom.Config{Table: "shop.courier_outbox"})
	if err != nil {
		t.Fatal(err)
	}
	billing, err := prom.NewRelayMetrics(reg, prom.Config{Table: "billing.courier_outbox"})
	if err != nil {
		t.Fatalf("second relay with another Table: %v", err)
	}
	shop.Published("orders", time.Millisecond)
	billing.Published("invoices", time.Millisecond)
	billing.Published("invoices", time.Millisecond)
	shop.Claimed(1)

	got := series(t, reg)
	for key, want := range map[string]float64{
		`courier_outbox_published_total{table="shop.courier_outbox",topic="orders"}`:      1,
		`courier_outbox_published_total{table="billing.courier_outbox",topic="invoices"}`: 2,
		`courier_outbox_claims_total{table="shop.courier_outbox"}`:                        1,
		`courier_outbox_claims_total{table="billing.courier_outbox"}`:                     0,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	for key := range got {
		if !strings.Contains(key, `table="`) {
			t.Errorf("series %s has no table label", key)
		}
	}

	_, err = prom.NewRelayMetrics(reg, prom.Config{Table: "shop.courier_outbox"})
	var already prometheus.AlreadyRegisteredError
	if !errors.As(err, &already) {
		t.Errorf("same Table twice: error %v, want a prometheus.AlreadyRegisteredError", err)
	}
}

func TestInvalidConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		reg  prometheus.Registerer
		cfg  prom.Config
		hint string
	}{
		{"nil registerer", nil, prom.Config{}, "prometheus.NewRegistry"},
		{"decreasing buckets", prometheus.NewRegistry(), prom.Config{Buckets: []float64{1, 0.5}}, "Buckets[1]"},
		{"repeated bucket", prometheus.NewRegistry(), prom.Config{Buckets: []float64{1, 1}}, "strictly increasing"},
		{"NaN bucket", prometheus.NewRegistry(), prom.Config{Buckets: []float64{0.1, math.NaN()}}, "Buckets[1] is NaN"},
		{"table not UTF-8", prometheus.NewRegistry(), prom.Config{Table: "\xff"}, "UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := prom.NewRelayMetrics(tt.reg, tt.cfg)
			if !errors.Is(err, prom.ErrInvalidConfig) {
				t.Fatalf("error %v, want one matching prom.ErrInvalidConfig", err)
			}
			if m != nil {
				t.Errorf("got %v with the error, want nil", m)
			}
			if !strings.Contains(err.Error(), tt.hint) {
				t.Errorf("error %q does not mention %q", err, tt.hint)
			}
		})
	}
}

// TestBucketsNotAliased checks that NewRelayMetrics copies Config.Buckets
// and that DefaultBuckets hands out fresh slices.
func TestBucketsNotAliased(t *testing.T) {
	t.Parallel()
	buckets := []float64{0.5, 1, math.Inf(+1)}
	m, reg := newMetrics(t, prom.Config{Buckets: buckets})
	buckets[0] = 100
	m.Published("orders", 400*time.Millisecond)
	got := series(t, reg)
	if v := got[`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="0.5"}`]; v != 1 {
		t.Errorf(`bucket le="0.5" = %v, want 1`, v)
	}
	if _, ok := got[`courier_outbox_publish_latency_seconds_bucket{topic="orders",le="100"}`]; ok {
		t.Error("changing the caller's Buckets after NewRelayMetrics changed the histogram")
	}

	d := prom.DefaultBuckets()
	d[0] = 42
	if first := prom.DefaultBuckets()[0]; first != 0.001 {
		t.Errorf("DefaultBuckets()[0] = %v after a caller changed its copy, want 0.001", first)
	}
	if !slices.IsSorted(d[1:]) || d[len(d)-1] != 60 {
		t.Errorf("DefaultBuckets() = %v, want increasing bounds up to 60", d)
	}
}

// TestHooksConcurrent lets many goroutines call the hooks at once, as a
// relay with several workers might; run with -race.
func TestHooksConcurrent(t *testing.T) {
	t.Parallel()
	m, reg := newMetrics(t, prom.Config{})
	const workers, rounds = 8, 500
	concurrently(t, reg, workers, func(w int) {
		topic := []string{"orders", "payments"}[w%2]
		for range rounds {
			m.Claimed(2)
			m.Published(topic, time.Millisecond)
			m.PublishFailed(topic, "retriable")
			m.DeadLettered(topic)
			m.BreakerChanged(producer.BreakerClosed)
			m.Backlog(1, time.Second)
		}
	})

	got := series(t, reg)
	perTopic := float64(workers / 2 * rounds)
	for key, want := range map[string]float64{
		"courier_outbox_claims_total":                                      workers * rounds,
		"courier_outbox_claimed_events_total":                              2 * workers * rounds,
		`courier_outbox_published_total{topic="orders"}`:                   perTopic,
		`courier_outbox_published_total{topic="payments"}`:                 perTopic,
		`courier_outbox_failures_total{reason="retriable",topic="orders"}`: perTopic,
		`courier_outbox_dead_lettered_total{topic="payments"}`:             perTopic,
		`courier_outbox_publish_latency_seconds_count{topic="orders"}`:     perTopic,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
}

// concurrently runs hooks(w) in workers goroutines while reg is scraped, as
// scrapes race with the hooks in production too, and waits for them.
func concurrently(t *testing.T, reg prometheus.Gatherer, workers int, hooks func(w int)) {
	t.Helper()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { hooks(w) })
	}
	for range 10 {
		if _, err := reg.Gather(); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
}
