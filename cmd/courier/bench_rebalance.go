package main

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
)

// rebalanceFlags are the options of courier bench rebalance.
type rebalanceFlags struct {
	format  string
	brokers string
	cfg     bench.RebalanceConfig
}

// newBenchRebalanceCmd is `courier bench rebalance`.
func newBenchRebalanceCmd() *cobra.Command {
	f := &rebalanceFlags{}
	cmd := &cobra.Command{
		Use:   "rebalance",
		Short: "What changes of a consumer group cost its partitions, eager beside cooperative",
		Long: `Runs a consumer group through changes while a producer writes --rate records/s
to a topic of --partitions partitions: 2 members, then 4, then 2 again, each size
for --phase. It does so rebalancing eagerly (Sarama's sticky strategy) and
cooperatively (its cooperative-sticky strategy), and prints for each change the
longest stall (gap between two handled records) of a partition that kept its
owner and of one that moved, beside the longest gap before any change, and the
records handled, lost (a run that loses one fails) and handled twice.

--heartbeat sets the members' Consumer.Group.Heartbeat.Interval, how soon a
member learns of a rebalance. Without --brokers it starts an in-process
Kafka-protocol broker (kfake); against a cluster it creates and deletes topics
named courier.bench.*. Progress goes to stderr, the report to stdout.`,
		Example: `  courier bench rebalance
  courier bench rebalance --heartbeat 3s --phase 30s --output markdown
  courier bench rebalance --brokers kafka-1:9092 --partitions 48 --rate 5000`,
		Args: cobra.NoArgs,
		RunE: f.run,
	}
	fs := cmd.Flags()
	fs.StringVarP(&f.format, "output", "o", envOr("COURIER_OUTPUT", "text"), "output format: markdown, text or json (env COURIER_OUTPUT)")
	fs.StringVar(&f.brokers, "brokers", envOr("COURIER_BROKERS", ""),
		"Kafka bootstrap addresses, comma-separated (env COURIER_BROKERS); empty: an in-process broker")
	fs.IntVar(&f.cfg.Partitions, "partitions", bench.DefaultRebalancePartitions, "partitions of the topic")
	fs.IntVar(&f.cfg.Rate, "rate", bench.DefaultRebalanceRate, "records/s the producer writes")
	fs.DurationVar(&f.cfg.Phase, "phase", bench.DefaultRebalancePhase, "how long the group keeps each size")
	fs.DurationVar(&f.cfg.Heartbeat, "heartbeat", 3*time.Second, "the members' heartbeat interval (Sarama's default: 3s)")
	return cmd
}

// validate checks the flags before anything runs.
func (f *rebalanceFlags) validate() error {
	switch f.format {
	case "markdown", "text", "json":
	default:
		return usageError{fmt.Errorf("--output %q: use markdown, text or json", f.format)}
	}
	for _, c := range []struct {
		name  string
		value int
		min   int
	}{{"partitions", f.cfg.Partitions, 4}, {"rate", f.cfg.Rate, 1}} {
		if c.value < c.min {
			return usageError{fmt.Errorf("--%s %d: use %d or more", c.name, c.value, c.min)}
		}
	}
	for _, d := range []struct {
		name  string
		value time.Duration
	}{{"phase", f.cfg.Phase}, {"heartbeat", f.cfg.Heartbeat}} {
		if d.value <= 0 {
			return usageError{fmt.Errorf("--%s %v: use a positive duration, e.g. 10s", d.name, d.value)}
		}
	}
	return nil
}

// run measures and prints the report, also of a run that failed part way.
func (f *rebalanceFlags) run(cmd *cobra.Command, _ []string) error {
	if err := f.validate(); err != nil {
		return err
	}
	report := bench.Report{Date: time.Now(), Command: commandLine(cmd), Machine: bench.ThisMachine()}
	kafka, err := startBenchKafka(f.brokers)
	if err != nil {
		return err
	}
	defer kafka.close()
	report.Services.Kafka = kafka.name
	cfg := f.cfg
	cfg.Brokers, cfg.Progress = kafka.brokers, cmd.ErrOrStderr()
	cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	rebalance, err := bench.Rebalance(cmd.Context(), cfg)
	if len(rebalance.Runs) > 0 {
		report.Rebalance = &rebalance
		if werr := f.write(cmd, report); werr != nil {
			return werr
		}
	}
	if err != nil {
		return fmt.Errorf("bench rebalance against Kafka at %s: %w", strings.Join(kafka.brokers, ","), err)
	}
	return nil
}

// write prints the report: Markdown is the whole report; text and json are
// the rebalancing runs' alone, as other bench subcommands print theirs.
func (f *rebalanceFlags) write(cmd *cobra.Command, report bench.Report) error {
	w := cmd.OutOrStdout()
	switch f.format {
	case "json":
		return writeJSON(w, report.Rebalance)
	case "text":
		return report.Rebalance.WriteText(w)
	}
	return report.WriteMarkdown(w)
}
