package main

import (
	"strings"
	"testing"

	"github.com/courierkit/courier/internal/testkit"
)

// TestBenchSoak runs `courier bench soak` for three seconds at 100
// events/s on the in-process broker: exit 0, and a Markdown report whose
// Soak section has a row per second, then the drained row, and a verdict.
func TestBenchSoak(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t) // skips (or fails under CI) with a hint when PostgreSQL is down
	out, errOut := benchReport(t, []string{
		"- **Command:** `courier bench soak --database-url ",
		"- **Kafka:** in-process kfake broker",
		"| minute | enqueued/s | backlog | lag ms | queue table MB | queue indexes MB | queue live/dead tuples | vacuums | waiting table MB | history MB |\n",
		"- Verdict: **",
	}, "bench", "soak", "--duration", "3s", "--sample", "1s", "--settle", "1s", "--rate", "100", "--database-url", pg.URL)
	rows := markdownTables(out)["Soak"]
	if len(rows) != 4 || !strings.HasSuffix(rows[3][0], "(drained)") || rows[3][2] != "0" {
		t.Errorf("soak rows %q: want one a second for 3s, then the drained one with no backlog\n%s", rows, out)
	}
	if n := strings.Count(errOut, "soak minute "); n != len(rows) {
		t.Errorf("%d progress lines of samples on stderr, want %d:\n%s", n, len(rows), errOut)
	}
}

// TestBenchSoakRefusesBadFlags: a settle time not shorter than the soak,
// counts below 1, durations of no length and an unknown format are usage
// errors naming the flag, found before anything runs.
func TestBenchSoakRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--duration", "1m", "--settle", "10m"},
		{"--rate", "0"},
		{"--enqueuers", "-1"},
		{"--sample", "0s"},
		{"--duration", "-1s"},
		{"--output", "yaml"},
	} {
		code, out, errOut := courier(t, append([]string{"bench", "soak"}, args...)...)
		flag := args[len(args)-2]
		if code != exitUsage || !strings.Contains(errOut, flag) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want a usage error naming %s", args, code, out, errOut, flag)
		}
	}
}
