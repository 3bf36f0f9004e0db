package consumer

import (
	"time"

	"github.com/sony/gobreaker/v2"
)

// Outcome is what became of a message, or of one of its attempts, for
// Metrics.Message.
type Outcome string

// Outcomes, the values of the outcome label of
// courier_consumer_messages_total.
const (
	// OutcomeHandled: the handler returned nil; the offset is marked.
	OutcomeHandled Outcome = "handled"
	// OutcomeRetried: an attempt failed and another one is scheduled.
	// Reported once per retry, so a message can count several times.
	OutcomeRetried Outcome = "retried"
	// OutcomeDeadLettered: the message is on its dead-letter topic; the
	// offset is marked.
	OutcomeDeadLettered Outcome = "dead_lettered"
	// OutcomeDeduplicated: the dedupe store found the message processed
	// already; the handler was not called and the offset is marked.
	OutcomeDeduplicated Outcome = "deduplicated"
	// OutcomeSentToRetry: the message's attempts ran out and it is on its
	// next retry topic; the offset is marked.
	OutcomeSentToRetry Outcome = "sent_to_retry"
	// OutcomeDeferred: an earlier message of its key waits in a retry
	// tier (Config.KeyOrder), so the message was sent to a retry topic to
	// follow it, without being handled; the offset is marked.
	OutcomeDeferred Outcome = "deferred"
)

// Metrics receives the consumer's measurements. The consumer calls it on its
// hot path, from many goroutines, so implementations must be safe for
// concurrent use and return at once: update a counter, never do I/O.
// Package prom has the Prometheus implementation.
type Metrics interface {
	// Message reports an outcome of a message of topic.
	Message(topic string, outcome Outcome)
	// HandlerDuration reports how long one handler attempt took, failed
	// or not.
	HandlerDuration(topic string, d time.Duration)
	// InFlight adds delta (+1 or -1) to the messages of topic being
	// handled, retry waits included.
	InFlight(topic string, delta int)
	// BreakerChanged reports a new state of the named Breaker.
	BreakerChanged(name string, state gobreaker.State)
	// Lag reports how many records of a partition follow the last one
	// whose offset was marked, from the claim's high-water mark.
	Lag(topic string, partition int32, lag int64)
	// Released reports that this consumer no longer holds the partition
	// (rebalance or shutdown): forget its lag.
	Released(topic string, partition int32)
}

// noMetrics is the Metrics used when none is configured.
type noMetrics struct{}

func (noMetrics) Message(string, Outcome) {}

func (noMetrics) HandlerDuration(string, time.Duration) {}

func (noMetrics) InFlight(string, int) {}

func (noMetrics) BreakerChanged(string, gobreaker.State) {}

func (noMetrics) Lag(string, int32, int64) {}

func (noMetrics) Released(string, int32) {}
