package consumer

import (
	"context"
	"errors"
	"testing"
	"time"
)

type ctxKey struct{}

func newTestAttempt(parent context.Context, deadline time.Time) *attemptContext {
	c := new(attemptContext)
	c.start(parent, deadline)
	return c
}

// TestAttemptContextBeforeItsDeadline: a live attempt context has no error
// and no cause, carries its parent's values and reports its deadline.
func TestAttemptContextBeforeItsDeadline(t *testing.T) {
	parent := context.WithValue(context.Background(), ctxKey{}, "v")
	deadline := time.Now().Add(time.Hour)
	c := newTestAttempt(parent, deadline)
	if c.Err() != nil || context.Cause(c) != nil {
		t.Fatalf("Err %v, Cause %v: want nil before the deadline", c.Err(), context.Cause(c))
	}
	if c.Value(ctxKey{}) != "v" {
		t.Fatalf("Value = %v, want the parent's", c.Value(ctxKey{}))
	}
	if d, ok := c.Deadline(); !ok || !d.Equal(deadline) {
		t.Fatalf("Deadline = %v %v, want %v", d, ok, deadline)
	}
}

// TestAttemptContextEndsAtItsDeadline: Done closes at the deadline, with
// DeadlineExceeded and ErrAttemptTimeout as the cause, for the context and
// for a context derived from it.
func TestAttemptContextEndsAtItsDeadline(t *testing.T) {
	c := newTestAttempt(context.Background(), time.Now().Add(20*time.Millisecond))
	child, cancel := context.WithCancel(c)
	defer cancel()
	for _, ctx := range []context.Context{c, child} {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done did not close at the deadline")
		}
		if !errors.Is(ctx.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(ctx), ErrAttemptTimeout) {
			t.Fatalf("Err %v, Cause %v: want DeadlineExceeded and ErrAttemptTimeout", ctx.Err(), context.Cause(ctx))
		}
	}
}

// TestAttemptContextPastItsDeadlineWithoutDone: a handler that only polls
// Err (never Done) still sees the deadline pass, with its cause.
func TestAttemptContextPastItsDeadlineWithoutDone(t *testing.T) {
	c := newTestAttempt(context.Background(), time.Now().Add(-time.Millisecond))
	if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), ErrAttemptTimeout) {
		t.Fatalf("Err %v, Cause %v: want DeadlineExceeded and ErrAttemptTimeout", c.Err(), context.Cause(c))
	}
}

// TestAttemptContextEndsWithItsParent: cancelling the parent ends the
// attempt context, whether Done was asked for before or after.
func TestAttemptContextEndsWithItsParent(t *testing.T) {
	for _, doneFirst := range []bool{true, false} {
		parent, cancel := context.WithCancel(context.Background())
		c := newTestAttempt(parent, time.Now().Add(time.Hour))
		var done <-chan struct{}
		if doneFirst {
			done = c.Done()
		}
		cancel()
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("doneFirst %v: Err = %v, want Canceled", doneFirst, c.Err())
		}
		if done == nil {
			done = c.Done()
		}
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("doneFirst %v: Done did not close with the parent", doneFirst)
		}
	}
}

// TestAttemptContextEndsWithTheAttempt: once the attempt returned, its
// context is cancelled, also for a goroutine that asks for Done only then.
func TestAttemptContextEndsWithTheAttempt(t *testing.T) {
	for _, doneFirst := range []bool{true, false} {
		c := newTestAttempt(context.Background(), time.Now().Add(time.Hour))
		var done <-chan struct{}
		if doneFirst {
			done = c.Done()
		}
		c.end()
		if done == nil {
			done = c.Done()
		}
		select {
		case <-done:
		default:
			t.Fatalf("doneFirst %v: Done is open after the attempt ended", doneFirst)
		}
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("doneFirst %v: Err = %v, want Canceled", doneFirst, c.Err())
		}
	}
}
