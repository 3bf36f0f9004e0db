package demo_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/courierkit/courier/cmd/courier/internal/demo"
	"github.com/courierkit/courier/internal/testkit"
)

// TestDemoCountsEveryEvent runs the demo small: every order is paid once,
// the poison ones after their replay, the duplicates are suppressed, the
// breaker opened during the PSP outage, and nothing is lost.
func TestDemoCountsEveryEvent(t *testing.T) {
	pg := testkit.Postgres(t)
	r := testkit.NewRedis(t)
	before := goleak.IgnoreCurrent()
	cfg := demo.Config{
		DatabaseURL: pg.URL, RedisURL: testkit.RedisURL(), RedisPrefix: r.Prefix,
		Schema: pg.FreshSchema(t), DataDir: t.TempDir(),
		Orders: 60, Poison: 2, Slow: 2, Duplicates: 5, PSPOutage: 500 * time.Millisecond, Timeout: 45 * time.Second,
	}
	var narration bytes.Buffer
	s, err := demo.Run(context.Background(), cfg, &narration)
	t.Logf("narration:\n%s", narration.String())
	if err != nil {
		t.Fatalf("Run: %v (summary %+v)", err, s)
	}
	// Everything the demo started is gone; Sarama's metrics ticker is one
	// per process.
	goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
	if s.Enqueued != 60 || s.Published != 60 || s.Paid != 60 || s.Lost != 0 {
		t.Errorf("enqueued %d, published %d, paid %d, lost %d; want 60, 60, 60, 0", s.Enqueued, s.Published, s.Paid, s.Lost)
	}
	if s.DeadLettered != 2 || s.Replayed != 2 {
		t.Errorf("dead-lettered %d, replayed %d; want the 2 poison orders", s.DeadLettered, s.Replayed)
	}
	if s.DuplicatesSuppressed < 5 {
		t.Errorf("%d duplicates suppressed, want at least the 5 published twice", s.DuplicatesSuppressed)
	}
	if s.SentToRetryTopics < 2 {
		t.Errorf("%d messages sent to a retry topic, want at least the 2 slow orders", s.SentToRetryTopics)
	}
	if s.BreakerOpened < 1 {
		t.Errorf("the PSP breaker never opened during the outage")
	}
	var summary bytes.Buffer
	if err := demo.WriteSummary(&summary, s, pg.URL, testkit.RedisURL()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"0  lost", "psql", "redis-cli", "kcat", "courier dlq list orders.dlq"} {
		if !strings.Contains(summary.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, summary.String())
		}
	}
}
