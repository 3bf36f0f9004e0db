package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/IBM/sarama"
	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/sony/gobreaker/v2"

	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/retrytopics"
)

// delivery is one message on its way through the attempts.
type delivery struct {
	p           *partition
	m           *Message
	failed      int // attempts of this delivery that failed and count
	firstFailed time.Time

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
// Dedupe or KeyOrder on.
type tracking struct {
	// From the retry headers of a record on a retry topic.
	retry   *retrytopics.Info // nil for a record of a main topic
	corrupt error             // malformed retry headers: dead-lettered unhandled

	// id is the message's identity for Dedupe and KeyOrder; "" when
	// neither is on.
	id string
	// place is where KeyOrder put the message among its key's parked
	// messages (-1: free) when it was taken.
	place int
	// parked: the message is among its key's parked messages, and leaves
	// them once settled other than by a move to a retry tier.
	parked bool
	// claim is what Dedupe said of the message when it was taken.
	claim   dedupe.Status
	claimed bool   // the consumer holds its claim: Done or Release owed
	refused error  // the store refuses the id: dead-lettered unhandled
	owner   string // the claim's owner
	// firstDue is when the first parked message of its key is due (unix
	// ms, 0: unknown), and claimedAt when the claim was taken or extended
	// (on the partition's clock).
	firstDue  int64
	claimedAt time.Duration
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

// prior is how many attempts failed before this delivery.
func (d *delivery) prior() int {
	if r := d.retried(); r != nil {
		return r.FailedAttempts
	}
	return 0
}

// malformed is the error of a retry record with malformed retry headers.
func (d *delivery) malformed() error {
	if d.tracking == nil {
		return nil
	}
	return d.corrupt
}

// retried is what the retry headers say; nil for a record of a main topic.
func (d *delivery) retried() *retrytopics.Info {
	if d.tracking == nil {
		return nil
	}
	return d.retry
}

// holdsClaim reports whether the consumer holds the message's dedupe
// claim.
func (d *delivery) holdsClaim() bool { return d.tracking != nil && d.claimed }

// isParked reports whether the message is among its key's parked messages.
func (d *delivery) isParked() bool { return d.tracking != nil && d.parked }

// readRetry reads the retry headers of a record on a retry topic.
func (d *delivery) readRetry() {
	info, found, err := retrytopics.Parse(d.m.Headers)
	switch {
	case err != nil:
		d.corrupt = fmt.Errorf("record on retry topic %s: %w", d.m.Topic, err)
		return
	case !found:
		d.corrupt = fmt.Errorf("record on retry topic %s has no retry headers (retry_attempt, retry_not_before, …); "+
			"only the consumer writes to retry topics", d.m.Topic)
		return
	}
	if err := d.checkRetry(info); err != nil && (info.ConsumerGroup == "" || info.ConsumerGroup == d.p.c.cfg.Group) {
		d.corrupt = fmt.Errorf("record on retry topic %s: %w", d.m.Topic, err)
		return
	}
	// A forged or skewed retry_not_before must not park the partition:
	// no record waits longer than its tier's delay from now.
	if limit := time.Now().Add(d.p.tierDelay); info.NotBefore.After(limit) {
		info.NotBefore = limit
	}
	d.retry = &info
	d.firstFailed = info.FirstFailedAt
	d.m.OriginalTopic, d.m.RetryRound = info.OriginalTopic, info.Round
}

// checkRetry checks the retry headers against the retry topic the record
// was read from: a record of <t>.retry.* belongs to <t>, whatever its
// headers claim, and its round is one of <t>'s tiers (or 0, for a record
// that followed its key there).
func (d *delivery) checkRetry(info retrytopics.Info) error {
	t := d.p.topology
	if info.OriginalTopic != t.Topic {
		return &retrytopics.HeaderError{Header: retrytopics.HeaderOriginalTopic, Value: info.OriginalTopic,
			Reason: "names another topic than " + t.Topic + ", whose retry topic the record was read from"}
	}
	if info.Round > len(t.Tiers) {
		return &retrytopics.HeaderError{Header: retrytopics.HeaderAttempt, Value: strconv.Itoa(info.Round),
			Reason: fmt.Sprintf("is above the %d retry tiers of %s", len(t.Tiers), t.Topic)}
	}
	return nil
}

// foreign reports whether the record is another consumer group's, in a
// retry topic the groups share: this group leaves it alone.
func (d *delivery) foreign() bool {
	r := d.retried()
	return r != nil && r.ConsumerGroup != "" && r.ConsumerGroup != d.p.c.cfg.Group
}

// process handles d until it is handled (then it settles it), handed to a
// write (which settles it once written), or abandoned, and reports whether
// it was not abandoned. Abandoned means the session ended first: the
// message stays unsettled, for the next owner of the partition.
func (p *partition) process(d *delivery, traced bool) bool {
	if p.sessCtx.Err() != nil {
		d.abandon()
		return false
	}
	m := d.m
	p.c.metrics.InFlight(m.Topic, 1)
	ctx := p.workCtx
	if traced {
		ctx = traceContext.Extract(ctx, headerCarrier(m.Headers))
	}
	switch d.handle(ctx) {
	case fateHandled:
		p.c.metrics.Message(m.Topic, OutcomeHandled)
		p.c.metrics.InFlight(m.Topic, -1)
		d.handled()
		return true
	case fateSkipped:
		p.c.metrics.InFlight(m.Topic, -1)
		return true
	case fateMoving:
		return true // the write counts it out of flight and settles it
	default:
		p.c.metrics.InFlight(m.Topic, -1)
		d.abandon()
		return false
	}
}

// fate is where a message's handling leaves it.
type fate int

const (
	fateAbandoned fate = iota // the session ended first
	fateHandled               // the handler returned nil
	fateMoving                // its write to a retry or dead-letter topic started
	fateSkipped               // settled without handling: processed already, or another group's
)

// handle settles what needs no handling, defers a message whose key waits
// in a retry tier, runs the attempts, waits out open breakers, and starts
// the write to a retry tier or the dead-letter topic when the attempts
// fail.
func (d *delivery) handle(ctx context.Context) fate {
	switch {
	case d.foreign():
		d.p.settle(d.m.Offset)
		return fateSkipped
	case d.malformed() != nil:
		d.log().Error("malformed retry record; dead-lettering it unhandled", "error", d.corrupt)
		return d.move(ctx, d.deadLetterRoute(Permanent(d.corrupt)))
	}
	if f, done := d.admit(ctx); done {
		return f
	}
	for {
		ok, err := d.attempts(ctx)
		switch {
		case ok:
			return fateHandled
		case d.p.sessCtx.Err() != nil:
			return fateAbandoned
		}
		if wait, open := d.p.c.breakerWait(err); open {
			if !d.waitBreaker(wait, err) {
				return fateAbandoned
			}
			continue
		}
		return d.move(ctx, d.failedRoute(err))
	}
}

// move starts the write of the message to r.
func (d *delivery) move(ctx context.Context, r route) fate {
	if !d.forward(ctx, r) {
		return fateAbandoned
	}
	return fateMoving
}

// attempts runs the handler until it succeeds, the attempts run out, an
// error ends them (not retryable, or an open breaker), or the session ends.
// Retry waits are failsafe's timers, which stop when the session ends.
//
// The first attempt runs outside failsafe: most messages succeed on it, and
// a failsafe execution costs dozens of allocations, several times what the
// rest of a message costs. A first failure that ends the attempts (not
// retryable, an open breaker, no attempt left) ends them here, as
// failsafe's policy would. Otherwise failsafe takes over and replays the
// error as its own first execution, so every later decision (abort, delay,
// retry, give up) is failsafe's, as if it had run it.
func (d *delivery) attempts(ctx context.Context) (handled bool, err error) {
	c := d.p.c
	budget := c.cfg.MaxAttempts - d.failed
	first := d.try(ctx)
	if first == nil {
		return true, nil
	}
	if _, open := c.breakerWait(first); open || budget <= 1 || !c.retryable(first) {
		return false, first // failsafe would stop here too (a Permanent error, say)
	}
	judged := false // the first failure, already judged retryable above
	policy := retrypolicy.NewBuilder[any]().
		WithMaxAttempts(budget).
		ReturnLastFailure().
		AbortIf(func(_ any, err error) bool {
			if !judged {
				judged = true
				return false
			}
			_, open := c.breakerWait(err)
			return open || !c.retryable(err)
		}).
		WithDelayFunc(func(exec failsafe.ExecutionAttempt[any]) time.Duration {
			if ra, ok := errors.AsType[*RetryAfterError](exec.LastError()); ok {
				return ra.Delay
			}
			return c.backoff.Delay(d.failed, rand.Float64)
		}).
		OnRetryScheduled(func(e failsafe.ExecutionScheduledEvent[any]) {
			c.metrics.Message(d.m.Topic, OutcomeRetried)
			d.log().Warn("handler failed; retrying", "error", e.LastError(), "attempt", d.failed, "retry_in", e.Delay)
		}).
		Build()
	replay := true
	err = failsafe.With(policy).WithContext(d.p.sessCtx).Run(func() error {
		if replay {
			replay = false
			return first
		}
		err := d.try(ctx)
		handled = err == nil
		return err
	})
	return handled, err
}

// try runs one attempt and records its failure: it counts (unless a breaker
// was open) and a panic is logged.
func (d *delivery) try(ctx context.Context) error {
	d.m.Attempt = d.prior() + d.failed + 1
	d.extendClaim()
	actx := &d.firstCtx
	if d.m.Attempt > 1 {
		actx = new(attemptContext) // the first may live on in the handler's goroutines
	}
	err := d.p.attempt(ctx, actx, d.m)
	if err == nil {
		return nil
	}
	if _, open := d.p.c.breakerWait(err); !open {
		d.failed++
		if d.firstFailed.IsZero() {
			d.firstFailed = time.Now()
		}
		if pe, ok := errors.AsType[*PanicError](err); ok {
			d.log().Error("handler panicked", "error", err, "attempt", d.failed, "stack", string(pe.Stack))
		}
	}
	return err
}

// attempt calls the handler once, within AttemptTimeout, recovering a
// panic into a *PanicError. An attempt still running when AttemptTimeout
// passes fails with ErrAttemptTimeout, whatever it returns; its context
// ends then, with ErrAttemptTimeout as the cause. (An attemptContext rather
// than a failsafe Timeout policy, which costs a dozen allocations per
// message, or a plain context timeout, whose timer costs more than the rest
// of the message.)
func (p *partition) attempt(ctx context.Context, actx *attemptContext, m *Message) error {
	// The clock is a good part of an attempt's cost: read only the
	// monotonic clock, twice, against the partition's time base.
	start := p.clock.Add(time.Since(p.clock))
	actx.start(ctx, start.Add(p.c.cfg.AttemptTimeout))
	err := p.call(actx, m)
	took := time.Since(start)
	actx.end()
	if took >= p.c.cfg.AttemptTimeout {
		err = fmt.Errorf("%w after %v (Config.AttemptTimeout)", ErrAttemptTimeout, p.c.cfg.AttemptTimeout)
	}
	if p.c.measured {
		p.c.metrics.HandlerDuration(m.Topic, took)
	}
	return err
}

// call calls the handler, recovering a panic into a *PanicError.
func (p *partition) call(ctx context.Context, m *Message) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: debug.Stack()}
		}
	}()
	return p.c.cfg.Handler.Handle(ctx, m)
}

