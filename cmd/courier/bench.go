package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
	"github.com/courierkit/courier/internal/redact"
)

// Sizes --quick picks for the counts not given: a run of a minute or so
// that shows every table, not figures worth keeping.
const (
	quickEvents          = 2_000
	quickLatencyDuration = time.Second
	quickMessages        = 20_000
	quickSlowMessages    = 400
	quickDeadLetters     = 2_000
)

// quickLatencyRates are the latency rates --quick picks.
var quickLatencyRates = []int{200}

// defaultDatabaseURL is the PostgreSQL courier bench uses when neither
// --database-url nor COURIER_DATABASE_URL names one: the test database.
const defaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/test"

func newBenchCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure courier beside a baseline, in one run on the same services",
		Long: `Runs the relay, enqueue, consumer and dead-letter replay benchmarks (courier
bench relay, courier bench enqueue with its defaults, courier bench consume,
courier bench replay) and prints one report: the date, the machine (runtime.NumCPU,
GOMAXPROCS, Go, the load average), the PostgreSQL, Redis and Kafka it ran
against and the command that reproduces it, then tables in which every
figure stands beside its baseline, measured in the same run, and the ratio
of the two. Markdown by default; --output text or json.

Without --brokers it starts an in-process Kafka-protocol broker (kfake).
PostgreSQL comes from --database-url; the run creates and drops its own
schemas there. A full run takes several minutes; --quick takes about one.
Progress goes to stderr, the report to stdout.`,
		Example: `  courier bench --quick
  courier bench --rounds 5 --previous BENCHMARKS.md > BENCHMARKS.md.new && mv BENCHMARKS.md.new BENCHMARKS.md
  courier bench --output json --database-url postgres://app@db:5432/bench --brokers kafka-1:9092`,
		Args: cobra.NoArgs,
	}
	f := newBenchFlags(cmd, benchRelay|benchConsume|benchReplay, "markdown")
	f.enqueue = true
	cmd.Flags().StringVar(&f.previous, "previous", "",
		"a report this run replaces, e.g. BENCHMARKS.md: the new report lists its headline figures and those it listed below this run's")
	cmd.AddCommand(newBenchRelayCmd(), newBenchConsumeCmd(), newBenchEnqueueCmd(), newBenchReplayCmd(), newBenchSoakCmd(), newBenchRebalanceCmd())
	return cmd
}

func newBenchRelayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "relay",
		Short: "Outbox relay beside a plain SKIP LOCKED loop",
		Long: `Measures events/s draining backlogs (--events) from the outbox to Kafka with
the relay (per-key order on) in several configurations, beside the loop a team
writes by hand over a lean table that keeps no order and no retry state:
SELECT … ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED, a Sarama SyncProducer,
then DELETE of the rows sent. Every configuration drains the same backlogs
from a schema of its own, --rounds times, taking turns; each figure is the
median. With --history N the relay also drains the first backlog beside a
history of N published events. Then the scaling run: a backlog drained with 1,
2 and 4 relays through a proxy adding --scale-delay to every packet each way
(a negative delay skips it; under --network the profile's delay lines take
the proxy's place). Then enqueue-to-arrival latency at each of
--latency-rates events/s, one event per transaction, the relay's defaults
beside sending the same events straight to Kafka, --rounds phases of
--latency-duration each.

It creates and drops schemas named bench_* in the database of --database-url,
and topics named courier.bench.* on the broker. Without --brokers it starts an
in-process Kafka-protocol broker (kfake).`,
		Example: `  courier bench relay --quick
  courier bench relay --rounds 5 --output markdown
  courier bench relay --events 50000 --history 10000000 --only relay/defaults --scale-delay -1ms --latency-duration -1s
  courier bench relay --database-url postgres://app@db:5432/bench --brokers kafka-1:9092`,
		Args: cobra.NoArgs,
	}
	f := newBenchFlags(cmd, benchRelay, "text")
	cmd.Flags().StringSliceVar(&f.relayCfg.Only, "only", nil, "throughput configurations to run beside the baseline, comma-separated (default all)")
	return cmd
}

