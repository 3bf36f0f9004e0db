package prom_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courierkit/courier/prom"
)

// TestConfigWithDefaults: each config's WithDefaults sets empty Buckets to
// its default and keeps (a copy of) Buckets and the label already set.
func TestConfigWithDefaults(t *testing.T) {
	own := []float64{0.5, 1}
	for _, c := range []struct {
		name       string
		zero, set  labelled
		defBuckets []float64
	}{
		{"Config", labelled{prom.Config{}.WithDefaults().Table, prom.Config{}.WithDefaults().Buckets},
			labelled{prom.Config{Table: "t"}.WithDefaults().Table, prom.Config{Buckets: own}.WithDefaults().Buckets}, prom.DefaultBuckets()},
		{"ConsumerConfig", labelled{prom.ConsumerConfig{}.WithDefaults().Group, prom.ConsumerConfig{}.WithDefaults().Buckets},
			labelled{prom.ConsumerConfig{Group: "t"}.WithDefaults().Group, prom.ConsumerConfig{Buckets: own}.WithDefaults().Buckets}, prom.DefaultBuckets()},
		{"DedupeConfig", labelled{prom.DedupeConfig{}.WithDefaults().Group, prom.DedupeConfig{}.WithDefaults().Buckets},
			labelled{prom.DedupeConfig{Group: "t"}.WithDefaults().Group, prom.DedupeConfig{Buckets: own}.WithDefaults().Buckets}, prom.DefaultDedupeBuckets()},
	} {
		if c.zero.label != "" || !slices.Equal(c.zero.buckets, c.defBuckets) {
			t.Errorf("%s{}.WithDefaults() = %+v, want no label and the default buckets %v", c.name, c.zero, c.defBuckets)
		}
		if c.set.label != "t" || !slices.Equal(c.set.buckets, own) {
			t.Errorf("%s{set}.WithDefaults() = %+v, want label t and buckets %v", c.name, c.set, own)
		}
		c.set.buckets[0] = 0.25
		if own[0] != 0.5 {
			t.Fatalf("%s.WithDefaults() aliases the caller's Buckets", c.name)
		}
	}
}

// labelled is what a config's WithDefaults returned: its constant label
// (Table or Group) and its buckets.
type labelled struct {
	label   string
	buckets []float64
}

// TestInvalidConfigIsOneError: every config error of the three
// constructors matches ErrInvalidConfig and names the field.
func TestInvalidConfigIsOneError(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, c := range []struct {
		name string
		err  error
		says string
	}{
		{"relay nil registerer", errOf(prom.NewRelayMetrics(nil, prom.Config{})), "registerer is nil"},
		{"relay table not UTF-8", errOf(prom.NewRelayMetrics(reg, prom.Config{Table: "\xff"})), "Table"},
		{"relay NaN bucket", errOf(prom.NewRelayMetrics(reg, prom.Config{Buckets: []float64{math.NaN()}})), "Buckets[0]"},
		{"consumer nil registerer", errOf(prom.NewConsumerMetrics(nil, prom.ConsumerConfig{})), "registerer is nil"},
		{"consumer group not UTF-8", errOf(prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Group: "\xff"})), "Group"},
		{"consumer unordered buckets", errOf(prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Buckets: []float64{1, 1}})), "Buckets[1]"},
		{"dedupe nil registerer", errOf(prom.NewDedupeMetrics(nil, prom.DedupeConfig{})), "registerer is nil"},
		{"dedupe group not UTF-8", errOf(prom.NewDedupeMetrics(reg, prom.DedupeConfig{Group: "\xff"})), "Group"},
		{"dedupe unordered buckets", errOf(prom.NewDedupeMetrics(reg, prom.DedupeConfig{Buckets: []float64{0.1, 0.01}})), "Buckets[1]"},
	} {
		if !errors.Is(c.err, prom.ErrInvalidConfig) || !strings.Contains(c.err.Error(), c.says) {
			t.Errorf("%s: %v; want ErrInvalidConfig naming %s", c.name, c.err, c.says)
		}
	}
}
