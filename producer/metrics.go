package producer

import (
	"fmt"
	"slices"
	"time"
)

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

// Hook is a value implementing one or more of the hook interfaces:
// ClaimedHook, BatchHook, PublishedHook, PublishFailedHook, DeadLetteredHook,
// BreakerChangedHook, BacklogHook and HeldHook, or the tenant's variants of three
// of them (TenantPublishedHook, TenantPublishFailedHook,
// TenantDeadLetteredHook). RelayConfig.Hooks takes any number
// of them; the relay calls each for the measurements of the interfaces it
// implements, so a hook implements only what it needs, and a measurement
// added later breaks no hook. The relay calls them on its hot path:
// return at once (update a counter, never do I/O). package prom has a
// hook implementing them all.
type Hook any

// ClaimedHook hears of each claim query and how many events it locked.
type ClaimedHook interface {
	Claimed(events int)
}

// PublishedHook hears of each event the broker acknowledged, with the time
// from its enqueue to the acknowledgement.
type PublishedHook interface {
	Published(topic string, latency time.Duration)
}

// PublishFailedHook hears of each failed publish; reason is "held" (the
// cluster's condition: no attempt counted, the partition is held),
// "refused" (the record refused, retried with an attempt counted),
// "broker_unavailable" (Kafka unreachable, no attempt counted) or
// "permanent" (dead-lettered).
type PublishFailedHook interface {
	PublishFailed(topic, reason string)
}

// DeadLetteredHook hears of each event that became dead_lettered.
type DeadLetteredHook interface {
	DeadLettered(topic string)
}

// TenantPublishedHook is PublishedHook with the event's tenant
// (Event.TenantID, "" for none). A hook implementing both is called only
// through this one.
type TenantPublishedHook interface {
	TenantPublished(topic, tenant string, latency time.Duration)
}

// TenantPublishFailedHook is PublishFailedHook with the event's tenant. A
// hook implementing both is called only through this one.
type TenantPublishFailedHook interface {
	TenantPublishFailed(topic, tenant, reason string)
}

// TenantDeadLetteredHook is DeadLetteredHook with the event's tenant. A
// hook implementing both is called only through this one.
type TenantDeadLetteredHook interface {
	TenantDeadLettered(topic, tenant string)
}

// BreakerChangedHook hears of each new state of the circuit breaker.
type BreakerChangedHook interface {
	BreakerChanged(state BreakerState)
}

// HeldHook hears when the cluster's condition starts holding a partition's
// events (see RelayConfig.MaxAttempts), since when, and when the hold ends:
// the partition took an event again, or none was left to try. partition is
// -1 for a whole topic: one whose partitions could not be looked up, or
// the events of a RelayConfig.Publisher that does not say where a record
// went.
type HeldHook interface {
	Held(topic string, partition int32, since time.Time)
	Unheld(topic string, partition int32)
}

// BatchHook hears of each batch that claimed events, once its outcome is
// committed, with how long each of its stages took: where a batch's time
// goes, which on a network is mostly waiting (see BatchStages). A claim
// that found nothing is not a batch.
type BatchHook interface {
	Batch(events int, stages BatchStages)
}

// BatchStages are the stages of one batch of a worker, one after the
// other: the time from the first to the last event is their sum.
type BatchStages struct {
	// Claim is the claim: one round trip to PostgreSQL that begins the
	// batch's transaction, takes the worker's shares and reads the events.
	Claim time.Duration
	// Publish is the write to Kafka, until the brokers answered every
	// record (retries of the cluster's condition included); zero when the
	// batch published nothing (every event held back).
	Publish time.Duration
	// Settle records the outcomes and commits: one more round trip, or
	// one per event when PostgreSQL refused an outcome (see RunOnce).
	Settle time.Duration
}

// BacklogHook hears, every RelayConfig.StatsInterval, of the events
// waiting to be published (pending or failed) and the age of the oldest due
// one. Without one, the relay does not measure the backlog.
type BacklogHook interface {
	Backlog(waiting int64, oldestDueAge time.Duration)
}

