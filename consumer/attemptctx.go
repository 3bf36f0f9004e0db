package consumer

import (
	"context"
	"sync"
	"time"
)

// attemptContext is the context of one handler attempt: it ends at its
// deadline (with ErrAttemptTimeout as its cause), when its parent ends, or
// when the attempt returns (end).
//
// Behind it is a context.WithDeadlineCause, made the first time a caller
// needs one: Done, a Value lookup, or Err past the deadline. Until then
// there is no timer: arming and stopping one costs more than the rest of a
// message for a handler that never waits on its context, and such a handler
// cannot tell the difference.
type attemptContext struct {
	parent   context.Context
	deadline time.Time

	mu     sync.Mutex
	inner  context.Context // nil until needed
	cancel context.CancelFunc
	ended  bool // the attempt returned: an inner context made now is ended
}

// start readies c, unused until now, for an attempt.
func (c *attemptContext) start(parent context.Context, deadline time.Time) {
	c.parent, c.deadline = parent, deadline
}

// materialize returns the context behind c, making it on first use.
func (c *attemptContext) materialize() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.inner == nil {
		c.inner, c.cancel = context.WithDeadlineCause(c.parent, c.deadline, ErrAttemptTimeout)
		if c.ended {
			c.cancel()
		}
	}
	return c.inner
}

// made returns the context behind c, or nil when none was made yet.
func (c *attemptContext) made() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.inner
}

// Deadline is the attempt's deadline, or the parent's when it is earlier.
func (c *attemptContext) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

func (c *attemptContext) Done() <-chan struct{} { return c.materialize().Done() }

func (c *attemptContext) Err() error {
	c.mu.Lock()
	inner, ended := c.inner, c.ended
	c.mu.Unlock()
	if inner == nil && !ended && c.parent.Err() == nil && time.Now().Before(c.deadline) {
		return nil // live, and nothing needed the context behind it yet
	}
	return c.materialize().Err() // as the standard context says it
}

// Value looks key up in the context behind c once there is one (which
// context.Cause relies on), and in the parent until then: before the
// deadline, c adds no value of its own.
func (c *attemptContext) Value(key any) any {
	if inner := c.made(); inner != nil {
		return inner.Value(key)
	}
	if !time.Now().Before(c.deadline) {
		return c.materialize().Value(key)
	}
	return c.parent.Value(key)
}

func (c *attemptContext) String() string { return "consumer attempt context" }

// end ends the attempt: its context, made or to be made, is cancelled.
func (c *attemptContext) end() {
	c.mu.Lock()
	c.ended = true
	cancel := c.cancel
	c.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}
