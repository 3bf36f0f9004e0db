package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
	"github.com/courierkit/courier/internal/testkit"
)

// TestBenchConsume runs `courier bench consume` on small backlogs on the
// in-process broker: every configuration reports a rate beside its
// baseline, as JSON.
func TestBenchConsume(t *testing.T) {
	t.Parallel()
	code, out, errOut := courier(t, "bench", "consume", "--messages", "2000", "--slow-messages", "120", "--output", "json",
		"--redis-url", testkit.RedisURL())
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var report bench.ConsumeReport
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("output is not a report: %v\n%s", err, out)
	}
	want := []string{bench.Raw, "runner/no-failures", bench.RawDeadLetters, "runner/1%-permanent", bench.RetryTiers, bench.RawRetries, bench.RetryTier,
		bench.DedupeMemory, bench.RawSetNX, bench.DedupeRedis, "runner/handler=5ms/workers=1", "runner/handler=5ms/workers=16"}
	if len(report.Results) != len(want) || report.Messages != 2000 || report.Rounds != 1 {
		t.Fatalf("report %+v, want the %d configurations over 2000 messages, 1 round", report, len(want))
	}
	for i, r := range report.Results {
		if r.Name != want[i] || r.Rate <= 0 || r.Ratio <= 0 {
			t.Errorf("result %d: %+v, want %s with a rate and a ratio to its baseline", i, r, want[i])
		}
		if strings.Contains(r.Name, "5ms") && r.Ceiling <= 0 {
			t.Errorf("%s has no ceiling", r.Name)
		}
		if wantBase := map[string]string{"runner/1%-permanent": bench.RawDeadLetters, bench.RetryTier: bench.RawRetries}[r.Name]; wantBase != "" && r.Baseline != wantBase {
			t.Errorf("%s is beside %s, want the raw group doing the same work, %s", r.Name, r.Baseline, wantBase)
		}
		// On Linux each configuration has a CPU figure, unless the report
		// says why not (a 5 ms run can be over before the machine's clock
		// ticks).
		if c := r.CPU; runtime.GOOS == "linux" && (c == nil && report.CPUUnknown == "" || c != nil && (c.ProcessBusy <= 0 || c.ProcessMicrosPerMessage <= 0 || c.MachineCPUs < 1)) {
			t.Errorf("%s: CPU %+v (unknown: %q), want the process's CPU and the machine's CPUs", r.Name, c, report.CPUUnknown)
		}
	}
	if runtime.GOOS == "linux" && report.Results[0].CPU == nil {
		t.Errorf("%s has no CPU figure: %s", bench.Raw, report.CPUUnknown)
	}
	if strings.Contains(errOut, "message dead-lettered") {
		t.Errorf("the expected dead letters of the 1%% run reached stderr:\n%s", errOut)
	}
	// redis-benchmark, where installed, measured the dedupe's two commands,
	// a claim (SET) and a done mark (SADD); elsewhere stderr says it did
	// not run.
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		if !strings.Contains(errOut, "not running redis-benchmark") {
			t.Errorf("redis-benchmark is not installed, and stderr does not say so:\n%s", errOut)
		}
		return
	}
	if len(report.Redis) != 2 {
		t.Fatalf("redis-benchmark figures %+v, want the claim's and the done mark's", report.Redis)
	}
	for i, verb := range []string{" SET ", " SADD "} {
		c := report.Redis[i]
		if c.Rate <= 0 || c.Messages < 1 || !strings.HasPrefix(c.Command, "redis-benchmark ") || !strings.Contains(c.Command, verb) {
			t.Errorf("redis-benchmark figure %+v, want a rate, the messages a request serves and the%scommand line that measured it", c, verb)
		}
	}
}

