// Package prom has the Prometheus metrics for courier: the outbox relay's
// (NewRelayMetrics), the consumer's (NewConsumerMetrics) and its
// deduplication's (NewDedupeMetrics).
//
// NewRelayMetrics registers the outbox relay's metrics on a
// prometheus.Registerer and returns a *RelayMetrics, a hook implementing
// every one of the relay's hook interfaces, to pass in
// producer.RelayConfig.Hooks:
//
//	metrics, err := prom.NewRelayMetrics(prometheus.DefaultRegisterer, prom.Config{})
//	if err != nil {
//		return err
//	}
//	relay, err := producer.NewRelay(pool, producer.RelayConfig{ /* ... */ Hooks: []producer.Hook{metrics}})
//
// The relay calls the hooks on its hot path. Each one only updates an
// in-memory Prometheus counter, gauge or histogram; none does I/O or waits.
//
// # Metrics
//
//	courier_outbox_pending                      gauge      events waiting to be published (pending or failed)
//	courier_outbox_oldest_pending_age_seconds   gauge      how long the oldest due event has been due
//	courier_outbox_publish_latency_seconds      histogram  enqueue to broker ack, per topic
//	courier_outbox_published_total              counter    events the broker acknowledged, per topic
//	courier_outbox_failures_total               counter    failed publishes, per topic and reason
//	courier_outbox_held_since_seconds           gauge      Unix time a partition has been held since, per topic and partition
//	courier_outbox_dead_lettered_total          counter    events that became dead_lettered, per topic
//	courier_outbox_breaker_state                gauge      0 closed, 1 half-open, 2 open
//	courier_outbox_claims_total                 counter    claim queries
//	courier_outbox_claimed_events_total         counter    events those queries claimed
//	courier_outbox_batch_stage_seconds          histogram  one stage of a batch, per stage: claim, publish, settle
//
// The per-topic metrics carry a topic label with one series per topic (and,
// for failures, per reason: held, refused, broker_unavailable or permanent). The
// stages of courier_outbox_batch_stage_seconds say where a batch's time goes:
// a claim and a settle are a round trip to PostgreSQL each, a publish the
// brokers' answer (acks=all), so on a network their sum is mostly waiting.
// application chooses its topics, so their number is bounded; courier never
// puts keys, event IDs or other unbounded values in labels.
//
// # Consumer metrics
//
// NewConsumerMetrics registers the consumer's metrics and returns a
// *ConsumerMetrics to list in consumer.Config.Hooks, and in
// consumer.BreakerConfig.Hooks for the breakers its handlers use:
//
//	courier_consumer_messages_total            counter    messages per topic and outcome: handled, retried, dead_lettered, deduplicated
//	courier_consumer_handler_seconds           histogram  one handler attempt, per topic
//	courier_consumer_inflight                  gauge      messages being handled (retry waits included), per topic
//	courier_consumer_breaker_state             gauge      per breaker: 0 closed, 1 half-open, 2 open
//	courier_consumer_lag                       gauge      per topic and partition held: records after the last marked offset
//	courier_consumer_oldest_in_flight_seconds  gauge      per topic and partition held: age of the oldest message taken and not settled, 0 for none
//
// retried counts retries, not messages: a message that succeeds on its
// third attempt counts twice as retried and once as handled. The lag is
// set when an offset is marked and every consumer.Config.ProgressInterval
// (15s) from the high-water mark read from the broker, as is the oldest
// in-flight age: a partition whose handler hangs shows both rising. Both
// series of a partition are deleted when the consumer gives it up
// (rebalance or shutdown), so summing the lag over all members counts
// each partition once. Consumers of different groups sharing a registry set
// ConsumerConfig.Group, a constant group label.
//
// # Dedupe metrics
//
// NewDedupeMetrics registers the metrics of the consumer's deduplication
// and returns a *DedupeMetrics to list in consumer.DedupeConfig.Hooks:
//
//	courier_dedupe_hits_total       counter    messages skipped: their ids were processed already
//	courier_dedupe_errors_total     counter    failed round trips to the store, per op: claim, extend, done, release
//	courier_dedupe_fail_open_total  counter    messages handled without deduplication while the store failed (consumer.DedupeConfig.FailOpen)
//	courier_dedupe_seconds          histogram  one round trip to the store (a batch of ids), per op
//
// The series of every op exist from the start, at 0. DedupeConfig.Group
// sets a constant group label, as ConsumerConfig.Group does; the two may
// share one registry.
//
// # Tenants
//
// Config.Tenants (and ConsumerConfig.Tenants) adds a tenant label to the
// counters of events and messages: courier_outbox_published_total,
// courier_outbox_failures_total, courier_outbox_dead_lettered_total and
// courier_consumer_messages_total (histograms and gauges keep their
// labels). A tenant on the list is its own value; any other tenant, and
// an event or message without one, is TenantOther ("other"). So a counter
// has at most len(Tenants)+1 series per topic, however many tenants the
// events carry. Without a list (the default) there is no tenant label.
//
// Metrics sets on one registry may list different tenants (two consumer
// groups, each its own), but every RelayMetrics on a registry must agree
// on whether Config.Tenants is set, and every ConsumerMetrics on whether
// ConsumerConfig.Tenants is: the tenant label changes a counter's label
// names, and Prometheus wants the same label names for every metric of one
// name. The constructor that disagrees returns an error naming Tenants.
//
// # Several relays in one process
//
// Relays that drain different outbox tables can share a registry when each
// sets Config.Table: it becomes a constant table label on every metric, so
// their series stay apart. Two RelayMetrics with the same Table (or both
// without one) on one registry collide, and the second NewRelayMetrics
// returns an error.
//
// The guide tells how to use it: [Observability].
//
// [Observability]: https://github.com/courierkit/courier/blob/main/docs/observability.md
package prom

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courierkit/courier/producer"
)

