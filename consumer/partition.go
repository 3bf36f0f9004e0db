package consumer

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// persistIn calls call until it succeeds, pausing the partition meanwhile
// when pause is set, and reports whether it did (false: ctx ended first).
// Each failure is logged with what was being done.
func (p *partition) persistIn(ctx context.Context, what string, pause bool, call func(context.Context) error) bool {
	err := call(ctx)
	if err == nil {
		return true
	}
	if pause {
		p.pause()
		defer p.resume()
	}
	for failures := 1; ; failures++ {
		if ctx.Err() != nil {
			return false
		}
		delay := p.c.cfg.Backoff.Delay(failures, rand.Float64)
		p.log.Warn("cannot "+what+"; is the store up? the partition waits and tries again", "error", err, "failures", failures, "retry_in", delay)
		if !sleep(ctx, delay) {
			return false
		}
		if err = call(ctx); err == nil {
			return true
		}
	}
}

// partition handles the messages of one claim.
type partition struct {
	*groupHandler
	sess      sarama.ConsumerGroupSession
	claim     sarama.ConsumerGroupClaim
	topic     string
	partition int32
	log       *slog.Logger

	// claimCtx ends when the partition's claim does: with the session, or
	// when a cooperative rebalance revokes the partition alone (see
	// revocationFeed). No new message, attempt or write starts after it,
	// and every wait of the partition stops.
	claimCtx context.Context
	// messages are the claim's messages (through revocationFeed under
	// cooperative rebalancing); stopFeed stops that feed.
	messages <-chan *sarama.ConsumerMessage
	stopFeed func()
	// workCtx ends ShutdownTimeout after claimCtx: handlers and dead-letter
	// writes in flight run on it.
	workCtx  context.Context
	stopWork func()

	// pending holds the messages taken and not yet settled (handled, or
	// written to the dead-letter topic): offsets are marked up to the
	// lowest of them.
	pending offsets
	// marked is the offset marked last, the next to commit; before any
	// mark, the claim's initial offset (negative when the group has no
	// committed offset yet).
	marked atomic.Int64
	// highWater is the partition's high-water mark as the progress timer
	// read it last; 0 before its first read (see watchProgress).
	highWater atomic.Int64
	// stopProgress stops the progress timer; nil when it was not started.
	stopProgress func()
	// moves are the partition's writes to retry and dead-letter topics in flight.
	moves moves

	// clock is when the partition started: attempts read their time as
	// clock plus the monotonic time since (cheaper than time.Now).
	clock time.Time

	// retryTiers is the partition's place among the retry tiers.
	retryTiers
	// tracked: its deliveries carry tracking (Dedupe or KeyOrder is on,
	// or the topic is a retry topic).
	tracked bool

	// slab and trackingSlab hold the deliveries and their tracking
	// allocated but not yet handed out.
	slab         []delivery
	trackingSlab []tracking

	// maxBatch is the most messages taken at once (see take); batch is
	// their buffer, and carry a message taken but not yet due.
	maxBatch int
	batch    []taken
	carry    *taken

	// processSpan names the span of an attempt (Config.TracerProvider).
	processSpan string

	// features are the partition's features that are on (key order,
	// dedupe), in the order the spine calls them (see feature).
	features []feature

	mu     sync.Mutex
	pauses int // waiters holding the partition paused
}

func newPartition(h *groupHandler, sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) *partition {
	p := &partition{
		groupHandler: h,
		sess:         sess,
		claim:        claim,
		topic:        claim.Topic(),
		partition:    claim.Partition(),
		log:          h.c.log.With("topic", claim.Topic(), "partition", claim.Partition()),
		claimCtx:     sess.Context(),
		messages:     claim.Messages(),
		stopFeed:     func() {},
		clock:        time.Now(),
		moves:        moves{slots: make(chan struct{}, h.c.cfg.MaxWritesInFlight)},
		retryTiers:   newRetryTiers(h.c.topologies[claim.Topic()], claim.Topic()),
		maxBatch:     1,
	}
	if h.c.cfg.Dedupe.Store != nil || h.c.cfg.KeyOrder != nil {
		p.maxBatch = h.c.cfg.TakeBatch
		p.tracked = true
	}
	p.marked.Store(claim.InitialOffset())
	p.batch = make([]taken, 0, p.maxBatch)
	if h.c.tracer != nil {
		p.processSpan = "process " + p.topic
	}
	p.tracked = p.tracked || p.tierDelay > 0
	if h.c.cooperative {
		var revoked context.CancelFunc
		p.claimCtx, revoked = context.WithCancel(p.claimCtx)
		p.messages, p.stopFeed = p.revocationFeed(revoked)
	}
	workCtx, cancel := context.WithCancel(context.WithoutCancel(p.claimCtx))
	grace := h.c.cfg.ShutdownTimeout
	stop := context.AfterFunc(p.claimCtx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-workCtx.Done():
		}
	})
	p.workCtx = workCtx
	p.stopWork = func() { stop(); cancel() }
	// Key order first, then dedupe: see feature for why.
	if h.c.cfg.KeyOrder != nil && p.topology != nil {
		p.features = append(p.features, &keyOrderFeature{p: p, order: h.c.cfg.KeyOrder})
	}
	if h.c.cfg.Dedupe.Store != nil {
		p.features = append(p.features, newDedupeFeature(p))
	}
	return p
}