// TestBenchReplay runs `courier bench replay` on a few hundred dead letters
// on the in-process broker, as JSON: the copy loop and courier's replay,
// each with a rate, the replay beside the loop with the goal's target.
// Under --network its text says the profile it ran under.
func TestBenchReplay(t *testing.T) {
	t.Parallel()
	code, out, errOut := courier(t, "bench", "replay", "--dead-letters", "500", "--output", "json")
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	var report bench.ReplayReport
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("output is not a replay report: %v\n%s", err, out)
	}
	if report.DeadLetters != 500 || len(report.Results) != 2 || report.Results[0].Name != bench.RawCopyLoop || report.Results[1].Name != bench.ReplayDefaults {
		t.Fatalf("report %+v, want the copy loop and the replay over 500 dead letters", report)
	}
	for _, r := range report.Results {
		if r.Rate <= 0 || r.Ratio <= 0 || r.Baseline != bench.RawCopyLoop {
			t.Errorf("%+v, want a rate and a ratio to %s", r, bench.RawCopyLoop)
		}
	}
	if report.Results[1].Target != 0.8 {
		t.Errorf("the replay's target is %v, want 0.8", report.Results[1].Target)
	}
	if !strings.Contains(errOut, "dlq replay: round 1 of 1") {
		t.Errorf("no progress on stderr:\n%s", errOut)
	}
	code, text, errOut := courier(t, "bench", "replay", "--network", "--quick", "--dead-letters", "300")
	if code != exitOK || !strings.HasPrefix(text, "Profile: network: ") || !strings.Contains(text, bench.ReplayDefaults) {
		t.Errorf("exit %d, %s; want the profile, then the replay's lines:\n%s", code, errOut, text)
	}
}

// TestBenchConsumeRefusesBadCounts: a count below 1 is a usage error.
func TestBenchConsumeRefusesBadCounts(t *testing.T) {
	t.Parallel()
	for _, flag := range []string{"--messages", "--slow-messages", "--rounds"} {
		code, _, errOut := courier(t, "bench", "consume", flag, "0")
		if code != exitUsage || !strings.Contains(errOut, flag) {
			t.Errorf("%s 0: exit %d, stderr %q; want a usage error naming the flag", flag, code, errOut)
		}
	}
}

