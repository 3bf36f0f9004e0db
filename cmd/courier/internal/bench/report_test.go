package bench

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestBenchReportMarkdownPutsEachFigureBesideItsBaseline renders a report of
// made-up figures: the header names the machine, and every table row holds
// its figure, its baseline's figure and the ratio.
func TestBenchReportMarkdownPutsEachFigureBesideItsBaseline(t *testing.T) {
	report := Report{
		Date:     time.Date(2026, 11, 24, 9, 30, 0, 0, time.UTC),
		Command:  "courier bench --rounds 5",
		Machine:  Machine{NumCPU: 2, GOMAXPROCS: 2, GoVersion: "go1.26.8", OS: "linux", Arch: "amd64", LoadAverage: "0.30 0.20 0.10"},
		Services: Services{PostgreSQL: "15.20", Redis: "7.0.15", Kafka: "in-process kfake broker"},
		Relay: &RelayReport{
			Backlogs: []int{50_000}, Rounds: 5, LatencyRates: []int{1_000}, LatencyDuration: 5 * time.Second,
			Throughput: []ThroughputResult{
				{Name: PlainLoop, Events: 50_000, Rate: 60_393.4, Baseline: PlainLoop, Ratio: 1},
				{Name: RelayDefaults, Events: 50_000, Rate: 66_624, Baseline: PlainLoop, Ratio: 1.1032, Target: 1.2, ClaimsPerDrain: 41.2,
					Stages: &BatchStages{Batches: 205, EventsPerBatch: 975.6, ClaimMs: 5.94, PublishMs: 11.25, SettleMs: 7.5}},
			},
			Scale: []ThroughputResult{
				{Name: "relay/defaults/relays=1/workers=1", Rate: 10_000, Baseline: "relay/defaults/relays=1/workers=1", Ratio: 1},
				{Name: "relay/defaults/relays=2/workers=1", Rate: 17_000, Baseline: "relay/defaults/relays=1/workers=1", Ratio: 1.7, Target: 1.6},
			},
			ScaleEvents: 50_000, ScaleDelay: time.Millisecond,
			Latency: []LatencyResult{
				{Name: RelayDefaults, Rate: 1_000, Phases: 5, P50: 2.1, P99: 3.8, Max: 37, EnqueueRate: 998, Baseline: DirectProduce, P50Ratio: 2.1, P99Ratio: 1.9,
					Stages: &BatchStages{Batches: 1400, EventsPerBatch: 3.6, ClaimMs: 2.87, PublishMs: 8.49, SettleMs: 2.86}, Notes: []string{"a note"}},
				{Name: DirectProduce, Rate: 1_000, Phases: 5, P50: 1, P99: 2, Max: 11, EnqueueRate: 999, Baseline: DirectProduce, P50Ratio: 1, P99Ratio: 1},
			},
		},
		Consume: &ConsumeReport{Messages: 200_000, SlowMessages: 4_000, Rounds: 5, Results: []Result{
			{Name: Raw, Rate: 515_156, Baseline: Raw, Ratio: 1},
			{Name: "runner/handler=5ms/workers=1", Rate: 1_931, Baseline: "runner/handler=5ms/workers=1", Ratio: 1, Ceiling: 2_089},
		}},
	}
	var out bytes.Buffer
	if err := report.WriteMarkdown(&out); err != nil {
		t.Fatal(err)
	}
	doc := out.String()
	for _, want := range []string{
		"- **Date:** 2026-11-24 09:30 UTC\n",
		"- **Command:** `courier bench --rounds 5`\n",
		"- **Cores:** 2 (runtime.NumCPU), GOMAXPROCS 2\n",
		"- **Load average at the start:** 0.30 0.20 0.10",
		"- **PostgreSQL:** 15.20\n",
		"share the machine's 2 cores",
		"same backlog;\n5 drains each",
		"| `plain-skip-locked-loop/delete/workers=4` | 60,393 | `plain-skip-locked-loop/delete/workers=4` | 60,393 | 1.00× |  |\n",
		"| `relay/defaults` | 66,624 | `plain-skip-locked-loop/delete/workers=4` | 60,393 | 1.10× | 1.20× (**not met**) batch of 976: claim 5.9 + publish 11.2 + settle 7.5 ms |\n",
		"## Relay scaling\n",
		"| `relay/defaults/relays=2/workers=1` | 17,000 | `relay/defaults/relays=1/workers=1` | 10,000 | 1.70× | 1.60× (met) |\n",
		"| `relay/defaults` | 1,000 | 2.1 | 3.8 | 37.0 | 998 | `direct-produce` | 2.10× | 1.90× | batch of 4: claim 2.9 + publish 8.5 + settle 2.9 ms |\n",
		"- `relay/defaults` at 1,000/s: a note.\n",
		"| `raw-sarama-group` | 515,156 | `raw-sarama-group` | 515,156 | 1.00× |  |\n",
		"| `runner/handler=5ms/workers=1` | 1,931 | `runner/handler=5ms/workers=1` | 1,931 | 1.00× | 2,089 |\n",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the report lacks %q:\n%s", want, doc)
		}
	}
	if strings.Contains(doc, "was busy") {
		t.Errorf("a load of 0.3 on 2 cores is not worth a warning:\n%s", doc)
	}
	report.Machine.LoadAverage = "4.01 3.15 1.98"
	out.Reset()
	if err := report.WriteMarkdown(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "**The machine was busy when this run started** (load average 4.01 over the last minute, on\n2 cores)") {
		t.Errorf("no warning of a load of 4 on 2 cores:\n%s", out.String())
	}
	doc = out.String()
	if strings.Contains(doc, "**Commit:**") {
		t.Errorf("a commit line, though none was recorded:\n%s", doc)
	}
	if !strings.Contains(doc, "- **CPU:** linux/amd64\n") {
		t.Errorf("without a CPU model, the CPU line should say os/arch:\n%s", doc)
	}
}

func TestBenchThousands(t *testing.T) {
	for x, want := range map[float64]string{0: "0", 999.4: "999", 999.6: "1,000", 60_393: "60,393", 1_234_567: "1,234,567"} {
		if got := thousands(x); got != want {
			t.Errorf("thousands(%v) = %q, want %q", x, got, want)
		}
	}
}
