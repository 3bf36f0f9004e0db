package prom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courierkit/courier/dedupe"
)

// Dedupe metric names.
const (
	NameDedupeHits     = "courier_dedupe_hits_total"
	NameDedupeErrors   = "courier_dedupe_errors_total"
	NameDedupeFailOpen = "courier_dedupe_fail_open_total"
	NameDedupeSeconds  = "courier_dedupe_seconds"
)

// LabelOp is the dedupe.Store operation (claim, extend, done, release) of
// courier_dedupe_errors_total and courier_dedupe_seconds.
const LabelOp = "op"

// DefaultDedupeBuckets returns the default upper bounds, in seconds, of
// courier_dedupe_seconds: 100µs to 1s, roughly 1-2.5-5 per decade, for
// round trips to Redis or PostgreSQL. Each call returns a new slice.
func DefaultDedupeBuckets() []float64 {
	return []float64{
		0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
		0.1, 0.25, 0.5, 1,
	}
}

// DedupeConfig configures NewDedupeMetrics. The zero value is ready to use.
type DedupeConfig struct {
	// Group tells apart the consumers of one process that share a
	// registry, typically their consumer group. When set, every metric
	// carries it as the constant label group. Defaults to "": no group
	// label.
	Group string
	// Buckets are the upper bounds, in seconds, of the
	// courier_dedupe_seconds histogram, in increasing order. Defaults to
	// DefaultDedupeBuckets(), 100µs to 1s.
	Buckets []float64
}

// dedupeOps are the operations whose series exist from the start, at 0.
var dedupeOps = [...]dedupe.Op{dedupe.OpClaim, dedupe.OpExtend, dedupe.OpDone, dedupe.OpRelease}

// WithDefaults returns c as NewDedupeMetrics runs it: Buckets a copy of
// itself, or DefaultDedupeBuckets() when empty; it never aliases the
// caller's Buckets.
func (c DedupeConfig) WithDefaults() DedupeConfig {
	c.Buckets = bucketsOrDefault(c.Buckets, DefaultDedupeBuckets)
	return c
}

// validate refuses what c, its defaults applied, cannot run with.
func (c DedupeConfig) validate() error { return validGroup(c.Group, c.Buckets) }

// DedupeMetrics is the Prometheus implementation of the dedupe hook
// interfaces (dedupe.Hook); list it in consumer.DedupeConfig.Hooks. Its methods are safe for concurrent use
// and never block on I/O.
type DedupeMetrics struct {
	hits     prometheus.Counter
	failOpen prometheus.Counter
	errors   *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	// The series of the known operations, looked up once.
	opErrors  [len(dedupeOps)]prometheus.Counter
	opSeconds [len(dedupeOps)]prometheus.Observer
}

// DedupeMetrics implements every dedupe hook interface.
var (
	_ dedupe.HitsHook       = (*DedupeMetrics)(nil)
	_ dedupe.ErrorHook      = (*DedupeMetrics)(nil)
	_ dedupe.FailedOpenHook = (*DedupeMetrics)(nil)
	_ dedupe.LatencyHook    = (*DedupeMetrics)(nil)
)

// NewDedupeMetrics creates the deduplication metrics and registers them on
// reg. It returns an error, and registers nothing, if cfg is invalid or a
// metric cannot be registered, typically because reg already holds the
// metrics of a consumer with the same DedupeConfig.Group.
func NewDedupeMetrics(reg prometheus.Registerer, cfg DedupeConfig) (*DedupeMetrics, error) {
	if err := checkRegisterer(reg); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	f := &family{labels: groupLabels(cfg.Group), buckets: cfg.Buckets}
	m := &DedupeMetrics{
		hits: f.counter(NameDedupeHits,
			"Messages skipped because the dedupe store found their ids processed already."),
		failOpen: f.counter(NameDedupeFailOpen,
			"Messages handled without deduplication because the dedupe store failed and the consumer fails open."),
		errors: f.counterVec(NameDedupeErrors,
			"Failed round trips to the dedupe store, per operation: claim, extend, done or release.", LabelOp),
		seconds: f.histogramVec(NameDedupeSeconds,
			"Seconds one round trip to the dedupe store took, for a batch of ids, failed or not, per operation.", LabelOp),
	}
	for i, op := range dedupeOps {
		m.opErrors[i] = m.errors.WithLabelValues(string(op))
		m.opSeconds[i] = m.seconds.WithLabelValues(string(op))
	}
	collide, differ := groupHints("DedupeMetrics", "DedupeConfig", cfg.Group, false)
	err := register(reg, f.all, collide, differ)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// opIndex returns op's place in dedupeOps, or -1.
func opIndex(op dedupe.Op) int {
	for i, known := range dedupeOps {
		if op == known {
			return i
		}
	}
	return -1
}

// Hits counts n messages skipped as processed already.
func (m *DedupeMetrics) Hits(n int) {
	if n > 0 {
		m.hits.Add(float64(n))
	}
}

// Error counts a failed round trip of op.
func (m *DedupeMetrics) Error(op dedupe.Op) {
	if i := opIndex(op); i >= 0 {
		m.opErrors[i].Inc()
		return
	}
	m.errors.WithLabelValues(string(op)).Inc()
}

// FailedOpen counts n messages handled without deduplication.
func (m *DedupeMetrics) FailedOpen(n int) {
	if n > 0 {
		m.failOpen.Add(float64(n))
	}
}

// Latency observes one round trip of op in seconds; n, the batch's size,
// is not recorded. A negative duration is observed as 0.
func (m *DedupeMetrics) Latency(op dedupe.Op, n int, d time.Duration) {
	seconds := max(d, 0).Seconds()
	if i := opIndex(op); i >= 0 {
		m.opSeconds[i].Observe(seconds)
		return
	}
	m.seconds.WithLabelValues(string(op)).Observe(seconds)
}
