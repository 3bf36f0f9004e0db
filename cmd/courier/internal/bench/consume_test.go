package bench

import (
	"context"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/courierkit/courier/internal/testkit"
)

// TestOnceLabelsTheConsumption: a configuration consumes under the pprof
// label config=<its name>, so that a CPU profile splits by configuration.
func TestOnceLabelsTheConsumption(t *testing.T) {
	k := testkit.NewKafka(t)
	cfg := ConsumeConfig{Brokers: k.Brokers, Sarama: k.Config, Name: testkit.UniqueName(t, 60)}
	if err := cfg.setDefaults(); err != nil {
		t.Fatal(err)
	}
	var label string
	c := &benchCase{name: DedupeMemory, n: 1, consume: func(ctx context.Context, _ *ConsumeConfig, _ *backlog, s *settled) (time.Duration, error) {
		label, _ = pprof.Label(ctx, "config")
		s.add()
		return time.Millisecond, nil
	}}
	if err := c.once(context.Background(), &cfg, cfg.Name); err != nil {
		t.Fatal(err)
	}
	if label != DedupeMemory {
		t.Errorf("consumed under config=%q, want %q", label, DedupeMemory)
	}
}
