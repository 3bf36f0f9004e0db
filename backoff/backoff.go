// Package backoff is courier's one retry schedule: the relay spaces a
// failed event's publish attempts with it (producer.RelayConfig.Backoff),
// and the consumer a failed message's handler attempts
// (consumer.Config.Backoff). A zero field means the default of the half
// that uses it; NoJitter turns the jitter off.
//
// The guides tell how to use it: [The relay] and [The consumer].
//
// [The relay]: https://github.com/courierkit/courier/blob/main/docs/relay.md
// [The consumer]: https://github.com/courierkit/courier/blob/main/docs/consumer.md
package backoff

import (
	"fmt"
	"math"
	"time"
)

// Bounds and sentinels of a Backoff.
const (
	// MaxFactor bounds Factor: beyond it the second wait is already the
	// hundredfold of the first.
	MaxFactor = 100.0
	// NoJitter, as Jitter, turns the jitter off (a zero Jitter means the
	// default).
	NoJitter = -1.0
)

// Backoff is an exponential schedule: failed attempt n waits
// Base·Factor^(n-1), spread uniformly over ±Jitter of itself and capped at
// Max. A zero field takes the default of the config that holds it
// (WithDefaults); Jitter set to NoJitter means no jitter.
type Backoff struct {
	// Base is the wait after the first failed attempt.
	Base time.Duration
	// Factor multiplies each wait: a finite number from 1 to MaxFactor.
	Factor float64
	// Max caps every wait; at least Base.
	Max time.Duration
	// Jitter spreads each wait uniformly over ±Jitter of itself, a
	// fraction from 0 to 1, so failures that happen together are not
	// retried together. NoJitter for none.
	Jitter float64
}

// WithDefaults returns b with each zero field taken from def. A Jitter of
// NoJitter stays NoJitter, so WithDefaults twice gives what it gave once.
func (b Backoff) WithDefaults(def Backoff) Backoff {
	if b.Base == 0 {
		b.Base = def.Base
	}
	if b.Factor == 0 {
		b.Factor = def.Factor
	}
	if b.Max == 0 {
		b.Max = def.Max
	}
	if b.Jitter == 0 {
		b.Jitter = def.Jitter
	}
	return b
}

// Validate reports the first field out of range, by its name ("Base",
// "Factor", "Max" or "Jitter"), with what to use instead: Base above 0,
// Max at least Base, Factor a finite number from 1 to MaxFactor, Jitter a
// finite fraction from 0 to 1. Call it after WithDefaults. Its errors read
// after a prefix naming the field that holds the Backoff, e.g.
// "Backoff." + err.Error().
func (p Backoff) Validate() error {
	switch {
	case p.Base <= 0:
		return fmt.Errorf("Base is %v; use a positive duration", p.Base)
	case p.Max < p.Base:
		return fmt.Errorf("Max (%v) is below Base (%v); raise Max", p.Max, p.Base)
	case math.IsNaN(p.Factor) || math.IsInf(p.Factor, 0) || p.Factor < 1 || p.Factor > MaxFactor:
		return fmt.Errorf("Factor is %v; use a number from 1 to %v (2 doubles each wait)", p.Factor, MaxFactor)
	case p.Jitter != NoJitter && (math.IsNaN(p.Jitter) || p.Jitter < 0 || p.Jitter > 1):
		return fmt.Errorf("Jitter is %v; use a fraction from 0 to 1, or NoJitter for none", p.Jitter)
	}
	return nil
}

// Delay returns the wait after the given failed attempt (1 for the first),
// from 0 to Max whatever the policy holds. random returns a number in
// [0, 1); it is only called when Jitter > 0.
func (p Backoff) Delay(attempt int, random func() float64) time.Duration {
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
