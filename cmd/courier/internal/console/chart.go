package console

import (
	"time"

	"github.com/courierkit/courier/producer"
)

// Chart geometry, in SVG user units.
const (
	chartWidth  = 720
	chartHeight = 120
)

// chart is the last hour's publish rate (bars) and relay lag (a line), laid
// out for an inline SVG; the template draws it, so no script runs.
type chart struct {
	Width, Height int
	Bars          []bar
	// Lag marks the longest lag of each step that published events.
	Lag []tick
	// MaxPublished and MaxLag label the scales.
	MaxPublished int64
	MaxLag       time.Duration
	// Total is the events published in the window; PerSecond their mean
	// rate.
	Total     int64
	PerSecond float64
	From, To  time.Time
}

// tick is a short horizontal mark on the chart: it stretches with the
// chart, as a dot would not.
type tick struct{ X, Y, W float64 }

// bar is one step's count.
type bar struct {
	X, Y, W, H float64
	Title      string
}

// newChart lays out points (oldest first, equal steps).
func newChart(points []producer.ActivityPoint) chart {
	c := chart{Width: chartWidth, Height: chartHeight}
	if len(points) == 0 {
		return c
	}
	for _, p := range points {
		c.Total += p.Published
		c.MaxPublished = max(c.MaxPublished, p.Published)
		c.MaxLag = max(c.MaxLag, p.MaxLag)
	}
	c.From, c.To = points[0].At, points[len(points)-1].At
	step := time.Minute
	if len(points) > 1 {
		step = points[1].At.Sub(points[0].At)
	}
	c.To = c.To.Add(step)
	c.PerSecond = float64(c.Total) / c.To.Sub(c.From).Seconds()
	w := float64(chartWidth) / float64(len(points))
	for i, p := range points {
		x := float64(i) * w
		h := 0.0
		if c.MaxPublished > 0 {
			h = float64(p.Published) / float64(c.MaxPublished) * (chartHeight - 4)
		}
		c.Bars = append(c.Bars, bar{X: x, Y: chartHeight - h, W: max(w-1, 1), H: h,
			Title: p.At.UTC().Format("15:04") + ": " + thousands(p.Published) + " published, lag up to " + roundDuration(p.MaxLag)})
		if p.Published > 0 {
			y := float64(chartHeight - 3)
			if c.MaxLag > 0 {
				y = 3 + (1-float64(p.MaxLag)/float64(c.MaxLag))*(chartHeight-6)
			}
			c.Lag = append(c.Lag, tick{X: x, Y: y - 1.5, W: max(w-1, 1)})
		}
	}
	return c
}
