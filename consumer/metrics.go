package consumer

import (
	"fmt"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/courierkit/courier/dedupe"
)

// Outcome is what became of a message, or of one of its attempts, for
// MessageHook.
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

// Hook is a value implementing one or more of the package's *Hook
// interfaces (MessageHook or TenantMessageHook, HandlerDurationHook,
// InFlightHook, BreakerChangedHook, LagHook, OldestInFlightHook,
// ReleasedHook), each a
// measurement it wants; list it in Config.Hooks (and BreakerConfig.Hooks).
// New sorts the hooks by interface once, and refuses a hook implementing
// none of them. A new measurement is a new interface, so adding one breaks
// no hook. The consumer calls hooks on its hot path, from many goroutines:
// they must be safe for concurrent use and return at once (update a
// counter, never do I/O). Package prom's ConsumerMetrics implements them
// all.
type Hook any

// MessageHook is told each outcome of a message of topic.
type MessageHook interface {
	Message(topic string, outcome Outcome)
}

// TenantMessageHook is MessageHook with the message's tenant
// (Message.TenantID, "" for none). A hook implementing both is told only
// through this one.
type TenantMessageHook interface {
	TenantMessage(topic, tenant string, outcome Outcome)
}

// HandlerDurationHook is told how long one handler attempt took, failed or
// not.
type HandlerDurationHook interface {
	HandlerDuration(topic string, d time.Duration)
}

// InFlightHook is told delta (+1 or -1) of the messages of topic being
// handled, retry waits included.
type InFlightHook interface {
	InFlight(topic string, delta int)
}

// BreakerChangedHook is told each new state of the named Breaker.
type BreakerChangedHook interface {
	BreakerChanged(name string, state gobreaker.State)
}

// LagHook is told how many records of a partition follow the last one
// whose offset was marked: when an offset is marked, and every
// Config.ProgressInterval from the high-water mark read from the broker,
// so that the lag of a partition whose handler hangs still rises.
type LagHook interface {
	Lag(topic string, partition int32, lag int64)
}

// OldestInFlightHook is told, every Config.ProgressInterval, how long the
// oldest message of a partition taken and not yet settled has been in
// flight: its handler running, its retry or breaker waits, its write to a
// retry or dead-letter topic. A retry record counts from when its tier's
// delay is over. The age is 0 when no message is in flight; one that only
// grows is a stuck partition.
type OldestInFlightHook interface {
	OldestInFlight(topic string, partition int32, age time.Duration)
}

// ReleasedHook is told that this consumer no longer holds the partition
// (rebalance or shutdown): forget its lag and oldest in-flight age.
type ReleasedHook interface {
	Released(topic string, partition int32)
}

// hooks are a list of Hooks sorted by interface.
type hooks struct {
	message         []MessageHook
	tenantMessage   []TenantMessageHook
	handlerDuration []HandlerDurationHook
	inFlight        []InFlightHook
	breakerChanged  []BreakerChangedHook
	lag             []LagHook
	oldestInFlight  []OldestInFlightHook
	released        []ReleasedHook
}

// sortHooks sorts list, the Config field named field, by interface; it
// refuses a hook implementing none of them.
func sortHooks(field string, list []Hook) (*hooks, error) {
	h := &hooks{}
	for i, hook := range list {
		n := sortEither(hook, &h.tenantMessage, &h.message) + sortHook(hook, &h.handlerDuration) + sortHook(hook, &h.inFlight) +
			sortHook(hook, &h.breakerChanged) + sortHook(hook, &h.lag) + sortHook(hook, &h.oldestInFlight) + sortHook(hook, &h.released)
		if n == 0 {
			return nil, fmt.Errorf("%w: %s[%d] (%T) implements none of MessageHook, TenantMessageHook, HandlerDurationHook, InFlightHook, "+
				"BreakerChangedHook, LagHook, OldestInFlightHook and ReleasedHook; check its method names and signatures", ErrInvalidConfig, field, i, hook)
		}
	}
	return h, nil
}

// sortHook appends hook to list when it implements T, and returns 1 then.
func sortHook[T any](hook Hook, list *[]T) int {
	if t, ok := hook.(T); ok {
		*list = append(*list, t)
		return 1
	}
	return 0
}

// sortEither appends hook to *tenant when it implements T (the tenant's
// variant of a measurement), else to *plain when it implements P, and
// returns 1 when it did either: a hook is told of a measurement once.
func sortEither[T, P any](hook Hook, tenant *[]T, plain *[]P) int {
	if sortHook(hook, tenant) == 1 {
		return 1
	}
	return sortHook(hook, plain)
}

func (h *hooks) Message(m *Message, outcome Outcome) {
	for _, x := range h.message {
		x.Message(m.Topic, outcome)
	}
	for _, x := range h.tenantMessage {
		x.TenantMessage(m.Topic, m.TenantID, outcome)
	}
}

func (h *hooks) HandlerDuration(topic string, d time.Duration) {
	for _, x := range h.handlerDuration {
		x.HandlerDuration(topic, d)
	}
}

func (h *hooks) InFlight(topic string, delta int) {
	for _, x := range h.inFlight {
		x.InFlight(topic, delta)
	}
}

func (h *hooks) BreakerChanged(name string, state gobreaker.State) {
	for _, x := range h.breakerChanged {
		x.BreakerChanged(name, state)
	}
}

func (h *hooks) Lag(topic string, partition int32, lag int64) {
	for _, x := range h.lag {
		x.Lag(topic, partition, lag)
	}
}

func (h *hooks) OldestInFlight(topic string, partition int32, age time.Duration) {
	for _, x := range h.oldestInFlight {
		x.OldestInFlight(topic, partition, age)
	}
}

func (h *hooks) Released(topic string, partition int32) {
	for _, x := range h.released {
		x.Released(topic, partition)
	}
}

// dedupeHooks are a list of dedupe.Hooks sorted by interface.
type dedupeHooks struct {
	hits       []dedupe.HitsHook
	errors     []dedupe.ErrorHook
	failedOpen []dedupe.FailedOpenHook
	latency    []dedupe.LatencyHook
}

// sortDedupeHooks sorts Dedupe.Hooks by interface; it refuses a hook
// implementing none of them.
func sortDedupeHooks(list []dedupe.Hook) (*dedupeHooks, error) {
	h := &dedupeHooks{}
	for i, hook := range list {
		if sortHook(hook, &h.hits)+sortHook(hook, &h.errors)+sortHook(hook, &h.failedOpen)+sortHook(hook, &h.latency) == 0 {
			return nil, fmt.Errorf("%w: Dedupe.Hooks[%d] (%T) implements none of dedupe.HitsHook, ErrorHook, FailedOpenHook and LatencyHook; "+
				"check its method names and signatures", ErrInvalidConfig, i, hook)
		}
	}
	return h, nil
}

func (h *dedupeHooks) Hits(n int) {
	for _, x := range h.hits {
		x.Hits(n)
	}
}

func (h *dedupeHooks) Error(op dedupe.Op) {
	for _, x := range h.errors {
		x.Error(op)
	}
}

func (h *dedupeHooks) FailedOpen(n int) {
	for _, x := range h.failedOpen {
		x.FailedOpen(n)
	}
}

func (h *dedupeHooks) Latency(op dedupe.Op, n int, d time.Duration) {
	for _, x := range h.latency {
		x.Latency(op, n, d)
	}
}