// TestBenchReport runs `courier bench` on tiny backlogs, one round, on the
// in-process broker: one Markdown report with the machine's core count,
// the services and the command in its header, and tables whose every
// row holds a figure, its baseline's and the ratio. It checks the shape of
// the report, never a figure.
func TestBenchReport(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t) // skips (or fails under CI) with a hint when PostgreSQL is down
	// The report this run replaces: one of an older layout, whose tables
	// hold one relay figure.
	previous := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(previous, []byte("# courier benchmarks\n\n- **Date:** 2026-11-25 20:42 UTC\n- **Commit:** 9d281b841f7c\n\n"+
		"## Relay throughput\n\n| configuration | events/s | baseline | baseline events/s | ratio | target |\n| --- | ---: | --- | ---: | ---: | --- |\n"+
		"| `relay/defaults/events=200,000` | 72,820 | `plain-skip-locked-loop/keep/workers=2/events=200,000` | 71,524 | 1.02× | |\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut := benchReport(t, []string{
		fmt.Sprintf("- **Cores:** %d (runtime.NumCPU), GOMAXPROCS %d\n", runtime.NumCPU(), runtime.GOMAXPROCS(0)),
		"- **Go:** " + runtime.Version() + "\n",
		"- **PostgreSQL:** ",
		"- **Redis:** ",
		"- **Kafka:** in-process kfake broker",
		"- **Command:** `courier bench --database-url ",
	}, "bench", "--quick", "--events", "300", "--scale-events", "300", "--latency-duration", "200ms",
		"--messages", "2000", "--slow-messages", "120", "--database-url", pg.URL, "--redis-url", testkit.RedisURL(), "--previous", previous)
	if !strings.Contains(out, " --quick ") {
		t.Errorf("the command line lacks --quick")
	}
	if headlines := markdownTables(out)["Headline figures"]; len(headlines) != 2 ||
		!strings.Contains(out, "- **Date:** "+headlines[0][0]+" ") || !strings.HasSuffix(headlines[0][2], "×)") ||
		strings.Join(headlines[1], "|") != "2026-11-25|9d281b8|72,820/s (1.02×)|–|–|–|–|–|–" {
		t.Errorf("the headline figures should be this run's, then the previous report's: %q\n%s", headlines, out)
	}
	tables := markdownTables(out)
	want := map[string][]string{
		"Relay throughput": {bench.PlainLoop + "/events=300", "plain-skip-locked-loop/delete/workers=1/events=300", bench.PlainLoopKeep + "/events=300",
			bench.RelayDefaults + "/events=300", bench.RelayDiscard + "/events=300", "relay/workers=1/events=300", "relay/workers=2/events=300",
			"relay/relays=2/events=300", bench.RelayTraced + "/events=300"},
		"Relay scaling": {"relay/defaults/relays=1/workers=1", "relay/defaults/relays=2/workers=1", "relay/defaults/relays=4/workers=1",
			"relay/defaults/relays=1/workers=2", "relay/defaults/relays=1/workers=4"},
		"Relay latency": bench.LatencyConfigurations(),
		"Consumer": {bench.Raw, "runner/no-failures", bench.RawDeadLetters, "runner/1%-permanent", bench.RetryTiers, bench.RawRetries, bench.RetryTier,
			bench.DedupeMemory, bench.RawSetNX, bench.DedupeRedis, "runner/handler=5ms/workers=1", "runner/handler=5ms/workers=16"},
		"DLQ replay": {bench.RawCopyLoop, bench.ReplayDefaults},
	}
	baselineColumn := map[string]int{"Relay throughput": 2, "Relay scaling": 2, "Relay latency": 6, "Consumer": 2, "DLQ replay": 2}
	ratioColumn := map[string]int{"Relay throughput": 4, "Relay scaling": 4, "Relay latency": 7, "Consumer": 4, "DLQ replay": 4}
	for section, names := range want {
		rows := tables[section]
		if len(rows) != len(names) {
			t.Errorf("%s: %d rows, want %d\n%s", section, len(rows), len(names), out)
			continue
		}
		for i, row := range rows {
			if row[0] != "`"+names[i]+"`" {
				t.Errorf("%s row %d is %s, want %s", section, i, row[0], names[i])
			}
			if base := row[baselineColumn[section]]; !strings.HasPrefix(base, "`") {
				t.Errorf("%s row %d names no baseline: %q", section, i, row)
			}
			if ratio := row[ratioColumn[section]]; !strings.HasSuffix(ratio, "×") || ratio == "0.00×" {
				t.Errorf("%s row %d has no ratio to its baseline: %q", section, i, row)
			}
		}
	}
	if replay := tables["DLQ replay"]; len(replay) == 2 && replay[1][5] == "" {
		t.Errorf("the replay row has no target: %q", replay[1])
	}
	if !strings.Contains(errOut, "relay throughput: round 1 of 1") || !strings.Contains(errOut, "consumer: round 1 of 1") || !strings.Contains(errOut, "dlq replay: round 1 of 1") {
		t.Errorf("no progress on stderr:\n%s", errOut)
	}
}

