package bench_test

import (
	"fmt"
	"time"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
)

// Three runs of 1,000 items: the median run took 250ms, whatever the
// outlier did.
func ExampleMedianRate() {
	runs := []time.Duration{200 * time.Millisecond, 900 * time.Millisecond, 250 * time.Millisecond}
	fmt.Printf("%.0f items/s\n", bench.MedianRate(1000, runs))
	// Output: 4000 items/s
}
