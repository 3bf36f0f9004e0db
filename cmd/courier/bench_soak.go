package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
	"github.com/courierkit/courier/internal/redact"
)

// soakFlags are the options of courier bench soak.
type soakFlags struct {
	harnessFlags
	databaseURL string
	cfg         bench.SoakConfig
}

// newBenchSoakCmd is `courier bench soak`.
func newBenchSoakCmd() *cobra.Command {
	f := &soakFlags{}
	cmd := &cobra.Command{
		Use:   "soak",
		Short: "Hold the outbox at a steady rate and watch its tables for bloat",
		Long: `Enqueues --rate events/s, one per transaction, for --duration while one relay
with courier's default config (retention included) publishes them, and samples
every --sample: the achieved enqueue rate, the backlog, the relay's lag (the age
of the queue's oldest event), the sizes of the queue's table and indexes, their
live and dead tuples and autovacuum runs (pg_stat_user_tables), the waiting
table and the published history.

The verdict holds the end against the sample nearest --settle: the queue's
table and index sizes within 20 %, every later sample enqueuing at least 95 %
of --rate, and the largest later lag at most twice the lag at --settle plus 1s.
The defaults are the goal: 3,000 events/s for 30 minutes, against minute 5.

It creates and drops a schema named bench_*_soak_0 in the database of
--database-url, and a topic named courier.bench.* on the broker. Without
--brokers it starts an in-process Kafka-protocol broker (kfake), which keeps
every message in memory (about 2 GB for the default soak). Progress goes to
stderr, the report to stdout; Ctrl-C stops the soak, cleans up and still
prints the samples taken so far.`,
		Example: `  courier bench soak > SOAK.md
  courier bench soak --duration 5m --settle 1m --sample 15s
  courier bench soak --output json --database-url postgres://app@db:5432/bench --brokers kafka-1:9092`,
		Args: cobra.NoArgs,
		RunE: f.run,
	}
	fs := cmd.Flags()
	f.register(fs, "markdown")
	fs.StringVar(&f.databaseURL, "database-url", envOr("COURIER_DATABASE_URL", defaultDatabaseURL),
		"PostgreSQL the soak makes its schema in (env COURIER_DATABASE_URL)")
	fs.IntVar(&f.cfg.Rate, "rate", bench.DefaultSoakRate, "events/s to enqueue, one per transaction")
	fs.DurationVar(&f.cfg.Duration, "duration", bench.DefaultSoakDuration, "how long to enqueue")
	fs.DurationVar(&f.cfg.Sample, "sample", bench.DefaultSoakSample, "how often to sample the tables")
	fs.DurationVar(&f.cfg.Settle, "settle", bench.DefaultSoakSettle, "when the tables should have settled: the verdict's reference, shorter than --duration")
	fs.IntVar(&f.cfg.Enqueuers, "enqueuers", bench.DefaultSoakEnqueuers, "goroutines enqueueing, each on its own connection")
	return cmd
}

// validate checks the flags before anything runs.
func (f *soakFlags) validate() error {
	if err := checkOutput(f.format); err != nil {
		return err
	}
	if f.databaseURL == "" {
		return usageError{fmt.Errorf("--database-url is empty: name the PostgreSQL to soak, e.g. %s", defaultDatabaseURL)}
	}
	for _, c := range []struct {
		name  string
		value int
	}{{"rate", f.cfg.Rate}, {"enqueuers", f.cfg.Enqueuers}} {
		if c.value < 1 {
			return usageError{fmt.Errorf("--%s %d: use 1 or more", c.name, c.value)}
		}
	}
	if err := checkPositive("1m", durationFlag{"duration", f.cfg.Duration}, durationFlag{"sample", f.cfg.Sample}, durationFlag{"settle", f.cfg.Settle}); err != nil {
		return err
	}
	switch {
	case f.cfg.Settle >= f.cfg.Duration:
		return usageError{fmt.Errorf("--settle %v is not shorter than --duration %v: the verdict compares the end with the sample at --settle; settle sooner or soak longer",
			f.cfg.Settle, f.cfg.Duration)}
	case f.cfg.Sample > f.cfg.Duration:
		return usageError{fmt.Errorf("--sample %v is longer than --duration %v: sample more often or soak longer", f.cfg.Sample, f.cfg.Duration)}
	}
	return nil
}

// run soaks and prints the report, also of an interrupted soak that took
// samples.
func (f *soakFlags) run(cmd *cobra.Command, _ []string) error {
	if err := f.validate(); err != nil {
		return err
	}
	report, kafka, logger, err := startHarness(cmd, f.brokers)
	if err != nil {
		return err
	}
	defer kafka.close()
	cfg := f.cfg
	cfg.DatabaseURL, cfg.Brokers, cfg.Progress, cfg.Logger = f.databaseURL, kafka.brokers, cmd.ErrOrStderr(), logger
	soak, err := bench.Soak(cmd.Context(), cfg)
	if len(soak.Samples) > 0 {
		report.Soak, report.Services.PostgreSQL = &soak, soak.PostgreSQL
		if werr := writeHarness(cmd, f.format, report, soak.WriteText, report.Soak); werr != nil {
			return werr
		}
	}
	if err != nil {
		return fmt.Errorf("bench soak against PostgreSQL at %s and Kafka at %s: %w", redact.ConnString(f.databaseURL), strings.Join(kafka.brokers, ","), err)
	}
	return nil
}
