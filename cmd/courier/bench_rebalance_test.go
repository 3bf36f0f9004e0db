package main

import (
	"strings"
	"testing"
)

// TestBenchRebalance runs `courier bench rebalance` with short phases on the
// in-process broker: exit 0, and a Markdown report whose Rebalancing
// section has the steady row and a row per change for each strategy.
func TestBenchRebalance(t *testing.T) {
	t.Parallel()
	out, _ := benchReport(t, []string{
		"- **Command:** `courier bench rebalance --heartbeat 200ms --output markdown --partitions 8 --phase 1s --rate 400`",
		"- **Kafka:** in-process kfake broker",
		"| strategy | change | kept: partitions | kept: longest stall | moved: partitions | moved: longest stall |\n",
		"- cooperative (cooperative-sticky): ",
	}, "bench", "rebalance", "--phase", "1s", "--heartbeat", "200ms", "--partitions", "8", "--rate", "400", "--output", "markdown")
	if rows := markdownTables(out)["Rebalancing"]; len(rows) != 6 {
		t.Errorf("rebalancing rows %q: want 3 for each strategy (steady, 2 to 4, 4 to 2)\n%s", rows, out)
	}
}

// TestBenchRebalanceRefusesBadFlags: too few partitions, no rate,
// durations of no length and an unknown format are usage errors naming the
// flag, found before anything runs.
func TestBenchRebalanceRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--partitions", "3"},
		{"--rate", "0"},
		{"--phase", "0s"},
		{"--heartbeat", "-1s"},
		{"--output", "yaml"},
	} {
		code, out, errOut := courier(t, append([]string{"bench", "rebalance"}, args...)...)
		flag := args[len(args)-2]
		if code != exitUsage || !strings.Contains(errOut, flag) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want a usage error naming %s", args, code, out, errOut, flag)
		}
	}
}
