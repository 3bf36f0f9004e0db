package bench

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fullReport is a report of every harness with made-up figures, dated
// day and built from commit.
func fullReport(day int, commit string) Report {
	return Report{
		Date:    time.Date(2026, 12, day, 9, 30, 0, 0, time.UTC),
		Command: "courier bench --rounds 5",
		Machine: Machine{NumCPU: 2, GOMAXPROCS: 2, GoVersion: "go1.26.8", OS: "linux", Arch: "amd64", Commit: commit},
		Relay: &RelayReport{
			Backlogs: []int{50_000, 200_000}, Rounds: 5,
			Throughput: []ThroughputResult{
				{Name: PlainLoopKeep + "/events=50,000", Rate: 50_000, Baseline: PlainLoopKeep + "/events=50,000", Ratio: 1},
				{Name: RelayDefaults + "/events=50,000", Rate: 60_000, Baseline: PlainLoopKeep + "/events=50,000", Ratio: 1.2},
				{Name: PlainLoopKeep + "/events=200,000", Rate: 70_000, Baseline: PlainLoopKeep + "/events=200,000", Ratio: 1},
				{Name: RelayDefaults + "/events=200,000", Rate: 77_000 + float64(day), Baseline: PlainLoopKeep + "/events=200,000", Ratio: 1.1},
			},
			Scale: []ThroughputResult{
				{Name: "relay/defaults/relays=1/workers=1", Rate: 20_000, Baseline: "relay/defaults/relays=1/workers=1", Ratio: 1},
				{Name: "relay/defaults/relays=4/workers=1", Rate: 50_000, Baseline: "relay/defaults/relays=1/workers=1", Ratio: 2.5, Target: 3.2},
			},
			ScaleEvents: 50_000, ScaleDelay: time.Millisecond,
			Latency: []LatencyResult{
				{Name: RelayDefaults, Rate: 1_000, Phases: 5, P50: 2.1, P99: 12.5, Max: 37, EnqueueRate: 998, Baseline: DirectProduce, P50Ratio: 2.1, P99Ratio: 4.71},
				{Name: RelayDefaults, Rate: 5_000, Phases: 5, P50: 30, P99: 99, Max: 200, EnqueueRate: 4_000, Baseline: DirectProduce, P50Ratio: 40, P99Ratio: 30},
			},
		},
		Consume: &ConsumeReport{Messages: 200_000, SlowMessages: 4_000, Rounds: 5, Results: []Result{
			{Name: Raw, Rate: 300_000, Baseline: Raw, Ratio: 1},
			{Name: NoFailures, Rate: 267_003, Baseline: Raw, Ratio: 0.89},
			{Name: DedupeRedis, Rate: 136_525, Baseline: Raw, Ratio: 0.455},
		}},
		Enqueue: &EnqueueReport{
			Command: "pgbench …", Duration: 10 * time.Second, Rounds: 5, BatchEvents: 100, BatchClients: 16,
			Single: []EnqueueResult{
				{Clients: 16, OrderOnly: 4_702, FloorRow: 3_711, CourierEnqueue: 3_518, CourierToFloor: 0.948},
				{Clients: 64, OrderOnly: 3_879, FloorRow: 3_510, CourierEnqueue: 2_890, CourierToFloor: 0.82},
			},
			Batch: BatchResult{Name: "enqueue-batch-100", Baseline: "copy-100", Rate: 71_511, BaselineRate: 81_353, Ratio: 0.88},
		},
	}
}

