package bench

import (
	"slices"
	"time"
)

// MedianRate is n items over the median of durations, each the time one run
// took for n items: on a machine shared with others, the median shrugs off
// the run that met a neighbour's burst. It is 0 without durations.
func MedianRate(n int, durations []time.Duration) float64 {
	if len(durations) == 0 {
		return 0
	}
	sorted := slices.Sorted(slices.Values(durations))
	median := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		median = (sorted[len(sorted)/2-1] + median) / 2
	}
	return float64(n) / median.Seconds()
}