// Metric names.
const (
	NamePending          = "courier_outbox_pending"
	NameOldestPendingAge = "courier_outbox_oldest_pending_age_seconds"
	NamePublishLatency   = "courier_outbox_publish_latency_seconds"
	NamePublished        = "courier_outbox_published_total"
	NameFailures         = "courier_outbox_failures_total"
	NameDeadLettered     = "courier_outbox_dead_lettered_total"
	NameBreakerState     = "courier_outbox_breaker_state"
	NameClaims           = "courier_outbox_claims_total"
	NameClaimedEvents    = "courier_outbox_claimed_events_total"
	NameHeldSince        = "courier_outbox_held_since_seconds"
	NameBatchStage       = "courier_outbox_batch_stage_seconds"
)

// Label names.
const (
	LabelTopic  = "topic"
	LabelReason = "reason"
	// LabelStage is the stage of a batch: StageClaim, StagePublish or
	// StageSettle.
	LabelStage = "stage"
	// LabelTable is the constant label Config.Table sets.
	LabelTable = "table"
)

// DefaultBuckets returns the default upper bounds, in seconds, of
// courier_outbox_publish_latency_seconds: 1 ms to 1 min, roughly 1-2.5-5
// per decade. Each call returns a new slice.
func DefaultBuckets() []float64 {
	return []float64{
		0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
		1, 2.5, 5, 10, 30, 60,
	}
}

// ErrInvalidConfig is matched by every error NewRelayMetrics,
// NewConsumerMetrics and NewDedupeMetrics return for a bad config or a nil
// registerer.
var ErrInvalidConfig = errors.New("prom: invalid config")

// Config configures NewRelayMetrics. The zero value is ready to use.
type Config struct {
	// Table tells apart the relays of one process that share a registry,
	// typically the outbox table they drain ("shop.courier_outbox"). When
	// set, every metric carries it as the constant label table. Defaults
	// to "": no table label.
	Table string
	// Buckets are the upper bounds, in seconds, of the
	// courier_outbox_publish_latency_seconds histogram, in increasing
	// order; the +Inf bucket is implicit. Defaults to DefaultBuckets(),
	// 1 ms to 1 min.
	Buckets []float64
	// Tenants lists the tenants (producer.Event.TenantID) that get their
	// own value of the tenant label on the published, failures and
	// dead-lettered counters; every other tenant counts as TenantOther.
	// At most MaxTenants, each UTF-8, not empty and not "other". Defaults
	// to none: no tenant label.
	Tenants []string
}

// WithDefaults returns c as NewRelayMetrics runs it: Buckets a copy of
// itself, or DefaultBuckets() when empty; it never aliases the caller's
// Buckets.
func (c Config) WithDefaults() Config {
	c.Buckets = bucketsOrDefault(c.Buckets, DefaultBuckets)
	return c
}

// bucketsOrDefault returns a copy of buckets, or defaultBuckets() when
// there are none.
func bucketsOrDefault(buckets []float64, defaultBuckets func() []float64) []float64 {
	if len(buckets) == 0 {
		return defaultBuckets()
	}
	return slices.Clone(buckets)
}

// checkRegisterer refuses the nil registerer every constructor is given.
func checkRegisterer(reg prometheus.Registerer) error {
	if reg == nil {
		return fmt.Errorf("%w: the registerer is nil; pass prometheus.DefaultRegisterer or a registry from prometheus.NewRegistry()", ErrInvalidConfig)
	}
	return nil
}

