package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
)

// rebalanceFlags are the options of courier bench rebalance.
type rebalanceFlags struct {
	harnessFlags
	cfg bench.RebalanceConfig
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
	f.register(fs, "text")
	fs.IntVar(&f.cfg.Partitions, "partitions", bench.DefaultRebalancePartitions, "partitions of the topic")
	fs.IntVar(&f.cfg.Rate, "rate", bench.DefaultRebalanceRate, "records/s the producer writes")
	fs.DurationVar(&f.cfg.Phase, "phase", bench.DefaultRebalancePhase, "how long the group keeps each size")
	fs.DurationVar(&f.cfg.Heartbeat, "heartbeat", 3*time.Second, "the members' heartbeat interval (Sarama's default: 3s)")
	return cmd
}

// validate checks the flags before anything runs.
func (f *rebalanceFlags) validate() error {
	if err := checkOutput(f.format); err != nil {
		return err
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
	return checkPositive("10s", durationFlag{"phase", f.cfg.Phase}, durationFlag{"heartbeat", f.cfg.Heartbeat})
}

// run measures and prints the report, also of a run that failed part way.
func (f *rebalanceFlags) run(cmd *cobra.Command, _ []string) error {
	if err := f.validate(); err != nil {
		return err
	}
	report, kafka, logger, err := startHarness(cmd, f.brokers)
	if err != nil {
		return err
	}
	defer kafka.close()
	cfg := f.cfg
	cfg.Brokers, cfg.Progress, cfg.Logger = kafka.brokers, cmd.ErrOrStderr(), logger
	rebalance, err := bench.Rebalance(cmd.Context(), cfg)
	if len(rebalance.Runs) > 0 {
		report.Rebalance = &rebalance
		if werr := writeHarness(cmd, f.format, report, rebalance.WriteText, report.Rebalance); werr != nil {
			return werr
		}
	}
	if err != nil {
		return fmt.Errorf("bench rebalance against Kafka at %s: %w", strings.Join(kafka.brokers, ","), err)
	}
	return nil
}
