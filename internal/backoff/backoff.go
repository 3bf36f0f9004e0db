// Package backoff computes exponential retry delays with an optional jitter.
package backoff

import (
	"fmt"
	"math"
	"time"
)

// Bounds of a Policy that Validate enforces.
const (
	// MaxFactor bounds Factor: beyond it the second wait is already the
	// hundredfold of the first.
	MaxFactor = 100.0
)

// Policy is an exponential backoff: attempt n waits Base·Factor^(n-1),
// spread by ±Jitter and capped at Max.
type Policy struct {
	Base   time.Duration
	Factor float64
	Max    time.Duration
	// Jitter spreads each delay uniformly over ±Jitter of itself, 0 to 1.
	Jitter float64
}

// Validate reports the first field out of range, by its name ("Base",
// "Factor", "Max" or "Jitter"), with what to use instead: Base above 0,
// Max at least Base, Factor a finite number from 1 to MaxFactor, Jitter a
// finite fraction from 0 to 1. Its errors read after a prefix naming the
// policy, e.g. "Backoff." + err.Error().
func (p Policy) Validate() error {
	switch {
	case p.Base <= 0:
		return fmt.Errorf("Base is %v; use a positive duration", p.Base)
	case p.Max < p.Base:
		return fmt.Errorf("Max (%v) is below Base (%v); raise Max", p.Max, p.Base)
	case math.IsNaN(p.Factor) || math.IsInf(p.Factor, 0) || p.Factor < 1 || p.Factor > MaxFactor:
		return fmt.Errorf("Factor is %v; use a number from 1 to %v (2 doubles each wait)", p.Factor, MaxFactor)
	case math.IsNaN(p.Jitter) || p.Jitter < 0 || p.Jitter > 1:
		return fmt.Errorf("Jitter is %v; use a fraction from 0 to 1", p.Jitter)
	}
	return nil
}

// Delay returns the wait after the given failed attempt (1 for the first),
// from 0 to Max whatever the policy holds. random returns a number in
// [0, 1); it is only called when Jitter > 0.
func (p Policy) Delay(attempt int, random func() float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := float64(p.Base) * math.Pow(p.Factor, float64(attempt-1))
	if p.Jitter > 0 {
		d *= 1 - p.Jitter + 2*p.Jitter*random()
	}
	switch {
	case d > float64(p.Max) || math.IsInf(d, 0) || math.IsNaN(d):
		return max(p.Max, 0)
	case d < 0:
		return 0
	}
	return time.Duration(d)
}