// validGroup checks what the metrics of one consumer group are made
// from, ConsumerConfig's or DedupeConfig's, with its defaults applied: its
// Group and its histogram buckets.
func validGroup(group string, buckets []float64) error {
	if err := validLabel("Group", group); err != nil {
		return err
	}
	return validBuckets(buckets)
}

// groupLabels are the constant labels of the metrics of one consumer
// group: group, when set.
func groupLabels(group string) prometheus.Labels {
	if group == "" {
		return nil
	}
	return prometheus.Labels{LabelGroup: group}
}

// groupHints say how to fix a failed registration of the metrics of one
// consumer group (kind, configured by config) for register: collide when
// the same metrics are registered, differ when their label names differ,
// from Group and, if the config has it, Tenants.
func groupHints(kind, config, group string, tenants bool) (collide, differ string) {
	collide = "give each consumer its own registry or a distinct " + config + ".Group"
	if group != "" {
		collide = fmt.Sprintf("another %s with Group %q is registered; give each consumer a distinct %s.Group", kind, group, config)
	}
	differ = fmt.Sprintf("a %s with other label names is registered; every %s on one registry must agree on whether %s.Group is set", kind, kind, config)
	if tenants {
		differ += fmt.Sprintf(" and on whether %s.Tenants is set (the lists may differ)", config)
	}
	return collide, differ
}

// Validate returns the error NewRelayMetrics returns for c's own faults
// (matching ErrInvalidConfig), nil when it has none, so that a caller can
// refuse a config before it connects to anything.
func (c Config) Validate() error { return c.WithDefaults().validate() }

// validate refuses what c, its defaults applied, cannot run with.
func (c Config) validate() error {
	if err := validLabel("Table", c.Table); err != nil {
		return err
	}
	if _, err := newTenantLabel("Tenants", c.Tenants); err != nil {
		return err
	}
	return validBuckets(c.Buckets)
}

// validLabel checks the value of a constant label set from a config field.
func validLabel(field, value string) error {
	if !utf8.ValidString(value) {
		return fmt.Errorf("%w: %s %q is not valid UTF-8; Prometheus label values must be UTF-8", ErrInvalidConfig, field, value)
	}
	return nil
}

// validBuckets checks histogram upper bounds.
func validBuckets(buckets []float64) error {
	for i, b := range buckets {
		if math.IsNaN(b) {
			return fmt.Errorf("%w: Buckets[%d] is NaN; use finite upper bounds in seconds", ErrInvalidConfig, i)
		}
		if i > 0 && b <= buckets[i-1] {
			return fmt.Errorf("%w: Buckets[%d] = %g does not exceed Buckets[%d] = %g; list the upper bounds in strictly increasing order, or leave Buckets empty for DefaultBuckets()", ErrInvalidConfig, i, b, i-1, buckets[i-1])
		}
	}
	return nil
}

// named is a collector and the metric name it registers, for errors.
type named struct {
	name string
	c    prometheus.Collector
}

// family makes the metrics of one hook, with the hook's constant labels
// and histogram buckets, and keeps them, named, for register.
type family struct {
	labels  prometheus.Labels
	buckets []float64
	all     []named
}

// opts are the options every metric of the family shares.
func (f *family) opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Name: name, Help: help, ConstLabels: f.labels}
}

// keep lists c under name for register, and returns it.
func keep[C prometheus.Collector](f *family, name string, c C) C {
	f.all = append(f.all, named{name, c})
	return c
}

func (f *family) counter(name, help string) prometheus.Counter {
	return keep(f, name, prometheus.NewCounter(prometheus.CounterOpts(f.opts(name, help))))
}

func (f *family) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return keep(f, name, prometheus.NewCounterVec(prometheus.CounterOpts(f.opts(name, help)), labels))
}

func (f *family) gauge(name, help string) prometheus.Gauge {
	return keep(f, name, prometheus.NewGauge(prometheus.GaugeOpts(f.opts(name, help))))
}

func (f *family) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return keep(f, name, prometheus.NewGaugeVec(prometheus.GaugeOpts(f.opts(name, help)), labels))
}

func (f *family) histogramVec(name, help string, labels ...string) *prometheus.HistogramVec {
	o := f.opts(name, help)
	return keep(f, name, prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: o.Name, Help: o.Help, ConstLabels: o.ConstLabels, Buckets: f.buckets}, labels))
}

