package testkit

import (
	"testing"
	"time"
)

// WaitFor polls cond every 5ms until it holds, and fails the test when
// timeout passes first, naming what it waited for: tests wait on a
// condition with a deadline, never for a fixed time.
func WaitFor(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
