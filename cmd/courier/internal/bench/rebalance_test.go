package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/internal/testkit"
)

// TestRebalanceMeasuresBothStrategies runs the rebalancing run with short
// phases on the test broker: an eager and a cooperative run, each with its
// two changes, every partition counted as kept or moved, records handled
// and none lost; the text report shows each run.
func TestRebalanceMeasuresBothStrategies(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t)
	report, err := Rebalance(context.Background(), RebalanceConfig{
		Brokers: k.Brokers, Partitions: 8, Rate: 400, Phase: time.Second, Heartbeat: 200 * time.Millisecond, Logger: testkit.Logger(t),
	})
	if err != nil {
		t.Fatalf("Rebalance: %v", err)
	}
	if len(report.Runs) != 2 {
		t.Fatalf("%d runs, want 2 (eager and cooperative)", len(report.Runs))
	}
	for _, run := range report.Runs {
		if len(run.Changes) != 2 {
			t.Fatalf("%s: %d changes, want 2", run.Strategy, len(run.Changes))
		}
		for _, c := range run.Changes {
			if c.KeptPartitions+c.MovedPartitions != 8 || c.MovedPartitions == 0 {
				t.Errorf("%s, %s: %d kept and %d moved partitions, want 8 in all, some moved", run.Strategy, c.Change, c.KeptPartitions, c.MovedPartitions)
			}
		}
		if run.Records == 0 || run.Lost != 0 {
			t.Errorf("%s: %d records handled, %d lost; want some, none lost", run.Strategy, run.Records, run.Lost)
		}
	}
	var out bytes.Buffer
	if err := report.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"eager (sticky)", "cooperative (cooperative-sticky)", "2 to 4 members", "4 to 2 members", "0 lost"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the text report lacks %q:\n%s", want, out.String())
		}
	}
}
