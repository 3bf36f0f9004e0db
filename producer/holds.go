package producer

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/dlq"
)

// anyPartition is the partition of a hold on a whole topic: one whose
// partitions could not be looked up (a topic not created yet), or an event
// whose publisher (RelayConfig.Publisher) does not say where it went.
const anyPartition int32 = -1

// holds are the partitions that the cluster's condition holds (see
// failHeld): since when, until when their events wait, and why. The relay
// fills them from the outcome of its publishes. Its own publisher reads
// them to fail a held partition's records at once, unsent, until the hold
// is up, so that a batch's healthy partitions do not wait for a sick one's
// retries; then one batch tries the partition again. Each failure of a
// partition whose hold is up holds it for the next step of
// RelayConfig.Backoff; an acknowledgement ends the hold.
type holds struct {
	now     func() time.Time // RelayConfig.Now
	backoff backoff.Backoff
	log     *slog.Logger
	hooks   *hooks

	// none is set while both maps are empty, as they are while Kafka takes
	// every write: the publisher's checks and the relay's acknowledgements
	// then cost no lock.
	none    atomic.Bool
	mu      sync.Mutex
	m       map[topicPartition]*hold
	missing map[string]*missing // topics the cluster says do not exist
}

// missing is a topic the cluster said does not exist: since when, and when
// it last said so.
type missing struct{ since, last time.Time }

// hold is one held partition.
type hold struct {
	since   time.Time // the first failure
	until   time.Time // its events wait until then
	last    time.Time // the last failure
	steps   int       // backoff steps taken
	err     error     // the last failure
	missing bool      // it began with the topic said not to exist
}

func newHolds(now func() time.Time, b backoff.Backoff, log *slog.Logger, h *hooks) *holds {
	hs := &holds{now: now, backoff: b, log: log, hooks: h, m: map[topicPartition]*hold{}, missing: map[string]*missing{}}
	hs.none.Store(true)
	return hs
}

// changed notes whether the maps are empty after a change; h.mu is held.
func (h *holds) changed() { h.none.Store(len(h.m)+len(h.missing) == 0) }

// heldError is the error of a record its publisher did not send because
// its partition is held: it waits with the partition's other events. Its
// text is the hold's error, so that every event of a held partition says
// the same.
type heldError struct {
	topicPartition
	cause error
}

func (e heldError) Error() string { return e.cause.Error() }
func (e heldError) Unwrap() error { return e.cause }

// HeldPartition is a partition the cluster's condition holds (see
// RelayConfig.MaxAttempts): its events wait, with no attempt counted, until
// Kafka takes them.
type HeldPartition struct {
	Topic string
	// Partition is -1 for the whole topic: one whose partitions could not
	// be looked up, or the events of a RelayConfig.Publisher that does not
	// say where a record went.
	Partition int32
	// Since is the first failure of the hold, Until when its events are
	// tried again.
	Since, Until time.Time
	// Error is the last failure, with the broker's reason.
	Error string
}

// list returns the held partitions, the longest held first.
func (h *holds) list() []HeldPartition {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HeldPartition, 0, len(h.m))
	for tp, x := range h.m {
		out = append(out, HeldPartition{Topic: tp.topic, Partition: tp.partition, Since: x.since, Until: x.until, Error: dlq.TruncateError(x.err.Error())})
	}
	slices.SortFunc(out, func(a, b HeldPartition) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition))
	})
	return out
}

// check returns a heldError when tp is held now (a whole topic's hold is
// tp with anyPartition).
func (h *holds) check(tp topicPartition) error {
	if h.none.Load() {
		return nil
	}
	now := h.now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if x := h.m[tp]; x != nil && now.Before(x.until) {
		return heldError{tp, x.err}
	}
	return nil
}