// close waits for the writes in flight (they end with the claim, or
// ShutdownTimeout after it) and the dedupe marks, releases the claims of
// the messages left unhandled, stops the progress timer, and releases the
// partition.
func (p *partition) close() {
	p.stopFeed()
	p.moves.wg.Wait()
	for _, f := range p.features {
		f.close()
	}
	p.stopWork()
	if p.stopProgress != nil {
		p.stopProgress()
	}
	p.c.metrics.Released(p.topic, p.partition)
}

// pause stops fetching the partition until every pause has its resume.
// Messages already fetched stay buffered.
func (p *partition) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pauses++; p.pauses == 1 {
		p.group.Pause(map[string][]int32{p.topic: {p.partition}})
	}
}

func (p *partition) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pauses--; p.pauses == 0 {
		p.group.Resume(map[string][]int32{p.topic: {p.partition}})
	}
}

// now is the time on the partition's clock: since it started, monotonic.
func (p *partition) now() time.Duration { return time.Since(p.clock) }

// since is how long ago t was on the partition's clock.
func (p *partition) since(t time.Duration) time.Duration { return p.now() - t }

// delivery is one message on its way through the attempts.
type delivery struct {
	p *partition
	m *Message
	// failures counts the attempts that failed (attempts.go).
	failures

	// Retry, dedupe and key order state: nil for a record of a main topic
	// when neither Dedupe nor KeyOrder is on (most messages pay for none
	// of it).
	*tracking

	// What m and the first attempt's context point to: one allocation
	// for both.
	msg      Message
	firstCtx attemptContext
}

// tracking is the state of a message from a retry topic, or taken with
// Dedupe or KeyOrder on: each feature's share is defined in the feature's
// file (retrytier.go, keyorder.go, dedupe.go).
type tracking struct {
	retryState
	// id is the message's identity for Dedupe and KeyOrder; "" when
	// neither is on.
	id string
	keyPlace
	dedupeClaim
}

// newDelivery is the delivery of a record taken from the partition.
func (p *partition) newDelivery(msg *sarama.ConsumerMessage) (d *delivery, traced bool) {
	d = p.allocDelivery()
	d.p = p
	d.m = &d.msg
	traced = setMessage(d.m, msg)
	if p.tracked {
		d.tracking = p.allocTracking()
	}
	if p.tierDelay > 0 {
		d.readRetry()
	}
	return d, traced
}

// deliverySlab is how many deliveries a partition allocates at once: one
// allocation of many costs less than many of one, and a message is
// usually settled long before its neighbours are. A handler that keeps a
// Message keeps its slab alive, 64 deliveries of about 400 bytes.
const deliverySlab = 64

// allocDelivery returns a zeroed delivery from the partition's slab. Only
// the goroutine taking messages calls it.
func (p *partition) allocDelivery() *delivery {
	if len(p.slab) == 0 {
		p.slab = make([]delivery, deliverySlab)
	}
	d := &p.slab[0]
	p.slab = p.slab[1:]
	return d
}

// allocTracking returns a fresh tracking (place -1: free) from the
// partition's slab, as allocDelivery does for deliveries.
func (p *partition) allocTracking() *tracking {
	if len(p.trackingSlab) == 0 {
		p.trackingSlab = make([]tracking, deliverySlab)
	}
	t := &p.trackingSlab[0]
	p.trackingSlab = p.trackingSlab[1:]
	t.place = -1
	return t
}

// guard runs a hook of the user's and recovers a panic in it, logging it,
// so that a bug in a hook cannot take the consumer down.
func (c *Consumer) guard(hook string, fn func()) {
	defer func() {
		if v := recover(); v != nil {
			c.log.Error(hook+" panicked", "panic", v, "stack", string(debug.Stack()))
		}
	}()
	fn()
}

// log is the partition's logger with the message's identity.
func (d *delivery) log() *slog.Logger {
	return d.p.log.With("offset", d.m.Offset, "ce_id", d.m.ID, "correlation_id", d.m.CorrelationID)
}