func markdownOf(t *testing.T, r Report) string {
	t.Helper()
	var out bytes.Buffer
	if err := r.WriteMarkdown(&out); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// TestHeadlineFiguresComeFromTheReportsTables: a full report's table of
// headline figures holds, for its run, the figures its own tables show:
// the relay's largest backlog, 4 relays through the proxy, p99 at
// 1,000/s, the runner, the Redis dedupe, 16 clients' enqueue and the
// batch, each with its ratio.
func TestHeadlineFiguresComeFromTheReportsTables(t *testing.T) {
	doc := markdownOf(t, fullReport(1, "0123456789abcdef"))
	want := "| 2026-12-01 | 0123456 | 77,001/s (1.10×) | 50,000/s (2.50×) | 12.5 ms (4.71×) | 267,003/s (0.89×) | 136,525/s (0.46×) | 0.95× | 71,511/s (0.88×) |\n"
	if !strings.Contains(doc, "## Headline figures\n") || !strings.Contains(doc, want) {
		t.Fatalf("the report lacks the headline row\n%s\n%s", want, doc)
	}
	if i, j := strings.Index(doc, "## Headline figures"), strings.Index(doc, "## Relay throughput"); i > j {
		t.Errorf("the headline figures should come before the sections they sum up:\n%s", doc)
	}
	if !strings.Contains(doc, "- **Profile:** loopback (PostgreSQL, Redis and Kafka on this machine); the relay scaling run reaches PostgreSQL through a proxy holding every packet 1ms each way (network)\n") {
		t.Errorf("the header does not name the profiles:\n%s", doc)
	}

	partial := fullReport(1, "")
	partial.Consume = nil
	if doc := markdownOf(t, partial); strings.Contains(doc, "Headline figures") {
		t.Errorf("a report of some harnesses only has no headline table:\n%s", doc)
	}
}

// TestEachReportKeepsTheHeadlinesOfTheRunsBefore: a report written with
// the headlines of the one it replaces lists its own run first, then
// theirs, newest first, at most MaxHeadlines rows; a report of an older
// layout, without a headline table, gives the one row its tables hold.
func TestEachReportKeepsTheHeadlinesOfTheRunsBefore(t *testing.T) {
	first := markdownOf(t, fullReport(1, "aaaaaaa1"))
	legacy := first[:strings.Index(first, "## Headline figures")] + first[strings.Index(first, "## Relay throughput"):]
	if rows := HeadlinesOf(legacy); len(rows) != 1 || rows[0][0] != "2026-12-01" || rows[0][2] != "77,001/s (1.10×)" {
		t.Fatalf("HeadlinesOf(a report without a headline table) = %q, want its own run's row", rows)
	}
	doc := first
	for day := 2; day <= 12; day++ {
		r := fullReport(day, fmt.Sprintf("bbbbbb%02d", day))
		r.Earlier = HeadlinesOf(doc)
		doc = markdownOf(t, r)
	}
	rows := HeadlinesOf(doc)
	if len(rows) != MaxHeadlines {
		t.Fatalf("%d rows after 12 runs, want %d:\n%s", len(rows), MaxHeadlines, doc)
	}
	for i, row := range rows {
		day := 12 - i
		if wantDate, wantRelay := fmt.Sprintf("2026-12-%02d", day), fmt.Sprintf("77,0%02d/s (1.10×)", day); row[0] != wantDate || row[2] != wantRelay {
			t.Errorf("row %d = %q, want the run of %s relaying %s", i, row, wantDate, wantRelay)
		}
	}
	if rows[0][1] != "bbbbbb1" {
		t.Errorf("the commit cell = %q, want the first 7 characters", rows[0][1])
	}
}

// TestHeadlinesOfAnythingElseIsNothing: a file that is not a report, or a
// headline table of other columns, gives no rows and no panic.
func TestHeadlinesOfAnythingElseIsNothing(t *testing.T) {
	for name, doc := range map[string]string{
		"empty":        "",
		"prose":        "# notes\n\nnothing here | or here\n",
		"binary":       "\x00\xff|\x1b[31m|\n|",
		"other layout": "- **Date:** 2026-12-01 09:30 UTC\n\n## Headline figures\n\n| run | other |\n| --- | --- |\n| 2026-11-30 | x |\n",
	} {
		rows := HeadlinesOf(doc)
		switch name {
		case "other layout":
			// Its header still names a run, whose tables hold no figure.
			if len(rows) != 1 || rows[0][0] != "2026-12-01" || rows[0][2] != "–" {
				t.Errorf("%s: HeadlinesOf = %q, want the run's row of dashes", name, rows)
			}
		default:
			if rows != nil {
				t.Errorf("%s: HeadlinesOf = %q, want none", name, rows)
			}
		}
	}
}