// register registers every collector, or none: on a failure it
// unregisters those already registered and returns an error ending in a
// hint: collide when reg holds the same metric with the same constant
// labels (a prometheus.AlreadyRegisteredError), differ when it holds one of
// the same name with other label names.
func register(reg prometheus.Registerer, collectors []named, collide, differ string) error {
	for i, c := range collectors {
		if err := reg.Register(c.c); err != nil {
			for _, done := range collectors[:i] {
				reg.Unregister(done.c)
			}
			hint := differ
			if errors.As(err, new(prometheus.AlreadyRegisteredError)) {
				hint = collide
			}
			return fmt.Errorf("prom: registering %s: %w (%s)", c.name, err, hint)
		}
	}
	return nil
}

// RelayMetrics is the Prometheus hook of the relay (see producer.Hook): it
// implements every hook interface. Its methods are safe for concurrent use
// and never block on I/O.
type RelayMetrics struct {
	pending          prometheus.Gauge
	oldestPendingAge prometheus.Gauge
	publishLatency   *prometheus.HistogramVec
	published        *prometheus.CounterVec
	failures         *prometheus.CounterVec
	deadLettered     *prometheus.CounterVec
	breakerState     prometheus.Gauge
	claims           prometheus.Counter
	claimedEvents    prometheus.Counter
	batchStage       *prometheus.HistogramVec
	heldSince        *prometheus.GaugeVec
	tenants          *tenantLabel
}

// RelayMetrics hears of every measurement of the relay.
var (
	_ producer.ClaimedHook        = (*RelayMetrics)(nil)
	_ producer.BatchHook          = (*RelayMetrics)(nil)
	_ producer.PublishedHook      = (*RelayMetrics)(nil)
	_ producer.PublishFailedHook  = (*RelayMetrics)(nil)
	_ producer.DeadLetteredHook   = (*RelayMetrics)(nil)
	_ producer.BreakerChangedHook = (*RelayMetrics)(nil)
	_ producer.BacklogHook        = (*RelayMetrics)(nil)
	_ producer.HeldHook           = (*RelayMetrics)(nil)
)

