package backoff_test

import (
	"testing"
	"time"

	"github.com/courierkit/courier/internal/backoff"
)

func TestDelayDoublesUpToTheCap(t *testing.T) {
	p := backoff.Policy{Base: time.Second, Factor: 2, Max: 30 * time.Second}
	want := []time.Duration{1, 2, 4, 8, 16, 30, 30}
	for i, w := range want {
		if got := p.Delay(i+1, nil); got != w*time.Second {
			t.Errorf("attempt %d: %v, want %v", i+1, got, w*time.Second)
		}
	}
	if got := p.Delay(10_000, nil); got != 30*time.Second {
		t.Errorf("attempt 10000 (overflow): %v, want the cap", got)
	}
}

func TestJitterStaysWithinItsBand(t *testing.T) {
	p := backoff.Policy{Base: time.Second, Factor: 2, Max: time.Hour, Jitter: 0.25}
	for _, r := range []float64{0, 0.5, 0.999999} {
		got := p.Delay(3, func() float64 { return r })
		if got < 3*time.Second || got > 5*time.Second {
			t.Errorf("random %v: %v, want within 4s ± 25%%", r, got)
		}
	}
	if lo, hi := p.Delay(3, func() float64 { return 0 }), p.Delay(3, func() float64 { return 0.999 }); lo >= hi {
		t.Errorf("jitter does not spread: %v and %v", lo, hi)
	}
}
