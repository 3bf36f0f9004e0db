package bench_test

// BenchmarkConsume measures the runner beside a raw Sarama consumer group in
// the same run on the same broker, with cmd/courier/internal/bench's harness, which
// `courier bench consume` runs too. It prints figures and asserts none: a
// wall-clock bound would fail on a loaded machine, not on a slow consumer. It uses an in-process kfake broker unless
// COURIER_TEST_KAFKA_BROKERS names a cluster. It never runs in a plain
// `go test`; run it with
//
//	go test -run '^$' -bench Consume -benchtime 5x ./cmd/courier/internal/bench/
//
// Each iteration consumes one backlog with every configuration, taking
// turns (about 10s an iteration on two cores); the figures are medians.
// Anything else loading the machine (another go test) moves them.
//
// Each configuration consumes under the pprof label config=<its name>, so
// that a CPU profile splits by configuration:
//
//	go test -run '^$' -bench Consume -cpuprofile cpu.out ./cmd/courier/internal/bench/
//	go tool pprof -tagfocus config=runner/dedupe-redis cpu.out
//
// The value is a regular expression, matched anywhere: anchor it
// ('config=^runner/handler=5ms/workers=1$') where one name is inside
// another. The label covers the goroutines the consumer (or the raw group)
// starts; the in-process broker's goroutines started before it, so their
// samples carry no label (-tagignore config=. shows them alone), nor do
// the seeding's.

import (
	"context"
	"os"
	"testing"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
	"github.com/courierkit/courier/internal/testkit"
)

func BenchmarkConsume(b *testing.B) {
	k := testkit.NewKafka(b)
	cfg := bench.ConsumeConfig{
		Brokers: k.Brokers,
		Sarama:  k.Config,
		Logger:  testkit.Logger(b, `msg="message dead-lettered"`, `msg="message sent to a retry topic"`),
		Name:    testkit.UniqueName(b, 60),
		Redis:   testkit.NewRedis(b).Client,
	}
	if k.Cluster != nil {
		cfg.Fetching = bench.KfakeFetching(k.Cluster)
	}
	run, err := bench.NewConsumeRun(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := run.Round(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(0, "ns/op") // the sum of every consumption and seeding: meaningless
	report := run.Report()
	units := map[string]string{ // each beside its baseline
		"runner/no-failures": "no-failures-x-raw", "runner/1%-permanent": "1%-permanent-x-sync-dead-letter",
		bench.RetryTiers: "1%-through-retry-tiers-x-raw", bench.RetryTier: "5%-through-a-retry-tier-x-sync-retry",
		bench.DedupeRedis: "dedupe-redis-x-raw",
	}
	for _, r := range report.Results {
		if unit, ok := units[r.Name]; ok {
			b.ReportMetric(r.Ratio, unit)
		}
	}
	if err := report.WriteText(os.Stdout); err != nil {
		b.Fatal(err)
	}
}
