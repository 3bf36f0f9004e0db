package bench_test

// Benchmarks of the relay, each beside a baseline measured in the same run on
// the same PostgreSQL and the same broker (figures, not asserted wall-clock
// times), with cmd/courier/internal/bench's harness, which `courier bench
// relay` runs too. They need PostgreSQL (COURIER_TEST_DATABASE_URL) and use
// an in-process kfake broker unless COURIER_TEST_KAFKA_BROKERS names a
// cluster. They never run in a plain `go test`; run them with
//
//	go test -run '^$' -bench Relay -benchtime 1x ./cmd/courier/internal/bench/
//
// -benchtime 1x drains each backlog once per throughput configuration and
// runs one paced phase per latency sub-benchmark. -benchtime 5x drains five
// of each, the configurations taking turns: use it for figures. Anything
// else loading the machine (another go test) moves the figures.

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
	"github.com/courierkit/courier/internal/testkit"
)

// benchConfig is the harness's config on the test services, with the
// harness's default sizes: backlogs of 50,000 and 200,000 events, latency
// phases of 5s.
func benchConfig(b *testing.B, k *testkit.Kafka) bench.RelayConfig {
	return bench.RelayConfig{
		DatabaseURL: testkit.Postgres(b).URL, // skips (or fails under CI) with a hint when PostgreSQL is down
		Brokers:     k.Brokers,
		Sarama:      k.Config,
		Logger:      testkit.Logger(b),
		Name:        testkit.UniqueName(b, 40),
	}
}

// BenchmarkRelayThroughput drains backlogs of 50,000 and 200,000 events
// with the relay in several configurations and, as the baseline, with a
// plain SKIP LOCKED loop over a lean table that keeps no per-key order, and
// prints events/s for each beside the baseline's (bench.ThroughputRun).
// Each iteration drains each backlog with every configuration, taking
// turns; a configuration's rate is its events over its median drain time.
func BenchmarkRelayThroughput(b *testing.B) {
	run, err := bench.NewThroughputRun(context.Background(), benchConfig(b, testkit.NewKafka(b)))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := run.Close(); err != nil {
			b.Error(err)
		}
	})
	for b.Loop() {
		if err := run.Round(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(0, "ns/op") // the sum of every seeding and drain: meaningless
	if err := run.Report().WriteText(os.Stdout); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRelayLatency measures enqueue-to-arrival latency at 1,000 and
// 5,000 events/s, one event per transaction (bench.LatencyRun): the relay
// with its defaults, and the same events sent straight to Kafka, the
// baseline. Each iteration is one paced phase of 5s.
func BenchmarkRelayLatency(b *testing.B) {
	k := testkit.NewKafka(b)
	for _, rate := range bench.DefaultLatencyRates {
		for _, name := range bench.LatencyConfigurations() {
			b.Run(fmt.Sprintf("%s/rate=%d", name, rate), func(b *testing.B) {
				run, err := bench.NewLatencyRun(context.Background(), benchConfig(b, k), name, rate)
				if err != nil {
					b.Fatal(err)
				}
				defer func() {
					if err := run.Close(); err != nil {
						b.Error(err)
					}
				}()
				for b.Loop() {
					if err := run.Phase(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				res := run.Result()
				b.ReportMetric(res.P50, "p50-ms")
				b.ReportMetric(res.P99, "p99-ms")
				b.ReportMetric(res.Max, "max-ms")
				b.ReportMetric(res.EnqueueRate, "enqueued/s")
				b.ReportMetric(float64(res.Unarrived)/float64(b.N), "unarrived/op")
				for _, note := range res.Notes {
					b.Log(note)
				}
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
