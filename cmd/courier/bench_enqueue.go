package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
	"github.com/courierkit/courier/internal/redact"
)

// What --quick sets bench enqueue's options to when they are not given: a
// run of a few seconds that shows the tables, not figures worth keeping.
const (
	quickEnqueueClients  = 4
	quickEnqueueDuration = time.Second
	quickEnqueueRounds   = 1
)

// benchEnqueueFlags are the options of courier bench enqueue.
type benchEnqueueFlags struct {
	cfg    bench.EnqueueConfig
	format string
	quick  bool
}

// newBenchEnqueueCmd is `courier bench enqueue`.
func newBenchEnqueueCmd() *cobra.Command {
	f := &benchEnqueueFlags{}
	cmd := &cobra.Command{
		Use:   "enqueue",
		Short: "What an enqueue costs the business transaction, beside one extra row and a COPY",
		Long: `Measures with PostgreSQL's pgbench what courier's enqueue costs the transaction
that carries it, the relay not running. Three single-event transactions take
turns, --rounds times at each --clients count, for --duration each: an order
alone; the order plus one row in a table with only a primary key (the floor);
the order plus the statement Outbox.Enqueue sends for a 200-byte JSON event.
Then --batch-events events per transaction through Outbox.EnqueueBatch beside
a COPY of the same rows, on 16 connections. Figures are medians; the report
holds the ratios to the goal: courier at least 0.95× the floor at every client
count, EnqueueBatch at least 0.9× the COPY.

It creates and drops a schema named bench_*_enqueue in the database of
--database-url, which pgbench must be able to read too (a libpq URL). Without
pgbench in PATH a Go driver runs the single-event cases, and the report says
so. Markdown by default; progress goes to stderr, the report to stdout.`,
		Example: `  courier bench enqueue --quick
  courier bench enqueue --rounds 5 > ENQUEUE.md
  courier bench enqueue --clients 8,32,128 --duration 30s --output json`,
		Args: cobra.NoArgs,
		RunE: f.run,
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.format, "output", "o", envOr("COURIER_OUTPUT", "markdown"), "output format: markdown, text or json (env COURIER_OUTPUT)")
	fs.StringVar(&f.cfg.DatabaseURL, "database-url", envOr("COURIER_DATABASE_URL", defaultDatabaseURL),
		"PostgreSQL the benchmark makes its schema in and pgbench connects to (env COURIER_DATABASE_URL)")
	fs.IntSliceVar(&f.cfg.Clients, "clients", bench.DefaultEnqueueClients(), "client counts of the single-event cases, comma-separated (pgbench -c)")
	fs.DurationVar(&f.cfg.Duration, "duration", bench.DefaultEnqueueDuration, "length of each run, whole seconds (pgbench -T)")
	fs.IntVar(&f.cfg.Rounds, "rounds", bench.DefaultEnqueueRounds, "runs of each case, taking turns; figures are medians")
	fs.IntVar(&f.cfg.BatchEvents, "batch-events", bench.DefaultBatchEvents, "events per transaction of the batch cases")
	fs.BoolVar(&f.quick, "quick", false, fmt.Sprintf("small sizes for the options not given (--clients %d, --duration %v, --rounds %d): shows the tables, not figures",
		quickEnqueueClients, quickEnqueueDuration, quickEnqueueRounds))
	return cmd
}

// run measures and prints the report: Markdown is the whole report, text
// and json the harness's part of it.
func (f *benchEnqueueFlags) run(cmd *cobra.Command, _ []string) error {
	if err := f.validate(cmd.Flags()); err != nil {
		return err
	}
	report := bench.Report{Date: time.Now(), Command: commandLine(cmd), Machine: bench.ThisMachine()}
	cfg := f.cfg
	cfg.Progress = cmd.ErrOrStderr()
	enqueue, err := bench.Enqueue(cmd.Context(), cfg)
	if err != nil {
		return fmt.Errorf("bench enqueue against PostgreSQL at %s: %w", redact.ConnString(cfg.DatabaseURL), err)
	}
	report.Enqueue, report.Services.PostgreSQL = &enqueue, enqueue.PostgreSQL
	w := cmd.OutOrStdout()
	switch f.format {
	case "markdown":
		return report.WriteMarkdown(w)
	case "json":
		return writeJSON(w, enqueue)
	}
	return enqueue.WriteText(w)
}

// validate checks the options, after --quick has set those not given.
func (f *benchEnqueueFlags) validate(fs *pflag.FlagSet) error {
	if err := checkOutput(f.format); err != nil {
		return err
	}
	if f.quick {
		if !fs.Changed("clients") {
			f.cfg.Clients = []int{quickEnqueueClients}
		}
		if !fs.Changed("duration") {
			f.cfg.Duration = quickEnqueueDuration
		}
		if !fs.Changed("rounds") {
			f.cfg.Rounds = quickEnqueueRounds
		}
	}
	switch {
	case len(f.cfg.Clients) == 0 || slices.ContainsFunc(f.cfg.Clients, func(n int) bool { return n < 1 }):
		return usageError{fmt.Errorf("--clients %s: use client counts of 1 or more, e.g. 16,64", strings.Trim(fmt.Sprint(f.cfg.Clients), "[]"))}
	case f.cfg.Duration < time.Second || f.cfg.Duration%time.Second != 0:
		return usageError{fmt.Errorf("--duration %v: use whole seconds, at least 1s (pgbench's -T), e.g. 10s", f.cfg.Duration)}
	case f.cfg.Rounds < 1:
		return usageError{fmt.Errorf("--rounds %d: use 1 or more", f.cfg.Rounds)}
	case f.cfg.BatchEvents < 1:
		return usageError{fmt.Errorf("--batch-events %d: use 1 or more", f.cfg.BatchEvents)}
	case f.cfg.DatabaseURL == "":
		return usageError{fmt.Errorf("--database-url is empty: name the PostgreSQL to measure in, e.g. %s", defaultDatabaseURL)}
	}
	return nil
}
