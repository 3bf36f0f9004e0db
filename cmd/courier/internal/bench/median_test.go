package bench_test

import (
	"testing"
	"time"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
)

func TestMedianRate(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		var out []time.Duration
		for _, v := range n {
			out = append(out, time.Duration(v)*time.Millisecond)
		}
		return out
	}
	for _, c := range []struct {
		durations []time.Duration
		want      float64
	}{
		{ms(500, 100, 400), 1000 / 0.4},       // odd: the middle one, whatever the order
		{ms(100, 300, 200, 900), 1000 / 0.25}, // even: the mean of the middle two
		{nil, 0},
	} {
		if got := bench.MedianRate(1000, c.durations); got != c.want {
			t.Errorf("MedianRate(1000, %v) = %v, want %v", c.durations, got, c.want)
		}
	}
}
