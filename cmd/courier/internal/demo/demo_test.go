package demo_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/courierkit/courier/cmd/courier/internal/demo"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
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
		Schema: demoSchema(t, pg), DataDir: t.TempDir(),
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
	for _, want := range []string{"0  lost", "psql", "redis-cli", "kcat", "courier dlq list orders.dlq", "courier console --database-url"} {
		if !strings.Contains(summary.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, summary.String())
		}
	}
}

// demoSchema is a schema of the test's own that the demo takes (its name
// starts with courier_demo), dropped when the test ends.
func demoSchema(t *testing.T, pg *testkit.PG) string {
	name := "courier_demo_" + testkit.UniqueName(t, 40)
	pg.DropSchemaAtCleanup(t, pg.Pool, name)
	return name
}

// TestDemoRefusesASchemaInUse: while another demo holds the schema, Run
// is refused with ErrBusy before it touches the schema, Redis or the
// broker data, and the other demo's schema is left standing.
func TestDemoRefusesASchemaInUse(t *testing.T) {
	pg := testkit.Postgres(t)
	ctx := context.Background()
	schema := demoSchema(t, pg)
	if _, err := pg.Pool.Exec(ctx, "CREATE SCHEMA "+schema+"; CREATE TABLE "+schema+".orders (id text)"); err != nil {
		t.Fatal(err)
	}
	conn, err := pg.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended('courier demo ' || $1, 0))", schema); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	dataDir := t.TempDir()
	kept := dataDir + "/kafka/kept"
	if err := os.MkdirAll(kept, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = demo.Run(ctx, demo.Config{DatabaseURL: pg.URL, RedisURL: testkit.RedisURL(), Schema: schema, DataDir: dataDir, Timeout: 10 * time.Second}, io.Discard)
	if !errors.Is(err, demo.ErrBusy) || !strings.Contains(err.Error(), "--schema "+schema+"2") {
		t.Fatalf("Run on a schema in use: %v, want ErrBusy with the --schema hint", err)
	}
	var tables int
	if err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = $1", schema).Scan(&tables); err != nil || tables != 1 {
		t.Errorf("the other demo's schema has %d tables (%v), want its 1 untouched", tables, err)
	}
	if _, err := os.Stat(kept); err != nil {
		t.Errorf("the other demo's broker data was touched: %v", err)
	}
}

// TestDemoRefusesMoreOrdersThanStatsCounts: the demo follows the relay
// with Admin.Stats, which counts published events exactly up to
// producer.ExactPublishedLimit.
func TestDemoRefusesMoreOrdersThanStatsCounts(t *testing.T) {
	cfg := demo.Config{DatabaseURL: "postgres://unused", RedisURL: "redis://unused", Orders: producer.ExactPublishedLimit + 1}
	if _, err := demo.Run(context.Background(), cfg, io.Discard); !errors.Is(err, demo.ErrInvalidConfig) || !strings.Contains(err.Error(), "use 1 to 100000 orders") {
		t.Errorf("Orders %d: %v, want ErrInvalidConfig naming the bound", cfg.Orders, err)
	}
}

func TestDemoRefusesASchemaItMustNotDrop(t *testing.T) {
	for _, schema := range []string{"public", "orders", "courier_demo; DROP", "Courier_Demo", "courier_demo/../x"} {
		_, err := demo.Run(context.Background(), demo.Config{DatabaseURL: "postgres://unused", RedisURL: "redis://unused", Schema: schema}, io.Discard)
		if !errors.Is(err, demo.ErrInvalidConfig) || !strings.Contains(err.Error(), "starting with courier_demo") {
			t.Errorf("Schema %q: %v, want ErrInvalidConfig naming the rule", schema, err)
		}
	}
}