// hooks are RelayConfig.Hooks sorted by interface, once, at NewRelay, so
// that a measurement costs no type assertion; each is called in the order
// of RelayConfig.Hooks.
type hooks struct {
	claimed        []ClaimedHook
	batch          []BatchHook
	published      []PublishedHook
	publishFailed  []PublishFailedHook
	deadLettered   []DeadLetteredHook
	breakerChanged []BreakerChangedHook
	backlog        []BacklogHook
	held           []HeldHook

	tenantPublished     []TenantPublishedHook
	tenantPublishFailed []TenantPublishFailedHook
	tenantDeadLettered  []TenantDeadLetteredHook
}

// newHooks sorts hs by interface; a hook implementing none of them is
// refused, by its index and type.
func newHooks(hs []Hook) (hooks, error) {
	var h hooks
	for i, hook := range hs {
		matched := []bool{
			appendIf(&h.claimed, hook), appendIf(&h.batch, hook), appendEither(&h.tenantPublished, &h.published, hook),
			appendEither(&h.tenantPublishFailed, &h.publishFailed, hook), appendEither(&h.tenantDeadLettered, &h.deadLettered, hook),
			appendIf(&h.breakerChanged, hook), appendIf(&h.backlog, hook), appendIf(&h.held, hook),
		}
		if !slices.Contains(matched, true) {
			return hooks{}, fmt.Errorf("Hooks[%d] is a %T, which implements none of ClaimedHook, BatchHook, PublishedHook, PublishFailedHook, "+
				"DeadLetteredHook, BreakerChangedHook, BacklogHook and HeldHook (or their Tenant variants); give it one of their methods, or leave it out", i, hook)
		}
	}
	return h, nil
}

// appendIf appends hook to *s when it implements T, and reports whether
// it does.
func appendIf[T any](s *[]T, hook Hook) bool {
	t, ok := hook.(T)
	if ok {
		*s = append(*s, t)
	}
	return ok
}

// appendEither appends hook to *tenant when it implements T (the tenant's
// variant of a measurement), else to *plain when it implements P, and
// reports whether it did either: a hook hears of a measurement once.
func appendEither[T, P any](tenant *[]T, plain *[]P, hook Hook) bool {
	return appendIf(tenant, hook) || appendIf(plain, hook)
}

func (h *hooks) Claimed(events int) {
	for _, x := range h.claimed {
		x.Claimed(events)
	}
}

func (h *hooks) Batch(events int, stages BatchStages) {
	for _, x := range h.batch {
		x.Batch(events, stages)
	}
}

func (h *hooks) Published(topic, tenant string, latency time.Duration) {
	for _, x := range h.published {
		x.Published(topic, latency)
	}
	for _, x := range h.tenantPublished {
		x.TenantPublished(topic, tenant, latency)
	}
}

func (h *hooks) PublishFailed(topic, tenant, reason string) {
	for _, x := range h.publishFailed {
		x.PublishFailed(topic, reason)
	}
	for _, x := range h.tenantPublishFailed {
		x.TenantPublishFailed(topic, tenant, reason)
	}
}

func (h *hooks) DeadLettered(topic, tenant string) {
	for _, x := range h.deadLettered {
		x.DeadLettered(topic)
	}
	for _, x := range h.tenantDeadLettered {
		x.TenantDeadLettered(topic, tenant)
	}
}

func (h *hooks) BreakerChanged(state BreakerState) {
	for _, x := range h.breakerChanged {
		x.BreakerChanged(state)
	}
}

func (h *hooks) Held(topic string, partition int32, since time.Time) {
	for _, x := range h.held {
		x.Held(topic, partition, since)
	}
}

func (h *hooks) Unheld(topic string, partition int32) {
	for _, x := range h.held {
		x.Unheld(topic, partition)
	}
}

func (h *hooks) Backlog(waiting int64, oldestDueAge time.Duration) {
	for _, x := range h.backlog {
		x.Backlog(waiting, oldestDueAge)
	}
}

// tenant is the event's TenantID, "" for none, as the hooks hear it.
func (e *claimedEvent) tenant() string {
	if e.TenantID == nil {
		return ""
	}
	return *e.TenantID
}
