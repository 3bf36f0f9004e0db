package main

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/courierkit/courier/cmd/courier/internal/demo"
	"github.com/courierkit/courier/internal/redact"
)

func newDemoCmd() *cobra.Command {
	var out outputFlag
	cfg := demo.Config{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline once on an embedded Kafka broker, and count every event",
		Long: `Runs courier end to end in a few seconds, on an embedded Kafka-protocol
broker (kfake) with PostgreSQL and Redis (` + "`make services`" + ` starts them):

  1. orders are written with their OrderCreated events in one transaction each
     (the outbox); a few carry a negative amount, a bug of the checkout;
  2. the relay publishes them; some are published twice, as after a relay
     crash;
  3. a payout worker pays each order at a PSP stub through a circuit breaker,
     with in-process retries, retry topics, Redis dedupe and a dead-letter
     topic; the PSP is down at first, so the breaker opens and the worker
     pauses instead of dead-lettering;
  4. the PSP rejects the negative amounts, which land in orders.dlq;
  5. the handler is fixed and the dead letters are replayed;
  6. a summary counts every event (lost = 0), and the commands to inspect the
     state with psql, redis-cli, kcat and courier dlq are printed.

The demo drops and creates the schema --schema, and deletes the Redis keys
under courier:demo:. The broker's data stays in --data-dir/kafka, which
` + "`courier dev --data-dir <dir>/kafka`" + ` serves after the demo.`,
		Example: `  make services && make demo
  courier demo --orders 1000 --database-url postgres://postgres@127.0.0.1:5432/test`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			if cfg.Timeout < time.Second {
				return usageError{fmt.Errorf("--timeout %v: give the demo at least 1s", cfg.Timeout)}
			}
			narration := cmd.OutOrStdout()
			if out.json() {
				narration = io.Discard
			}
			summary, err := demo.Run(cmd.Context(), cfg, narration)
			if errors.Is(err, demo.ErrInvalidConfig) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			return out.emit(cmd.OutOrStdout(), summary, func(w io.Writer) error {
				return demo.WriteSummary(w, summary, redact.ConnString(cfg.DatabaseURL), redact.ConnString(cfg.RedisURL))
			})
		},
	}
	out.register(cmd)
	f := cmd.Flags()
	f.StringVar(&cfg.DatabaseURL, "database-url", envOr("COURIER_DATABASE_URL", defaultDatabaseURL),
		"PostgreSQL to run in (env COURIER_DATABASE_URL)")
	f.StringVar(&cfg.RedisURL, "redis-url", envOr("COURIER_REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis for dedupe (env COURIER_REDIS_URL)")
	f.StringVar(&cfg.Schema, "schema", demo.DefaultSchema, "schema the demo drops and creates for its tables")
	f.StringVar(&cfg.DataDir, "data-dir", "", "directory for the embedded broker's data, emptied first (default .courier-demo/<schema>)")
	f.IntVar(&cfg.Orders, "orders", demo.DefaultOrders, "orders to enqueue")
	f.IntVar(&cfg.Poison, "poison", demo.DefaultPoison, "orders with a negative amount, which land in the dead-letter topic until replayed")
	f.IntVar(&cfg.Slow, "slow", demo.DefaultSlow, "orders a fraud check holds up: they fail every attempt in process and are paid from a retry topic")
	f.IntVar(&cfg.Duplicates, "duplicates", demo.DefaultDuplicates, "events published twice, for dedupe to skip")
	f.DurationVar(&cfg.PSPOutage, "psp-outage", demo.DefaultPSPOutage, "how long the PSP is down when the worker starts")
	f.DurationVar(&cfg.Timeout, "timeout", demo.DefaultTimeout, "give up after this long")
	return cmd
}