func newBenchConsumeCmd() *cobra.Command {
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
After each round, redis-benchmark (--redis-benchmark, when on the path) runs
the commands the Redis dedupe sends (a claim per message, a done mark per
batch) against the same Redis, and the report sets what Redis alone serves
beside the dedupe's rate. With a
single Redis it also reports what the server spent while the dedupe consumed
(cores busy, CPU per command, commands per message, from Redis's INFO).
A "CPU while consuming" table gives, per configuration, the cores this
process kept busy and its CPU per message (getrusage), and the machine's cores
busy and idle share (/proc/stat), over the timed window: whether it was bound
by the CPU or waiting. Linux only; elsewhere it says unknown.

Without --brokers it starts an in-process Kafka-protocol broker (kfake) and
times from the group's first fetch. Against a cluster it creates and deletes
topics named courier.bench.*, and the group join is timed too.`,
		Example: `  courier bench consume
  courier bench consume --rounds 5 --output json
  courier bench consume --only runner/dedupe-redis,runner/1%-through-retry-tiers
  courier bench consume --brokers kafka-1:9092 --messages 1000000`,
		Args: cobra.NoArgs,
	}
	f := newBenchFlags(cmd, benchConsume, "text")
	cmd.Flags().StringSliceVar(&f.consumeCfg.Only, "only", nil, "configurations to run beside the baseline, comma-separated (default all)")
	return cmd
}

func newBenchReplayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replay",
		Short: "courier dlq replay beside a raw Sarama copy loop",
		Long: `Measures dead letters/s replaying a dead-letter topic to the original topic of
its records with courier dlq replay (dlq.Replay with the command's defaults),
beside the copy a team writes by hand: a Sarama consumer reading every
partition from the oldest offset to the high-water mark, each envelope decoded
(dlq.Read, Envelope.Original), and a Sarama AsyncProducer writing the original
key, value and headers back to its partition, keeping no position. Each
configuration copies --dead-letters dead letters (envelopes as the consumer
writes them, ~200-byte JSON with CloudEvents headers, 1,000 keys, 12
partitions) from a topic of its own to a fresh topic, which must then hold
every record once (a copy that lost or doubled records fails the run). They
take turns --rounds times and each figure is the median; beside it the ratio
to the copy loop (the goal: 0.8x), and the CPU this process spent per dead
letter.

Without --brokers it starts an in-process Kafka-protocol broker (kfake); with
--network, 3 of them behind delay lines. Against a cluster it creates and
deletes topics named courier.bench.*.`,
		Example: `  courier bench replay
  courier bench replay --rounds 3 --network
  courier bench replay --dead-letters 1000000 --brokers kafka-1:9092 --output markdown`,
		Args: cobra.NoArgs,
	}
	newBenchFlags(cmd, benchReplay, "text")
	return cmd
}

// The harnesses a bench command runs, for newBenchFlags.
const (
	benchRelay = 1 << iota
	benchConsume
	benchReplay
)

// benchFlags are the options of courier bench and its subcommands.
type benchFlags struct {
	relay, consume bool // which harnesses the command runs
	replay         bool
	enqueue        bool // the enqueue harness too, with its defaults (courier bench alone)
	format         string
	brokers        string
	databaseURL    string
	redisURL       string
	redisBenchmark string
	quick          bool
	previous       string // the report this run replaces (courier bench alone)
	rounds         int
	counts         []countFlag
	relayCfg       bench.RelayConfig
	consumeCfg     bench.ConsumeConfig
	replayCfg      bench.ReplayConfig
	network        networkFlags
}

// countFlag is a flag holding a count of 1 or more, and what --quick sets
// it to when it is not given.
type countFlag struct {
	name  string
	value *int
	quick int
}

// newBenchFlags registers on cmd the flags of the harnesses it runs (of
// benchRelay, benchConsume and benchReplay), with defaultFormat as
// --output's default, and makes cmd run them.
func newBenchFlags(cmd *cobra.Command, harnesses int, defaultFormat string) *benchFlags {
	relay, consume := harnesses&benchRelay != 0, harnesses&benchConsume != 0
	f := &benchFlags{relay: relay, consume: consume, replay: harnesses&benchReplay != 0}
	fs := cmd.Flags()
	fs.StringVarP(&f.format, "output", "o", envOr("COURIER_OUTPUT", defaultFormat), "output format: markdown, text or json (env COURIER_OUTPUT)")
	fs.StringVar(&f.brokers, "brokers", envOr("COURIER_BROKERS", ""),
		"Kafka bootstrap addresses, comma-separated (env COURIER_BROKERS); empty: an in-process broker")
	fs.BoolVar(&f.quick, "quick", false, f.quickUsage())
	f.count(fs, &f.rounds, "rounds", bench.DefaultRounds, 1, "backlogs each configuration drains, consumes or replays, and latency phases, taking turns (5 for figures)")
	f.network.register(fs)
	if relay {
		fs.StringVar(&f.databaseURL, "database-url", envOr("COURIER_DATABASE_URL", defaultDatabaseURL),
			"PostgreSQL the relay benchmark makes its schemas in (env COURIER_DATABASE_URL)")
		fs.IntSliceVar(&f.relayCfg.Backlogs, "events", bench.DefaultBacklogs, "backlogs each relay drain empties, comma-separated")
		fs.IntVar(&f.relayCfg.History, "history", 0, "published events in the history of a further drain of the first backlog (0: none)")
		f.count(fs, &f.relayCfg.ScaleEvents, "scale-events", bench.DefaultScaleEvents, quickEvents, "backlog of the scaling run")
		fs.DurationVar(&f.relayCfg.ScaleDelay, "scale-delay", bench.DefaultScaleDelay, "delay the scaling run's proxy adds each way to PostgreSQL (negative: no scaling run; under --network the profile's delays apply instead)")
		fs.IntSliceVar(&f.relayCfg.LatencyRates, "latency-rates", bench.DefaultLatencyRates, "events/s of the latency phases, one per transaction, comma-separated")
		fs.DurationVar(&f.relayCfg.LatencyDuration, "latency-duration", bench.DefaultLatencyDuration, "how long each latency phase enqueues (negative: no latency phases)")
	}
	if consume {
		fs.StringVar(&f.redisURL, "redis-url", envOr("COURIER_REDIS_URL", "redis://127.0.0.1:6379/0"),
			"Redis for the dedupe run (env COURIER_REDIS_URL); empty: no dedupe run")
		fs.StringVar(&f.redisBenchmark, "redis-benchmark", "redis-benchmark",
			"redis-benchmark to run after each round against --redis-url, for the commands the dedupe sends (empty, or not found: none)")
		f.count(fs, &f.consumeCfg.Messages, "messages", bench.DefaultMessages, quickMessages, "backlog of the consumer's throughput runs")
		f.count(fs, &f.consumeCfg.SlowMessages, "slow-messages", bench.DefaultSlowMessages, quickSlowMessages, "backlog of the consumer's 5 ms handler runs")
	}
	if f.replay {
		f.count(fs, &f.replayCfg.DeadLetters, "dead-letters", bench.DefaultDeadLetters, quickDeadLetters, "dead letters each replay configuration copies")
	}
	cmd.RunE = f.run
	return f
}

// quickUsage is the usage of --quick: the sizes it sets, of the harnesses
// the command runs.
func (f *benchFlags) quickUsage() string {
	var sizes []string
	if f.relay {
		sizes = append(sizes, fmt.Sprintf("--events %d, --scale-events %d, --latency-rates %v, --latency-duration %v", quickEvents, quickEvents, quickLatencyRates, quickLatencyDuration))
	}
	if f.consume {
		sizes = append(sizes, fmt.Sprintf("--messages %d, --slow-messages %d", quickMessages, quickSlowMessages))
	}
	if f.replay {
		sizes = append(sizes, fmt.Sprintf("--dead-letters %d", quickDeadLetters))
	}
	return "small sizes for the counts not given (" + strings.Join(sizes, ", ") + "): shows the tables, not figures"
}

// count registers a count flag.
func (f *benchFlags) count(fs *pflag.FlagSet, value *int, name string, def, quick int, usage string) {
	fs.IntVar(value, name, def, usage)
	f.counts = append(f.counts, countFlag{name: name, value: value, quick: quick})
}

// run runs the harnesses and prints the report.
func (f *benchFlags) run(cmd *cobra.Command, _ []string) error {
	if err := f.validate(cmd.Flags()); err != nil {
		return err
	}
	ctx := cmd.Context()
	report := bench.Report{Date: time.Now(), Command: commandLine(cmd), Machine: bench.ThisMachine()}
	if f.previous != "" {
		previous, err := os.ReadFile(f.previous)
		if err != nil {
			return usageError{fmt.Errorf("--previous: %w", err)}
		}
		report.Earlier = bench.HeadlinesOf(string(previous))
	}
	brokers := splitList(f.brokers)
	var fetching func(topic string) <-chan struct{}
	report.Services.Kafka = strings.Join(brokers, ",")
	if len(brokers) == 0 {
		cluster, err := kfake.NewCluster(f.network.kafkaOptions()...)
		if err != nil {
			return fmt.Errorf("start the in-process broker: %w", err)
		}
		defer cluster.Close()
		f.network.delayProduce(cluster)
		brokers, fetching = cluster.ListenAddrs(), bench.KfakeFetching(cluster)
		report.Services.Kafka = "in-process kfake broker (github.com/twmb/franz-go/pkg/kfake " + bench.KfakeVersion() + ")"
	}
	databaseURL, redisURL := f.databaseURL, f.redisURL
	if f.network.on {
		var links []func() error
		defer func() {
			for _, closeLink := range links {
				_ = closeLink()
			}
		}()
		var err error
		if databaseURL != "" {
			if databaseURL, err = through(databaseURL, f.network.profile.PostgreSQL, &links); err != nil {
				return usageError{err}
			}
		}
		if redisURL != "" {
			if redisURL, err = through(redisURL, f.network.profile.Redis, &links); err != nil {
				return usageError{err}
			}
		}
		report.Network = f.network.profile
	}
	// Warnings go to stderr; the dead letters and retry moves of the 1%
	// runs are expected and only formatted, as a service would.
	logger := slog.New(slog.NewTextHandler(skipLines{cmd.ErrOrStderr(), []string{`msg="message dead-lettered"`, `msg="message sent to a retry topic"`}},
		&slog.HandlerOptions{Level: slog.LevelWarn}))

	if f.relay {
		cfg := f.relayCfg
		cfg.Rounds, cfg.DatabaseURL, cfg.Brokers, cfg.Logger, cfg.Progress = f.rounds, databaseURL, brokers, logger, cmd.ErrOrStderr()
		cfg.Network = f.network.on
		relay, err := bench.Relay(ctx, cfg)
		if err != nil {
			return fmt.Errorf("bench relay against PostgreSQL at %s and Kafka at %s: %w", redact.ConnString(f.databaseURL), strings.Join(brokers, ","), err)
		}
		report.Relay, report.Services.PostgreSQL = &relay, relay.PostgreSQL
	}
	if f.enqueue {
		cfg := bench.EnqueueConfig{DatabaseURL: databaseURL, Rounds: f.rounds, Progress: cmd.ErrOrStderr()}
		if f.quick {
			cfg.Clients, cfg.Duration, cfg.Rounds = []int{quickEnqueueClients}, quickEnqueueDuration, quickEnqueueRounds
		}
		enqueue, err := bench.Enqueue(ctx, cfg)
		if err != nil {
			return fmt.Errorf("bench enqueue against PostgreSQL at %s: %w", redact.ConnString(f.databaseURL), err)
		}
		report.Enqueue = &enqueue
	}
	if f.consume {
		cfg := f.consumeCfg
		cfg.Rounds, cfg.Brokers, cfg.Fetching, cfg.Logger, cfg.Progress = f.rounds, brokers, fetching, logger, cmd.ErrOrStderr()
		if redisURL != "" {
			client, version, err := connectRedis(cmd, redisURL)
			if err != nil {
				return err
			}
			defer client.Close()
			cfg.Redis, report.Services.Redis = client, version
			cfg.RedisBenchmark = f.findRedisBenchmark(cmd, client)
		}
		consume, err := bench.Consume(ctx, cfg)
		if err != nil {
			return fmt.Errorf("bench consume against %s: %w", strings.Join(brokers, ","), err)
		}
		report.Consume = &consume
	}
	if f.replay {
		cfg := f.replayCfg
		cfg.Rounds, cfg.Brokers, cfg.Progress = f.rounds, brokers, cmd.ErrOrStderr()
		replay, err := bench.Replay(ctx, cfg)
		if err != nil {
			return fmt.Errorf("bench replay against %s: %w", strings.Join(brokers, ","), err)
		}
		report.Replay = &replay
	}
	return f.write(cmd.OutOrStdout(), report)
}

// validate checks --output and the counts, after --quick has set the
// counts not given.
func (f *benchFlags) validate(fs *pflag.FlagSet) error {
	if err := checkOutput(f.format); err != nil {
		return err
	}
	if f.quick {
		for _, c := range f.counts {
			if !fs.Changed(c.name) {
				*c.value = c.quick
			}
		}
		if f.relay {
			if !fs.Changed("latency-duration") {
				f.relayCfg.LatencyDuration = quickLatencyDuration
			}
			if !fs.Changed("events") {
				f.relayCfg.Backlogs = []int{quickEvents}
			}
			if !fs.Changed("latency-rates") {
				f.relayCfg.LatencyRates = quickLatencyRates
			}
		}
	}
	for _, c := range f.counts {
		if *c.value < 1 {
			return usageError{fmt.Errorf("--%s %d: use 1 or more", c.name, *c.value)}
		}
	}
	if f.relay {
		for _, list := range []struct {
			flag   string
			values []int
		}{{"--events", f.relayCfg.Backlogs}, {"--latency-rates", f.relayCfg.LatencyRates}} {
			for _, n := range list.values {
				if n < 1 {
					return usageError{fmt.Errorf("%s %d: use 1 or more", list.flag, n)}
				}
			}
		}
		if f.relayCfg.History < 0 {
			return usageError{fmt.Errorf("--history %d: use 0 or more", f.relayCfg.History)}
		}
	}
	if f.relay && f.relayCfg.LatencyDuration == 0 {
		return usageError{fmt.Errorf("--latency-duration 0: use a positive duration, e.g. 5s, or a negative one for no latency phases")}
	}
	if f.relay && f.databaseURL == "" {
		return usageError{fmt.Errorf("--database-url is empty: name the PostgreSQL to make the relay's tables in, e.g. %s", defaultDatabaseURL)}
	}
	if f.relay && f.network.on && fs.Changed("scale-delay") && f.relayCfg.ScaleDelay > 0 {
		return usageError{fmt.Errorf("--scale-delay %v: under --network the scaling run goes through the profile's delay lines, not a proxy of its own; set --network-postgres instead, or a negative --scale-delay for no scaling run", f.relayCfg.ScaleDelay)}
	}
	return f.network.validate(f.brokers)
}

// write prints the report. Markdown is the whole report; text and json of
// a subcommand are its harness's report alone, as they always were.
func (f *benchFlags) write(w io.Writer, report bench.Report) error {
	var v any = report
	text := report.WriteText
	alone := !f.enqueue // a subcommand: one harness
	switch {
	case alone && f.relay:
		v, text = report.Relay, report.Relay.WriteText
	case alone && f.consume:
		v, text = report.Consume, report.Consume.WriteText
	case alone && f.replay:
		v, text = report.Replay, report.Replay.WriteText
	}
	switch f.format {
	case "markdown":
		return report.WriteMarkdown(w)
	case "json":
		return writeJSON(w, v)
	}
	if report.Network.On() && alone { // a harness's text alone: say what it ran under
		if _, err := fmt.Fprintf(w, "Profile: %s\n\n", report.Network); err != nil {
			return err
		}
	}
	return text(w)
}

// findRedisBenchmark returns the path of --redis-benchmark when it can
// measure the Redis of client, else "" after saying why on stderr.
func (f *benchFlags) findRedisBenchmark(cmd *cobra.Command, client *redis.Client) string {
	if f.redisBenchmark == "" {
		return ""
	}
	path, err := exec.LookPath(f.redisBenchmark)
	if err == nil {
		_, _, err = bench.RedisBenchmarkTarget(client)
	}
	if err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "not running redis-benchmark (--redis-benchmark %q): %s; the report leaves out what Redis alone does with the dedupe's commands\n", f.redisBenchmark, strconv.Quote(err.Error()))
		return ""
	}
	return path
}

// connectRedis connects to the Redis of rawURL and returns its version.
func connectRedis(cmd *cobra.Command, rawURL string) (*redis.Client, string, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, "", usageError{fmt.Errorf("--redis-url %s: %w (want redis://host:6379/0)", redact.ConnString(rawURL), err)}
	}
	client := redis.NewClient(opts)
	info, err := client.Info(cmd.Context(), "server").Result()
	if err != nil {
		_ = client.Close()
		return nil, "", fmt.Errorf("Redis at %s: %w (is it running? try `make services`, or --redis-url \"\" to leave dedupe out)", redact.ConnString(rawURL), err)
	}
	version := "(unknown version)"
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			version = v
		}
	}
	return client, version, nil
}

// plainArg is an argument a shell takes as it is.
var plainArg = regexp.MustCompile(`^[A-Za-z0-9_./:,=@%+-]+$`)

// commandLine is the command that reproduces cmd's run: its path and the
// flags given, with passwords in URLs hidden.
func commandLine(cmd *cobra.Command) string {
	parts := []string{cmd.CommandPath()}
	cmd.Flags().Visit(func(fl *pflag.Flag) {
		value := fl.Value.String()
		if list, ok := fl.Value.(pflag.SliceValue); ok {
			value = strings.Join(list.GetSlice(), ",")
		}
		if strings.HasSuffix(fl.Name, "-url") && value != "" {
			value = redact.ConnString(value)
		}
		if fl.Value.Type() == "bool" && value == "true" {
			parts = append(parts, "--"+fl.Name)
			return
		}
		if !plainArg.MatchString(value) {
			value = "'" + strings.ReplaceAll(value, "'", `'\''`) + "'"
		}
		parts = append(parts, "--"+fl.Name, value)
	})
	return strings.Join(parts, " ")
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
