package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/courierkit/courier/internal/bench"
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
	want := []string{bench.Raw, "runner/no-failures", "runner/1%-permanent", bench.RetryTiers, bench.DedupeMemory, bench.DedupeRedis,
		"runner/handler=5ms/workers=1", "runner/handler=5ms/workers=16"}
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
	}
	if strings.Contains(errOut, "message dead-lettered") {
		t.Errorf("the expected dead letters of the 1%% run reached stderr:\n%s", errOut)
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
