package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/internal/bench"
)

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure courier beside a baseline, in one run on the same services",
	}
	cmd.AddCommand(newBenchConsumeCmd())
	return cmd
}

func newBenchConsumeCmd() *cobra.Command {
	var out outputFlag
	var brokers, redisURL string
	var cfg bench.ConsumeConfig
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Consumer runner beside a raw Sarama consumer group",
		Long: `Measures msgs/s through the consumer runner (retries and dead letters on)
beside a raw Sarama consumer group that only marks messages, on the same broker
in the same run: without failures, with 1% of the messages failing for good
(they go to the dead-letter topic), with 1% failing twice and passing through
two retry tiers (the main topic's rate), with Redis dedupe on (--redis-url),
and with a 5 ms handler on 1 and on 16 workers per partition. The
configurations take turns --rounds times and each figure is the median.

Without --brokers it starts an in-process Kafka-protocol broker (kfake) and
times from the group's first fetch. Against a cluster it creates and deletes
topics named courier.bench.*, and the group join is timed too.`,
		Example: `  courier bench consume
  courier bench consume --rounds 5 --output json
  courier bench consume --only runner/dedupe-redis,runner/1%-through-retry-tiers
  courier bench consume --brokers kafka-1:9092 --messages 1000000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := out.validate(); err != nil {
				return err
			}
			for _, n := range []struct {
				flag  string
				value int
			}{{"--messages", cfg.Messages}, {"--slow-messages", cfg.SlowMessages}, {"--rounds", cfg.Rounds}} {
				if n.value < 1 {
					return usageError{fmt.Errorf("%s %d: use 1 or more", n.flag, n.value)}
				}
			}
			cfg.Brokers = splitList(brokers)
			if len(cfg.Brokers) == 0 {
				cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
				if err != nil {
					return fmt.Errorf("start the in-process broker: %w", err)
				}
				defer cluster.Close()
				cfg.Brokers, cfg.Fetching = cluster.ListenAddrs(), bench.KfakeFetching(cluster)
			}
			// Warnings go to stderr; the dead letters and retry moves of the
			// 1% runs are expected and only formatted, as a service would.
			cfg.Logger = slog.New(slog.NewTextHandler(skipLines{cmd.ErrOrStderr(), []string{`msg="message dead-lettered"`, `msg="message sent to a retry topic"`}},
				&slog.HandlerOptions{Level: slog.LevelWarn}))
			if redisURL != "" {
				opts, err := redis.ParseURL(redisURL)
				if err != nil {
					return usageError{fmt.Errorf("--redis-url %s: %w (want redis://host:6379/0)", redact(redisURL), err)}
				}
				client := redis.NewClient(opts)
				defer client.Close()
				if err := client.Ping(cmd.Context()).Err(); err != nil {
					return fmt.Errorf("Redis at %s: %w (is it running? try `make services`, or --redis-url \"\" to leave dedupe out)", redact(redisURL), err)
				}
				cfg.Redis = client
			}
			report, err := bench.Consume(cmd.Context(), cfg)
			if err != nil {
				return fmt.Errorf("bench consume against %s: %w", strings.Join(cfg.Brokers, ","), err)
			}
			if out.json() {
				return writeJSON(cmd.OutOrStdout(), report)
			}
			return report.WriteText(cmd.OutOrStdout())
		},
	}
	out.register(cmd)
	cmd.Flags().StringVar(&brokers, "brokers", envOr("COURIER_BROKERS", ""),
		"Kafka bootstrap addresses, comma-separated (env COURIER_BROKERS); empty: an in-process broker")
	cmd.Flags().StringVar(&redisURL, "redis-url", envOr("COURIER_REDIS_URL", "redis://127.0.0.1:6379/0"),
		"Redis for the dedupe run (env COURIER_REDIS_URL); empty: no dedupe run")
	cmd.Flags().StringSliceVar(&cfg.Only, "only", nil, "configurations to run beside the baseline, comma-separated (default all)")
	cmd.Flags().IntVar(&cfg.Messages, "messages", bench.DefaultMessages, "backlog of the throughput runs")
	cmd.Flags().IntVar(&cfg.SlowMessages, "slow-messages", bench.DefaultSlowMessages, "backlog of the 5 ms handler runs")
	cmd.Flags().IntVar(&cfg.Rounds, "rounds", bench.DefaultRounds, "backlogs each configuration consumes, taking turns (5 for figures)")
	return cmd
}

// splitList splits a comma-separated list, dropping blanks.
func splitList(list string) []string {
	var out []string
	for item := range strings.SplitSeq(list, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// skipLines writes what it is given to w, except lines containing one of
// skip.
type skipLines struct {
	w    io.Writer
	skip []string
}

func (s skipLines) Write(p []byte) (int, error) {
	for _, skip := range s.skip {
		if bytes.Contains(p, []byte(skip)) {
			return len(p), nil
		}
	}
	return s.w.Write(p)
}