// retryable reports whether a failed attempt may be followed by another.
func (c *Consumer) retryable(err error) bool {
	if _, perm := errors.AsType[*PermanentError](err); perm {
		return false
	}
	if errors.Is(err, dedupe.ErrInvalidID) {
		return false // the store refuses the message's id: no retry helps
	}
	if c.cfg.Retryable == nil {
		return true
	}
	retry := true // should Retryable panic
	c.guard("Config.Retryable (the error is treated as retryable)", func() { retry = c.cfg.Retryable(err) })
	return retry
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

// breakerWait reports whether err says a circuit breaker is open, and how
// long to wait before the next try.
func (c *Consumer) breakerWait(err error) (time.Duration, bool) {
	if open, ok := errors.AsType[*BreakerOpenError](err); ok {
		// A RetryAt that is unset or past would spin the handler against
		// the breaker: wait BreakerWait then.
		if wait := time.Until(open.RetryAt); wait > 0 {
			return wait, true
		}
		return c.cfg.BreakerWait, true
	}
	if errors.Is(err, gobreaker.ErrOpenState) || errors.Is(err, gobreaker.ErrTooManyRequests) {
		return c.cfg.BreakerWait, true
	}
	return 0, false
}

// waitBreaker pauses fetching the partition for wait, and reports whether
// the wait ran out (false: the session ended first).
func (d *delivery) waitBreaker(wait time.Duration, err error) bool {
	d.log().Warn("circuit breaker open; pausing the partition", "error", err, "retry_in", wait)
	d.p.pause()
	defer d.p.resume()
	return sleep(d.p.sessCtx, wait)
}

// log is the partition's logger with the message's identity.
func (d *delivery) log() *slog.Logger {
	return d.p.log.With("offset", d.m.Offset, "ce_id", d.m.ID, "correlation_id", d.m.CorrelationID)
}

// extendClaim extends the message's dedupe claim once half its lease has
// passed, so that it lasts through the attempt (Dedupe.Lease exceeds
// AttemptTimeout plus Backoff.Max). A failure is logged: the claim may run
// out, and a duplicate delivery elsewhere could then be handled at the
// same time.
func (d *delivery) extendClaim() {
	cfg := &d.p.c.cfg.Dedupe
	if !d.holdsClaim() || d.p.since(d.claimedAt) < cfg.Lease/2 {
		return
	}
	p := d.p
	err := p.dedupeCall(p.workCtx, dedupe.OpExtend, 1, func(ctx context.Context) error {
		return cfg.Store.Extend(ctx, d.owner, []string{d.id}, cfg.Lease)
	})
	if err != nil {
		d.log().Warn("cannot extend the message's dedupe claim; it may run out during the attempt", "error", err, "dedupe_id", d.id)
		return
	}
	d.claimedAt = d.p.now()
}
