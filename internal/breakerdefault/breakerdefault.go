// Package breakerdefault holds the circuit-breaker defaults and bounds that
// the relay's breaker (producer.BreakerConfig) and the consumer's
// (consumer.BreakerConfig) share, so the two halves cannot drift apart.
package breakerdefault

import "time"

// Defaults and bounds of a breaker's settings.
const (
	// Failures is how many consecutive failures open a breaker.
	Failures = 5
	// OpenFor is how long an open breaker refuses calls before a probe.
	OpenFor = 30 * time.Second
	// Probes is how many calls a half-open breaker lets through.
	Probes = 1
	// MaxCount bounds Failures and Probes.
	MaxCount = 10_000
)
