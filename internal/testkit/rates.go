package testkit

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
)

// Rates collects the rates that sub-benchmarks report, to print each beside
// a baseline measured in the same run (benchmarks are programs that print
// figures, not timed tests). It is safe for concurrent use.
type Rates struct {
	// Unit names the rate, e.g. "events/s"; it is also the metric's unit.
	Unit string

	mu    sync.Mutex
	names []string
	rates map[string]float64
	notes map[string]string
}

// Report reports count items per iteration over b's elapsed time as a
// metric of b, keeps it under name and returns it.
func (r *Rates) Report(b *testing.B, name string, count int) float64 {
	rate := float64(count) * float64(b.N) / b.Elapsed().Seconds()
	b.ReportMetric(rate, r.Unit)
	r.Set(name, rate)
	return rate
}

// Set keeps rate under name, for a rate measured otherwise than over a
// whole sub-benchmark.
func (r *Rates) Set(name string, rate float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rates == nil {
		r.rates = map[string]float64{}
	}
	if _, ok := r.rates[name]; !ok {
		r.names = append(r.names, name)
	}
	r.rates[name] = rate
}

// Note adds text at the end of name's line.
func (r *Rates) Note(name, text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.notes == nil {
		r.notes = map[string]string{}
	}
	r.notes[name] = text
}

// Print writes title, then a line per rate, in the order first reported,
// with its ratio to the rate of baseline(name) when that was reported.
func (r *Rates) Print(w io.Writer, title string, baseline func(name string) string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var sb strings.Builder
	sb.WriteString(title + "\n")
	for _, name := range r.names {
		fmt.Fprintf(&sb, "  %-36s %9.0f", name, r.rates[name])
		if base, ok := r.rates[baseline(name)]; ok {
			fmt.Fprintf(&sb, "  %5.2fx %s", r.rates[name]/base, baseline(name))
		}
		if note := r.notes[name]; note != "" {
			sb.WriteString("  " + note)
		}
		sb.WriteByte('\n')
	}
	_, _ = io.WriteString(w, sb.String())
}
