package producer_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// TestRunLeavesNoGoroutines: once Run returns, every goroutine the relay
// started — workers, the prober, retention, stats, the Sarama producer
// — is gone.
func TestRunLeavesNoGoroutines(t *testing.T) {
	pg, out := setup(t)
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 2)
	ev := orderCreated("o-1")
	ev.Topic = topic
	enqueue(t, pg, out, ev)
	before := goleak.IgnoreCurrent()

	relay := newRelay(t, pg, k, producer.RelayConfig{Hooks: []producer.Hook{&recordedMetrics{}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- relay.Run(ctx) }()
	testkit.WaitFor(t, 10*time.Second, "the event published", func() bool { return countRows(t, pg.Pool, "status = 'published'") == 1 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, append(testkit.KfakeConnections(), before,
		// pgxpool's background health check, and the background reader of a
		// connection the pool opened while the relay ran (which stays in it),
		// belong to the test's pool; kfake serves connections the test's own
		// clients opened.
		goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgconn/internal/bgreader.(*BGReader).bgRead"),
	)...)
}
