package producer

import "time"

// BreakerState is the state of the relay's circuit breaker around Kafka.
type BreakerState int

// Breaker states; the numbers are what courier_outbox_breaker_state reports.
const (
	BreakerClosed   BreakerState = 0
	BreakerHalfOpen BreakerState = 1
	BreakerOpen     BreakerState = 2
)

func (s BreakerState) String() string {
	switch s {
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	default:
		return "closed"
	}
}

// RelayMetrics receives the relay's measurements. The relay calls it on its
// hot path, so implementations must return at once: update a counter, never
// do I/O. package prom has the Prometheus implementation.
type RelayMetrics interface {
	// Claimed reports one claim query and how many events it locked.
	Claimed(events int)
	// Published reports an event the broker acknowledged, with the time from
	// its enqueue to the acknowledgement.
	Published(topic string, latency time.Duration)
	// PublishFailed reports a failed publish attempt; reason is
	// "retriable", "broker_unavailable" or "permanent".
	PublishFailed(topic, reason string)
	// DeadLettered reports an event that became dead_lettered.
	DeadLettered(topic string)
	// BreakerChanged reports a new circuit breaker state.
	BreakerChanged(state BreakerState)
	// Backlog reports the events waiting to be published (pending or failed)
	// and the age of the oldest due one, every RelayConfig.StatsInterval.
	Backlog(waiting int64, oldestDueAge time.Duration)
}

// noMetrics is the RelayMetrics used when none is configured.
type noMetrics struct{}

func (noMetrics) Claimed(int)                     {}
func (noMetrics) Published(string, time.Duration) {}
func (noMetrics) PublishFailed(string, string)    {}
func (noMetrics) DeadLettered(string)             {}
func (noMetrics) BreakerChanged(BreakerState)     {}
func (noMetrics) Backlog(int64, time.Duration)    {}
