// Command replay is a scheduled replay job: every --every (or once with
// --once) it moves the dead letters of orders.dlq whose error matches
// --error and that failed within --since back to their original topic,
// at most --rate per second, with dlq.Replay. The others stay for a person
// to look at (`courier dlq list orders.dlq`).
//
// The job keeps its position in its own consumer group (orders-replay-job),
// apart from operators' replays with `courier dlq replay`: a run goes on
// where the last one stopped, and never moves a record twice.
//
// Run it against `courier dev`:
//
//	go run ./examples/replay --once
//	go run ./examples/replay --every 1m --error timeout --since 24h
//
// See README.md beside this file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/dlq"
)

// config is the job's configuration; parseConfig fills it from flags and
// the environment.
type config struct {
	Brokers []string      // Kafka bootstrap addresses
	Topic   string        // the dead-letter topic
	Group   string        // the consumer group keeping the job's position
	Error   string        // replay dead letters whose error contains this (ignoring case); "" any error
	Since   time.Duration // replay dead letters that failed within this; 0 any age
	Rate    float64       // records written per second; 0 no cap
	Every   time.Duration // the wait between the end of a run and the start of the next
	Once    bool          // run once and return

	Logger *slog.Logger // nil: slog.Default()
}

// parseConfig reads the flags in args, with defaults from getenv.
func parseConfig(args []string, getenv func(string) string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	brokers := fs.String("brokers", envOr(getenv, "COURIER_BROKERS", "127.0.0.1:9092"), "Kafka bootstrap addresses, comma-separated (env COURIER_BROKERS)")
	fs.StringVar(&cfg.Topic, "topic", "orders.dlq", "the dead-letter topic to replay")
	fs.StringVar(&cfg.Group, "group", "orders-replay-job", "consumer group keeping the job's position")
	fs.StringVar(&cfg.Error, "error", "timeout", `replay the dead letters whose error contains this, ignoring case; "" replays any`)
	fs.DurationVar(&cfg.Since, "since", 24*time.Hour, "replay the dead letters that failed within this long; 0 replays any age")
	fs.Float64Var(&cfg.Rate, "rate", 100, "records written per second at most; 0 sets no cap")
	fs.DurationVar(&cfg.Every, "every", time.Minute, "wait between runs")
	fs.BoolVar(&cfg.Once, "once", false, "run once and exit")
	if err := fs.Parse(args); err != nil {
		var usage strings.Builder
		fs.SetOutput(&usage)
		fs.PrintDefaults()
		return cfg, fmt.Errorf("%w\nusage of replay:\n%s", err, usage.String())
	}
	cfg.Brokers = strings.Split(*brokers, ",")
	switch {
	case cfg.Since < 0:
		return cfg, fmt.Errorf("--since %v is negative; give a duration such as 24h, or 0 for any age", cfg.Since)
	case cfg.Every <= 0 && !cfg.Once:
		return cfg, fmt.Errorf("--every %v: give a positive duration such as 1m, or --once", cfg.Every)
	}
	return cfg, nil
}

// envOr returns the environment variable name, or def when it is empty.
func envOr(getenv func(string) string, name, def string) string {
	if v := getenv(name); v != "" {
		return v
	}
	return def
}

// main runs the job (once with --once, else until SIGINT or SIGTERM); it
// exits 2 on a usage error and 1 when run fails.
func main() {
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "replay:", err)
		os.Exit(2)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		cfg.Logger.Error("replay job stopped", "error", err)
		os.Exit(1)
	}
}

// run replays cfg.Topic once (cfg.Once) or every cfg.Every until ctx ends,
// and returns nil when ctx ends. A run that fails is logged and tried again
// at the next one; with cfg.Once its error is returned. A run cut short by
// ctx keeps what it moved: its position is committed after every batch.
func run(ctx context.Context, cfg config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log.Info("replay job started", "topic", cfg.Topic, "group", cfg.Group, "error_contains", cfg.Error, "since", cfg.Since, "rate", cfg.Rate)
	for {
		report, err := replayOnce(ctx, cfg, log)
		switch {
		case ctx.Err() != nil:
			log.Info("replay run interrupted; what it moved stays moved", counts(cfg.Topic, report)...)
			log.Info("replay job stopped")
			return nil
		case err == nil:
			log.Info("replay run finished", counts(cfg.Topic, report)...)
		case cfg.Once || errors.Is(err, dlq.ErrInvalidReplayConfig):
			return err
		default:
			log.Error("replay run failed; trying again at the next run", append(counts(cfg.Topic, report), "error", err, "next_run_in", cfg.Every)...)
		}
		if cfg.Once {
			return nil
		}
		timer := time.NewTimer(cfg.Every)
		select {
		case <-ctx.Done():
			timer.Stop()
			log.Info("replay job stopped")
			return nil
		case <-timer.C:
		}
	}
}

// replayOnce runs one replay of cfg.Topic, logging every record moved,
// refused or corrupt.
func replayOnce(ctx context.Context, cfg config, log *slog.Logger) (dlq.ReplayReport, error) {
	filter := dlq.Filter{ErrorContains: cfg.Error}
	if cfg.Since > 0 {
		filter.Since = time.Now().Add(-cfg.Since)
	}
	report, err := dlq.Replay(ctx, dlq.ReplayConfig{
		Brokers:  cfg.Brokers,
		Topic:    cfg.Topic,
		Group:    cfg.Group, // the job's own position, apart from operators' replays
		Filter:   filter,
		Rate:     cfg.Rate,
		OnRecord: func(r dlq.ReplayedRecord) { logRecord(log, cfg.Topic, r) },
	})
	if errors.Is(err, sarama.ErrOutOfBrokers) {
		err = fmt.Errorf("%w (is Kafka running at %s? try `courier dev`, or set --brokers)", err, strings.Join(cfg.Brokers, ","))
	}
	return report, err
}

// counts are the log attributes of a run's report.
func counts(topic string, r dlq.ReplayReport) []any {
	return []any{"topic", topic, "moved", r.Moved, "already_replayed", r.AlreadyReplayed, "left_out", r.NotSelected,
		"refused", r.Refused, "corrupt", r.Corrupt, "elapsed", r.Elapsed.Round(time.Millisecond)}
}

// logRecord logs one record the replay acted on. Refused and corrupt
// records stay in the dead-letter topic: `courier dlq show` shows them.
func logRecord(log *slog.Logger, topic string, r dlq.ReplayedRecord) {
	at := []any{"topic", topic, "partition", r.Entry.Partition, "offset", r.Entry.Offset}
	switch r.Action {
	case dlq.ActionMoved:
		env := r.Entry.Envelope
		log.Info("dead letter moved", append(at, "key", key(env), "to_topic", r.To, "to_partition", r.ToPartition, "to_offset", r.ToOffset,
			"error_kind", env.ErrorKind, "failure", env.Error)...)
	case dlq.ActionRefused:
		log.Warn("dead letter refused; it stays", append(at, "key", key(r.Entry.Envelope), "reason", r.Reason)...)
	case dlq.ActionCorrupt:
		log.Warn("dead letter corrupt; passed (it stays in the topic)", append(at, "reason", r.Reason)...)
	}
}

// key returns the original key of env as text, or in base64 when it is
// not valid UTF-8.
func key(env dlq.Envelope) string {
	switch {
	case env.OriginalKey != nil:
		return *env.OriginalKey
	case env.OriginalKeyBase64 != nil:
		return "base64:" + *env.OriginalKeyBase64
	}
	return ""
}
