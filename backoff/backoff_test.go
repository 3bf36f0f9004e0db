package backoff_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/backoff"
)

func TestDelayDoublesUpToTheCap(t *testing.T) {
	p := backoff.Backoff{Base: time.Second, Factor: 2, Max: 30 * time.Second}
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
	p := backoff.Backoff{Base: time.Second, Factor: 2, Max: time.Hour, Jitter: 0.25}
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

func TestValidateNamesTheField(t *testing.T) {
	valid := backoff.Backoff{Base: time.Second, Factor: 2, Max: time.Minute, Jitter: 0.2}
	if err := valid.Validate(); err != nil {
		t.Fatalf("valid policy: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*backoff.Backoff)
		field string
	}{
		{"zero base", func(p *backoff.Backoff) { p.Base = 0 }, "Base"},
		{"negative base", func(p *backoff.Backoff) { p.Base = -time.Second }, "Base"},
		{"max below base", func(p *backoff.Backoff) { p.Max = time.Millisecond }, "Max"},
		{"NaN factor", func(p *backoff.Backoff) { p.Factor = math.NaN() }, "Factor"},
		{"infinite factor", func(p *backoff.Backoff) { p.Factor = math.Inf(1) }, "Factor"},
		{"factor below 1", func(p *backoff.Backoff) { p.Factor = 0.5 }, "Factor"},
		{"huge factor", func(p *backoff.Backoff) { p.Factor = 1e9 }, "Factor"},
		{"NaN jitter", func(p *backoff.Backoff) { p.Jitter = math.NaN() }, "Jitter"},
		{"infinite jitter", func(p *backoff.Backoff) { p.Jitter = math.Inf(1) }, "Jitter"},
		{"negative jitter", func(p *backoff.Backoff) { p.Jitter = -0.1 }, "Jitter"},
	} {
		p := valid
		tc.edit(&p)
		if err := p.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.field+" ") {
			t.Errorf("%s: Validate() = %v, want an error naming %s", tc.name, err, tc.field)
		}
	}
}

// TestDelayStaysWithinZeroAndMax: whatever a policy holds, a delay is never
// negative nor above Max.
func TestDelayStaysWithinZeroAndMax(t *testing.T) {
	for _, p := range []backoff.Backoff{
		{Base: time.Second, Factor: math.NaN(), Max: time.Minute},
		{Base: time.Second, Factor: math.Inf(1), Max: time.Minute},
		{Base: time.Second, Factor: 2, Max: time.Minute, Jitter: 5},
		{Base: time.Second, Factor: 2, Max: time.Minute, Jitter: math.Inf(1)},
		{Base: time.Second, Factor: -3, Max: time.Minute},
	} {
		for attempt := range 5 {
			if d := p.Delay(attempt+1, func() float64 { return 0 }); d < 0 || d > p.Max {
				t.Errorf("%+v attempt %d: %v, want within 0 and %v", p, attempt+1, d, p.Max)
			}
		}
	}
}

func TestWithDefaultsFillsOnlyZeroFields(t *testing.T) {
	def := backoff.Backoff{Base: time.Second, Factor: 2, Max: 30 * time.Second, Jitter: 0.2}
	set := backoff.Backoff{Base: 3 * time.Second, Factor: 1.5, Max: time.Minute, Jitter: 0.5}
	if got := set.WithDefaults(def); got != set {
		t.Errorf("a Backoff with every field set became %+v", got)
	}
	if got := (backoff.Backoff{}).WithDefaults(def); got != def {
		t.Errorf("the zero Backoff became %+v, want the defaults %+v", got, def)
	}
	once := (backoff.Backoff{Jitter: backoff.NoJitter}).WithDefaults(def)
	if once.Jitter != backoff.NoJitter || once.WithDefaults(def) != once {
		t.Errorf("NoJitter became %+v, and %+v with the defaults again; want NoJitter kept", once, once.WithDefaults(def))
	}
	if err := once.Validate(); err != nil {
		t.Errorf("Validate(NoJitter) = %v", err)
	}
	for attempt := 1; attempt <= 3; attempt++ {
		if got, want := once.Delay(attempt, func() float64 { return 0.99 }), def.Base<<(attempt-1); got != want {
			t.Errorf("NoJitter: attempt %d waits %v, want exactly %v", attempt, got, want)
		}
	}
}
