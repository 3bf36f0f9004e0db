// Package backoff computes exponential retry delays with an optional jitter.
package backoff

import (
	"math"
	"time"
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

// Delay returns the wait after the given failed attempt (1 for the first).
// random returns a number in [0, 1); it is only called when Jitter > 0.
func (p Policy) Delay(attempt int, random func() float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := float64(p.Base) * math.Pow(p.Factor, float64(attempt-1))
	if p.Jitter > 0 {
		d *= 1 - p.Jitter + 2*p.Jitter*random()
	}
	if d > float64(p.Max) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.Max
	}
	return time.Duration(d)
}