// benchReport runs courier with args, which must exit 0, and checks that
// its stdout is a Markdown report holding each of want; it returns stdout
// and stderr.
func benchReport(t *testing.T, want []string, args ...string) (out, errOut string) {
	t.Helper()
	code, out, errOut := courier(t, args...)
	if code != exitOK {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, w := range append([]string{"# courier benchmarks\n"}, want...) {
		if !strings.Contains(out, w) {
			t.Errorf("the report lacks %q:\n%s", w, out)
		}
	}
	return out, errOut
}

// markdownTables returns the body rows of the first table under each "## "
// heading of doc, each row split into its cells; a row with another count
// of cells than its header is left out, so the caller's count fails.
func markdownTables(doc string) map[string][][]string {
	tables := map[string][][]string{}
	section, header := "", 0
	for line := range strings.SplitSeq(doc, "\n") {
		if heading, ok := strings.CutPrefix(line, "## "); ok {
			section, header = heading, 0
			continue
		}
		if !strings.HasPrefix(line, "|") || section == "" {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		switch {
		case header == 0:
			header = len(cells)
		case cells[0] == "---":
		case len(cells) == header:
			tables[section] = append(tables[section], cells)
		}
	}
	return tables
}

// TestBenchRefusesBadFlags: a count below 1, a latency phase of no length,
// an unknown format and no database are usage errors naming the flag,
// found before anything runs.
// TestBenchNetworkProfileDelaysEveryService: under --network the relay
// drains through delay lines to PostgreSQL and to each of 3 brokers, and
// a Produce is answered the profile's delay later: the baseline that
// sends each event straight to Kafka takes at least the Produce delay and
// a round trip to a broker, and the report's header says so.
func TestBenchNetworkProfileDelaysEveryService(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	code, out, errOut := courier(t, "bench", "relay", "--network", "--network-produce", "30ms", "--network-kafka", "2ms", "--only", bench.RelayDefaults,
		"--events", "300", "--scale-delay", "-1ms", "--latency-rates", "50", "--latency-duration", "400ms", "--database-url", pg.URL, "--output", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	var report bench.RelayReport
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for _, res := range report.Latency {
		if res.Name == bench.DirectProduce && res.P50 < 34 {
			t.Errorf("direct produce p50 %.1f ms under a 30 ms Produce delay and 2 ms each way to the broker; want 34 ms or more", res.P50)
		}
	}
	if len(report.Throughput) == 0 || report.Throughput[len(report.Throughput)-1].Rate <= 0 {
		t.Errorf("no drain through the delay lines: %+v", report.Throughput)
	}
	// The scaling run goes through the profile's delay lines, not a proxy
	// of its own on top of them.
	code, md, errOut := courier(t, "bench", "relay", "--network", "--quick", "--only", bench.RelayDefaults, "--latency-duration", "-1s",
		"--database-url", pg.URL, "--output", "markdown")
	if code != 0 || !strings.Contains(md, "Profile:** network: every connection through a delay line, PostgreSQL 500µs each way, Redis 250µs each way, Kafka 500µs each way to each of 3 brokers, and each Produce answered 5ms later") {
		t.Errorf("exit %d, %s; want the network profile in the header:\n%s", code, errOut, md)
	}
	if !strings.Contains(md, "against a PostgreSQL reached through the network profile's delay lines") || strings.Contains(md, "proxy") ||
		len(markdownTables(md)["Relay scaling"]) != 5 {
		t.Errorf("want the scaling run's 5 configurations through the profile's delay lines, and no proxy of its own:\n%s", md)
	}
}

func TestBenchRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"bench", "--events", "0"},
		{"bench", "--slow-messages", "-1"},
		{"bench", "relay", "--rounds", "0"},
		{"bench", "relay", "--latency-rate", "0"},
		{"bench", "relay", "--latency-duration", "0s"},
		{"bench", "relay", "--database-url", ""},
		{"bench", "--output", "yaml"},
		{"bench", "consume", "--output", "yaml"},
		{"bench", "--previous", filepath.Join(t.TempDir(), "missing.md")},
		{"bench", "relay", "--network", "--network-produce", "-1ms"},
		{"bench", "relay", "--network", "--brokers", "127.0.0.1:9092"},
		{"bench", "relay", "--network", "--scale-delay", "1ms"},
		{"bench", "replay", "--dead-letters", "0"},
		{"bench", "replay", "--rounds", "0"},
		{"bench", "replay", "--output", "yaml"},
	} {
		code, _, errOut := courier(t, args...)
		flag := args[len(args)-2]
		if code != exitUsage || !strings.Contains(errOut, flag) {
			t.Errorf("%q: exit %d, stderr %q; want a usage error naming %s", args, code, errOut, flag)
		}
	}
}