// has reports whether tp (or its whole topic) is held, its hold up or not.
func (h *holds) has(tp topicPartition) bool {
	if h.none.Load() {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[tp] != nil || h.m[topicPartition{tp.topic, anyPartition}] != nil
}

// holdRole is what an event a hold keeps does until the hold ends.
type holdRole uint8

const (
	// heldNoLonger: the hold ended meanwhile; the event is tried again at
	// once.
	heldNoLonger holdRole = iota
	// heldProbe: the event is the partition's probe, tried again when the
	// hold is up.
	heldProbe
	// heldAsleep: the event sleeps until the probe is published (see
	// wakeHeldSQL).
	heldAsleep
)

// fail records that an event for tp failed at now with err, the cluster's
// condition, and returns how long until the partition's hold is up and
// what the event does meanwhile. The first failure after a hold is up
// takes the next backoff step, and its event is the probe of that step;
// the other events of the partition that fail in the step, and those its
// hold kept from being sent (heldError, which neither step the hold nor
// start it again), sleep.
func (h *holds) fail(tp topicPartition, now time.Time, err error) (time.Duration, holdRole) {
	h.mu.Lock()
	var held heldError
	if errors.As(err, &held) {
		defer h.mu.Unlock()
		if x := h.m[held.topicPartition]; x != nil && now.Before(x.until) {
			return x.until.Sub(now), heldAsleep
		}
		return 0, heldNoLonger
	}
	var started []change
	x := h.m[tp]
	if x == nil {
		x = &hold{since: now, missing: missingTopic(err)}
		h.m[tp] = x
		h.changed()
		started = append(started, change{tp: tp, since: now, err: err})
	}
	x.last, x.err = now, err
	role := heldAsleep
	if !now.Before(x.until) {
		x.steps++
		x.until = now.Add(h.backoff.Delay(x.steps, rand.Float64))
		role = heldProbe
	}
	wait := x.until.Sub(now)
	h.mu.Unlock()
	h.tell(started)
	return wait, role
}

// published records that an event for tp was acknowledged: the hold of its
// partition ends, and so does that of its whole topic when the topic was
// said not to exist (an acknowledgement says it does); a whole topic held
// for another reason (a RelayConfig.Publisher that does not say where a
// record went) ends only when no event fails on it for a while (sweep).
// It reports whether a hold ended.
func (h *holds) published(tp topicPartition) bool {
	if h.none.Load() {
		return false
	}
	now := h.now()
	h.mu.Lock()
	delete(h.missing, tp.topic)
	var ended []change
	for _, at := range []topicPartition{tp, {tp.topic, anyPartition}} {
		if x := h.m[at]; x != nil && (at == tp || x.missing) {
			ended = append(ended, h.end(at, x, now, "Kafka takes the partition's events again"))
		}
	}
	h.changed()
	h.mu.Unlock()
	h.tell(ended)
	return len(ended) > 0
}

// change is a hold that started (why is empty) or ended, told to the log
// and the hooks once h.mu is released, so that a hook may call the relay.
type change struct {
	tp      topicPartition
	since   time.Time
	err     error
	why     string
	heldFor time.Duration
}

// end drops the hold x of tp, for why; h.mu is held.
func (h *holds) end(tp topicPartition, x *hold, now time.Time, why string) change {
	delete(h.m, tp)
	return change{tp: tp, why: why, heldFor: now.Sub(x.since)}
}

// tell logs each change and tells the hooks of it; h.mu is not held.
func (h *holds) tell(changes []change) {
	for _, c := range changes {
		if c.why == "" {
			h.log.Warn("Kafka holds a partition: the cluster's condition, not its events'; they wait, no attempt is counted, none is dead-lettered",
				"topic", clip(c.tp.topic), "partition", c.tp.partition, "error", c.err)
			h.hooks.Held(c.tp.topic, c.tp.partition, c.since)
			continue
		}
		h.log.Info(c.why, "topic", clip(c.tp.topic), "partition", c.tp.partition, "held_for", c.heldFor.Round(time.Millisecond))
		h.hooks.Unheld(c.tp.topic, c.tp.partition)
	}
}

// missingFor records that the cluster said at now that topic does not
// exist, and returns for how long it has been saying so, by this relay's
// count.
func (h *holds) missingFor(topic string, now time.Time) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.missing[topic]
	if m == nil {
		m = &missing{since: now}
		h.missing[topic] = m
		h.changed()
	}
	m.last = now
	return now.Sub(m.since)
}

// sweep drops the holds no event has failed on for quiet, and forgets the
// topics not said missing for as long: their events were published by
// another relay, or purged.
func (h *holds) sweep(quiet time.Duration) {
	if h.none.Load() {
		return
	}
	now := h.now()
	h.mu.Lock()
	var ended []change
	for tp, x := range h.m {
		if now.Sub(x.last) > quiet {
			ended = append(ended, h.end(tp, x, now, "no event of a held partition is left to try; the hold ends"))
		}
	}
	for topic, m := range h.missing {
		if now.Sub(m.last) > quiet {
			delete(h.missing, topic)
		}
	}
	h.changed()
	h.mu.Unlock()
	h.tell(ended)
}

// String names tp as topic/partition, or the topic alone for anyPartition.
func (tp topicPartition) String() string {
	if tp.partition == anyPartition {
		return clip(tp.topic)
	}
	return fmt.Sprintf("%s/%d", clip(tp.topic), tp.partition)
}

// missingTopic reports whether err says the topic or partition does not
// exist.
func missingTopic(err error) bool {
	return errors.Is(err, sarama.ErrUnknownTopicOrPartition)
}
