package prom

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"github.com/courierkit/courier/consumer"
)

// Consumer metric names.
const (
	NameConsumerMessages       = "courier_consumer_messages_total"
	NameConsumerHandlerSeconds = "courier_consumer_handler_seconds"
	NameConsumerInFlight       = "courier_consumer_inflight"
	NameConsumerBreakerState   = "courier_consumer_breaker_state"
	NameConsumerLag            = "courier_consumer_lag"
	NameConsumerOldestInFlight = "courier_consumer_oldest_in_flight_seconds"
)

// Consumer label names.
const (
	LabelOutcome   = "outcome"
	LabelPartition = "partition"
	LabelBreaker   = "breaker"
	// LabelGroup is the constant label ConsumerConfig.Group sets.
	LabelGroup = "group"
)

// ConsumerConfig configures NewConsumerMetrics. The zero value is ready to
// use.
type ConsumerConfig struct {
	// Group tells apart the consumers of one process that share a
	// registry, typically their consumer group. When set, every metric
	// carries it as the constant label group. Defaults to "": no group
	// label.
	Group string
	// Buckets are the upper bounds, in seconds, of the
	// courier_consumer_handler_seconds histogram, in increasing order.
	// Defaults to DefaultBuckets(), 1 ms to 1 min.
	Buckets []float64
	// Tenants lists the tenants (consumer.Message.TenantID) that get their
	// own value of the tenant label on courier_consumer_messages_total;
	// every other tenant counts as TenantOther. At most MaxTenants, each
	// UTF-8, not empty and not "other". Defaults to none: no tenant label.
	Tenants []string
}

// WithDefaults returns c as NewConsumerMetrics runs it: Buckets a copy of
// itself, or DefaultBuckets() when empty; it never aliases the caller's
// Buckets.
func (c ConsumerConfig) WithDefaults() ConsumerConfig {
	c.Buckets = bucketsOrDefault(c.Buckets, DefaultBuckets)
	return c
}

// validate refuses what c, its defaults applied, cannot run with.
func (c ConsumerConfig) validate() error {
	if _, err := newTenantLabel("Tenants", c.Tenants); err != nil {
		return err
	}
	return validGroup(c.Group, c.Buckets)
}

// ConsumerMetrics is the Prometheus implementation of the consumer's hook
// interfaces (consumer.Hook); list it in consumer.Config.Hooks and
// consumer.BreakerConfig.Hooks.
// Its methods are safe for concurrent use and never block on I/O.
type ConsumerMetrics struct {
	messages     *prometheus.CounterVec
	handler      *prometheus.HistogramVec
	inFlight     *prometheus.GaugeVec
	breakerState *prometheus.GaugeVec
	lag          *prometheus.GaugeVec
	oldest       *prometheus.GaugeVec
	tenants      *tenantLabel
}

// ConsumerMetrics implements every consumer hook interface.
var (
	_ consumer.MessageHook         = (*ConsumerMetrics)(nil)
	_ consumer.HandlerDurationHook = (*ConsumerMetrics)(nil)
	_ consumer.InFlightHook        = (*ConsumerMetrics)(nil)
	_ consumer.BreakerChangedHook  = (*ConsumerMetrics)(nil)
	_ consumer.LagHook             = (*ConsumerMetrics)(nil)
	_ consumer.OldestInFlightHook  = (*ConsumerMetrics)(nil)
	_ consumer.ReleasedHook        = (*ConsumerMetrics)(nil)
)

// NewConsumerMetrics creates the consumer's metrics and registers them on
// reg. It returns an error, and registers nothing, if cfg is invalid or a
// metric cannot be registered, typically because reg already holds the
// metrics of a consumer with the same ConsumerConfig.Group, or of one that
// differs in whether Group or Tenants is set (see the package doc).
func NewConsumerMetrics(reg prometheus.Registerer, cfg ConsumerConfig) (*ConsumerMetrics, error) {
	if err := checkRegisterer(reg); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	f := &family{labels: groupLabels(cfg.Group), buckets: cfg.Buckets}
	tl, _ := newTenantLabel("Tenants", cfg.Tenants) // checked by validate
	m := &ConsumerMetrics{
		messages: f.counterVec(NameConsumerMessages,
			tl.help("Messages by outcome, per topic: handled, retried (once per retry scheduled), dead_lettered, deduplicated."), tl.names(LabelTopic, LabelOutcome)...),
		handler: f.histogramVec(NameConsumerHandlerSeconds,
			"Seconds one handler attempt took, failed or not, per topic.", LabelTopic),
		inFlight: f.gaugeVec(NameConsumerInFlight,
			"Messages being handled, retry waits included, per topic.", LabelTopic),
		breakerState: f.gaugeVec(NameConsumerBreakerState,
			"State of each consumer.Breaker: 0 closed, 1 half-open, 2 open.", LabelBreaker),
		lag: f.gaugeVec(NameConsumerLag,
			"Records of a partition held by this consumer after the last one whose offset was marked, from its high-water mark (read every consumer.Config.ProgressInterval).", LabelTopic, LabelPartition),
		oldest: f.gaugeVec(NameConsumerOldestInFlight,
			"Seconds the oldest message of a partition held by this consumer has been in flight (taken, not yet settled); 0 for none.", LabelTopic, LabelPartition),
		tenants: tl,
	}
	collide, differ := groupHints("ConsumerMetrics", "ConsumerConfig", cfg.Group, true)
	err := register(reg, f.all, collide, differ)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Message counts a message's outcome, as TenantMessage with no tenant.
func (m *ConsumerMetrics) Message(topic string, outcome consumer.Outcome) {
	m.TenantMessage(topic, "", outcome)
}

// TenantMessage counts the outcome of a message of tenant: with
// ConsumerConfig.Tenants set, under the tenant's value of the tenant
// label.
func (m *ConsumerMetrics) TenantMessage(topic, tenant string, outcome consumer.Outcome) {
	m.messages.WithLabelValues(m.tenants.values(tenant, topic, string(outcome))...).Inc()
}

// HandlerDuration observes one attempt's duration in seconds.
func (m *ConsumerMetrics) HandlerDuration(topic string, d time.Duration) {
	m.handler.WithLabelValues(topic).Observe(max(d, 0).Seconds())
}

// InFlight adds delta to the messages of topic being handled.
func (m *ConsumerMetrics) InFlight(topic string, delta int) {
	m.inFlight.WithLabelValues(topic).Add(float64(delta))
}

// BreakerChanged sets courier_consumer_breaker_state of the breaker to the
// state's number (gobreaker's: 0 closed, 1 half-open, 2 open).
func (m *ConsumerMetrics) BreakerChanged(name string, state gobreaker.State) {
	m.breakerState.WithLabelValues(name).Set(float64(state))
}

// Lag sets the partition's lag.
func (m *ConsumerMetrics) Lag(topic string, partition int32, lag int64) {
	m.lag.WithLabelValues(topic, strconv.FormatInt(int64(partition), 10)).Set(float64(lag))
}

// OldestInFlight sets the age, in seconds, of the partition's oldest
// message in flight.
func (m *ConsumerMetrics) OldestInFlight(topic string, partition int32, age time.Duration) {
	m.oldest.WithLabelValues(topic, strconv.FormatInt(int64(partition), 10)).Set(max(age, 0).Seconds())
}

// Released deletes the partition's lag and oldest in-flight series:
// another member reports them now.
func (m *ConsumerMetrics) Released(topic string, partition int32) {
	p := strconv.FormatInt(int64(partition), 10)
	m.lag.DeleteLabelValues(topic, p)
	m.oldest.DeleteLabelValues(topic, p)
}
