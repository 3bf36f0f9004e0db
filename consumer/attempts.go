package consumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"time"

	"github.com/failsafe-go/failsafe-go"
	"github.com/failsafe-go/failsafe-go/retrypolicy"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/dedupe"
)

// failures counts the attempts of a message that failed.
type failures struct {
	failed      int // attempts of this delivery that failed and count
	firstFailed time.Time
}

// fail records a failed attempt that counts.
func (f *failures) fail() {
	f.failed++
	if f.firstFailed.IsZero() {
		f.firstFailed = time.Now()
	}
}

// failedBefore records when the first of the attempts that failed before
// this delivery (in earlier rounds) failed.
func (f *failures) failedBefore(first time.Time) { f.firstFailed = first }

// failedAttempts is how many attempts of the message failed, in this
// delivery and before it.
func (d *delivery) failedAttempts() int { return d.prior() + d.failed }

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
			return c.cfg.Backoff.Delay(d.failed, rand.Float64)
		}).
		OnRetryScheduled(func(e failsafe.ExecutionScheduledEvent[any]) {
			c.metrics.Message(d.m, OutcomeRetried)
			d.log().Warn("handler failed; retrying", "error", e.LastError(), "attempt", d.failed, "retry_in", e.Delay)
		}).
		Build()
	replay := true
	err = failsafe.With(policy).WithContext(d.p.claimCtx).Run(func() error {
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
	d.m.Attempt = d.failedAttempts() + 1
	for _, f := range d.p.features {
		f.attempt(d)
	}
	actx := &d.firstCtx
	if d.m.Attempt > 1 {
		actx = new(attemptContext) // the first may live on in the handler's goroutines
	}
	err := d.p.attempt(ctx, actx, d.m)
	if err == nil {
		return nil
	}
	if _, open := d.p.c.breakerWait(err); !open {
		d.fail()
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
// of the message.) With Config.TracerProvider, the attempt has a span,
// which its context carries.
func (p *partition) attempt(ctx context.Context, actx *attemptContext, m *Message) error {
	var span trace.Span
	if p.c.tracer != nil {
		ctx, span = p.startProcess(ctx, m)
	}
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
	p.c.metrics.HandlerDuration(m.Topic, took)
	if span != nil {
		endSpan(span, err)
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
	return sleep(d.p.claimCtx, wait)
}