// NewRelayMetrics creates the relay's metrics and registers them on reg
// (prometheus.DefaultRegisterer, or a registry of your own). It returns an
// error, and registers nothing, if cfg is invalid or a metric cannot be
// registered, typically because reg already holds the metrics of a relay
// with the same Config.Table; errors.As finds the
// prometheus.AlreadyRegisteredError then.
func NewRelayMetrics(reg prometheus.Registerer, cfg Config) (*RelayMetrics, error) {
	if err := checkRegisterer(reg); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var constLabels prometheus.Labels
	if cfg.Table != "" {
		constLabels = prometheus.Labels{LabelTable: cfg.Table}
	}
	tl, _ := newTenantLabel("Tenants", cfg.Tenants) // checked by validate

	f := &family{labels: constLabels, buckets: cfg.Buckets}
	m := &RelayMetrics{
		pending: f.gauge(NamePending,
			"Outbox events waiting to be published (status pending or failed, due now or later), measured every RelayConfig.StatsInterval."),
		oldestPendingAge: f.gauge(NameOldestPendingAge,
			"Seconds the oldest due outbox event has waited since it became due (its next_attempt_at), 0 when none is due, measured every RelayConfig.StatsInterval."),
		publishLatency: f.histogramVec(NamePublishLatency,
			"Seconds from an event's enqueue to the broker's acknowledgement of its publish, per topic.", LabelTopic),
		published: f.counterVec(NamePublished,
			tl.help("Outbox events the broker acknowledged, per topic."), tl.names(LabelTopic)...),
		failures: f.counterVec(NameFailures,
			tl.help("Failed publishes, per topic and reason: held (the cluster's condition: no leader, too few in-sync replicas, a timeout; no attempt counted, the partition is held), refused (the broker refused the record; an attempt counted, retried after a backoff), broker_unavailable (Kafka unreachable; no attempt counted) or permanent (the event is dead-lettered)."), tl.names(LabelTopic, LabelReason)...),
		deadLettered: f.counterVec(NameDeadLettered,
			tl.help("Outbox events that became dead_lettered (a permanent failure or retries exhausted), per topic."), tl.names(LabelTopic)...),
		breakerState: f.gauge(NameBreakerState,
			"State of the relay's circuit breaker around Kafka: 0 closed, 1 half-open, 2 open."),
		claims: f.counter(NameClaims,
			"Claim queries the relay ran against the outbox table, including those that found nothing."),
		claimedEvents: f.counter(NameClaimedEvents,
			"Outbox events the claim queries locked for publishing."),
		batchStage: f.histogramVec(NameBatchStage,
			"Seconds one stage of a relay's batch took, per stage: claim (a round trip to PostgreSQL that reads the events), publish (until the brokers answered every record; batches that published nothing are not observed) and settle (recording the outcomes and the commit).", LabelStage),
		heldSince: f.gaugeVec(NameHeldSince,
			"Unix time since which the cluster's condition (no leader, too few in-sync replicas, timeouts, refused access) holds a partition's events, per topic and partition (-1: the whole topic); no series while none is held.",
			LabelTopic, LabelPartition),
		tenants: tl,
	}

	collide := "give each relay its own registry or a distinct Config.Table"
	if cfg.Table != "" {
		collide = fmt.Sprintf("another RelayMetrics with Table %q is registered; give each relay a distinct Config.Table", cfg.Table)
	}
	const differ = "a RelayMetrics with other label names is registered; every RelayMetrics on one registry must agree on whether Config.Table is set and on whether Config.Tenants is set (the lists may differ)"
	err := register(reg, f.all, collide, differ)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Stage values of LabelStage.
const (
	StageClaim   = "claim"
	StagePublish = "publish"
	StageSettle  = "settle"
)

// Batch observes the stages of a batch, in seconds: the publish only when
// the batch published.
func (m *RelayMetrics) Batch(_ int, s producer.BatchStages) {
	m.batchStage.WithLabelValues(StageClaim).Observe(s.Claim.Seconds())
	if s.Publish > 0 {
		m.batchStage.WithLabelValues(StagePublish).Observe(s.Publish.Seconds())
	}
	m.batchStage.WithLabelValues(StageSettle).Observe(s.Settle.Seconds())
}

// Claimed counts one claim query and the events it locked.
func (m *RelayMetrics) Claimed(events int) {
	m.claims.Inc()
	if events > 0 {
		m.claimedEvents.Add(float64(events))
	}
}

// Published counts an acknowledged event and observes its enqueue-to-ack
// latency in seconds. A negative latency (clock skew between PostgreSQL and
// the relay) is observed as 0. It counts as TenantPublished with no tenant.
func (m *RelayMetrics) Published(topic string, latency time.Duration) {
	m.TenantPublished(topic, "", latency)
}

// TenantPublished is Published of an event of tenant: with Config.Tenants
// set, it counts under the tenant's value of the tenant label.
func (m *RelayMetrics) TenantPublished(topic, tenant string, latency time.Duration) {
	m.published.WithLabelValues(m.tenants.values(tenant, topic)...).Inc()
	m.publishLatency.WithLabelValues(topic).Observe(max(latency, 0).Seconds())
}

// PublishFailed counts a failed publish attempt under its topic and
// reason, as TenantPublishFailed with no tenant.
func (m *RelayMetrics) PublishFailed(topic, reason string) {
	m.TenantPublishFailed(topic, "", reason)
}

// TenantPublishFailed is PublishFailed of an event of tenant.
func (m *RelayMetrics) TenantPublishFailed(topic, tenant, reason string) {
	m.failures.WithLabelValues(m.tenants.values(tenant, topic, reason)...).Inc()
}

// DeadLettered counts an event that became dead_lettered, as
// TenantDeadLettered with no tenant.
func (m *RelayMetrics) DeadLettered(topic string) {
	m.TenantDeadLettered(topic, "")
}

// TenantDeadLettered is DeadLettered of an event of tenant.
func (m *RelayMetrics) TenantDeadLettered(topic, tenant string) {
	m.deadLettered.WithLabelValues(m.tenants.values(tenant, topic)...).Inc()
}

// BreakerChanged sets courier_outbox_breaker_state to the state's number.
func (m *RelayMetrics) BreakerChanged(state producer.BreakerState) {
	m.breakerState.Set(float64(state))
}

// Held sets courier_outbox_held_since_seconds of the partition to since.
func (m *RelayMetrics) Held(topic string, partition int32, since time.Time) {
	m.heldSince.WithLabelValues(topic, strconv.FormatInt(int64(partition), 10)).Set(float64(since.UnixNano()) / 1e9)
}

// Unheld deletes the partition's courier_outbox_held_since_seconds series.
func (m *RelayMetrics) Unheld(topic string, partition int32) {
	m.heldSince.DeleteLabelValues(topic, strconv.FormatInt(int64(partition), 10))
}

// Backlog sets the pending and oldest-pending-age gauges.
func (m *RelayMetrics) Backlog(waiting int64, oldestDueAge time.Duration) {
	m.pending.Set(float64(waiting))
	m.oldestPendingAge.Set(max(oldestDueAge, 0).Seconds())
}
