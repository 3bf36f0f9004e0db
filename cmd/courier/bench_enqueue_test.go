package main

import (
	"strings"
	"testing"

	"github.com/courierkit/courier/internal/testkit"
)

// TestBenchEnqueueQuick runs `courier bench enqueue --quick`: a Markdown
// report whose header names PostgreSQL and the command, with the
// single-event table (one row, for 4 clients, each figure beside its ratio
// and the target) and the batch table, and progress on stderr.
func TestBenchEnqueueQuick(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t) // skips (or fails under CI) with a hint when PostgreSQL is down
	out, errOut := benchReport(t, []string{
		"- **PostgreSQL:** ",
		"- **Command:** `courier bench enqueue --database-url ",
		"| clients | order only tps | + floor row tps | + courier enqueue tps | courier / floor | target |\n",
		"| events/s | baseline | ratio | target |\n",
	}, "bench", "enqueue", "--quick", "--database-url", pg.URL)
	if strings.Contains(out, "**Kafka:**") {
		t.Errorf("the header names Kafka, which the enqueue benchmark does not use:\n%s", out)
	}
	rows := markdownTables(out)["Enqueue cost"]
	if len(rows) != 1 || rows[0][0] != "4" {
		t.Fatalf("the single-event table has rows %q, want one for 4 clients", rows)
	}
	for _, cell := range rows[0][2:4] {
		if !strings.HasSuffix(cell, "×)") {
			t.Errorf("cell %q has no ratio to order-only", cell)
		}
	}
	if ratio, target := rows[0][4], rows[0][5]; !strings.HasSuffix(ratio, "×") || ratio == "0.00×" || !strings.HasPrefix(target, "0.95× (") {
		t.Errorf("row %q: want the courier / floor ratio and the target", rows[0])
	}
	if !strings.Contains(errOut, "enqueue: round 1 of 1") {
		t.Errorf("no progress on stderr:\n%s", errOut)
	}
}

// TestBenchEnqueueRefusesBadFlags: a client count below 1, a duration that
// is not whole seconds, a count below 1 and an unknown format are usage
// errors naming the flag, found before anything runs.
func TestBenchEnqueueRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--clients", "0"},
		{"--clients", "16,-1"},
		{"--duration", "1500ms"},
		{"--duration", "0s"},
		{"--rounds", "0"},
		{"--batch-events", "0"},
		{"--output", "yaml"},
		{"--database-url", ""},
	} {
		code, _, errOut := courier(t, append([]string{"bench", "enqueue"}, args...)...)
		if code != exitUsage || !strings.Contains(errOut, args[0]) {
			t.Errorf("%q: exit %d, stderr %q; want a usage error naming %s", args, code, errOut, args[0])
		}
	}
}
