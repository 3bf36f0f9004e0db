package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"
	"github.com/spf13/cobra"

	"github.com/courierkit/courier/cmd/courier/internal/display"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/record"
	"github.com/courierkit/courier/retrytopics"
)

// replayRecordJSON is one record replay acted on, as --output json prints
// it.
type replayRecordJSON struct {
	Action        dlq.ReplayAction `json:"action"`
	Partition     int32            `json:"partition"`
	Offset        int64            `json:"offset"`
	OriginalTopic string           `json:"original_topic,omitempty"`
	ConsumerGroup string           `json:"consumer_group,omitempty"`
	Key           *string          `json:"key,omitempty"`
	KeyBase64     *string          `json:"key_base64,omitempty"`
	Error         string           `json:"error,omitempty"`
	To            string           `json:"to,omitempty"`
	ToPartition   *int32           `json:"to_partition,omitempty"`
	ToOffset      *int64           `json:"to_offset,omitempty"`
	Reason        string           `json:"reason,omitempty"`
}

func newReplayRecordJSON(r dlq.ReplayedRecord) replayRecordJSON {
	j := replayRecordJSON{Action: r.Action, Partition: r.Entry.Partition, Offset: r.Entry.Offset, Reason: r.Reason}
	if r.Entry.Err == nil {
		env := r.Entry.Envelope
		j.OriginalTopic, j.ConsumerGroup, j.Key, j.KeyBase64, j.Error = env.OriginalTopic, env.ConsumerGroup, env.OriginalKey, env.OriginalKeyBase64, env.Error
	}
	if r.To != "" {
		j.To, j.ToPartition = r.To, &r.ToPartition
		if r.ToOffset >= 0 {
			j.ToOffset = &r.ToOffset
		}
	}
	return j
}

// replayReportJSON is dlq.ReplayReport as --output json prints it.
type replayReportJSON struct {
	Topic           string  `json:"topic"`
	Group           string  `json:"group"`
	ToGroup         bool    `json:"to_group"`
	DryRun          bool    `json:"dry_run"`
	Total           int64   `json:"total"`
	Read            int64   `json:"read"`
	Moved           int     `json:"moved"`
	AlreadyReplayed int     `json:"already_replayed"`
	NotSelected     int     `json:"not_selected"`
	Refused         int     `json:"refused"`
	Corrupt         int     `json:"corrupt"`
	Skipped         int     `json:"skipped"`
	StoppedAtMax    bool    `json:"stopped_at_max"`
	Set             string  `json:"set"`
	Seconds         float64 `json:"seconds"`
	Error           string  `json:"error,omitempty"`
}

// toGroupFlags replay each dead letter to the consumer group that failed
// it only, through the first retry tier of its topic.
type toGroupFlags struct {
	on     bool
	delays []time.Duration
	suffix string
}

func (g *toGroupFlags) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.BoolVar(&g.on, "to-group", false, "replay each dead letter to the consumer group that failed it only: into the first retry tier of its topic, due now (needs --retry-delays)")
	f.DurationSliceVar(&g.delays, "retry-delays", nil, "with --to-group: the delays of the group's retry tiers, exactly as its consumer's RetryTopics.Delays (e.g. 5s,1m)")
	f.StringVar(&g.suffix, "retry-suffix", retrytopics.DefaultSuffix, "with --to-group: the suffix of the group's retry topics (its RetryTopics.Suffix)")
}

// route checks the flags against the others (cfg.To) and returns the
// replay's Route: nil without --to-group. dlqTopic is the topic replayed;
// the tiers of the topic it belongs to (dlqTopic without .dlq) check the
// delays and suffix.
func (g *toGroupFlags) route(cmd *cobra.Command, cfg dlq.ReplayConfig, dlqTopic string) (func(dlq.Envelope) (*record.Record, error), error) {
	changed := cmd.Flags().Changed
	switch {
	case !g.on && (changed("retry-delays") || changed("retry-suffix")):
		return nil, usageError{errors.New("--retry-delays and --retry-suffix go with --to-group")}
	case !g.on:
		return nil, nil
	case cfg.To != "":
		return nil, usageError{errors.New("--to-group and --to: --to-group sends each record to its group's first retry tier, --to to one topic; pick one")}
	case len(g.delays) == 0:
		return nil, usageError{errors.New("--to-group needs --retry-delays: the delays of the group's retry tiers, exactly as its consumer's Config.RetryTopics.Delays, e.g. --retry-delays 5s,1m")}
	}
	rc := retrytopics.Config{Delays: g.delays, Suffix: g.suffix}
	base := cmp.Or(strings.TrimSuffix(dlqTopic, dlq.DefaultSuffix), dlqTopic)
	if _, err := retrytopics.New(base, rc, ""); err != nil {
		return nil, usageError{fmt.Errorf("--retry-delays/--retry-suffix: %w", err)}
	}
	return retrytopics.ReplayRoute(rc), nil
}

func newDLQReplayCmd(o *dlqOptions) *cobra.Command {
	var ff dlqFilterFlags
	var tg toGroupFlags
	var tf traceFlags
	cfg := dlq.ReplayConfig{}
	cmd := &cobra.Command{
		Use:   "replay <dlq-topic>",
		Short: "Move dead letters back to their original topic, byte for byte",
		Long: `Moves the dead letters of a dead-letter topic back to their original
topics (or --to), restoring each record's key, value and headers byte for
byte and setting a replay_count header. Records go back to their original
partition.

The replay's position is the offsets of a consumer group (--group), committed
after each batch the original topic acknowledged: a replay killed part way
loses nothing and, run again, writes at most its last batch a second time.
Records the filters leave out stay for a later run; records already replayed
by the group are never replayed again. Records replayed --max-replays times
already are reported and stay; corrupt records are reported once and passed.
Records whose target topic does not exist, is the dead-letter topic itself
(a loop) or is a retry topic are reported as skipped and stay; the run goes
on with the others, and exits 1 at the end when any was skipped (also with
--dry-run), so a script notices. Refused and corrupt records alone exit 0.
Run one replay per group at a time: a run that finds the group's position
moved under it by another run stops (exit 1).

--expect N --expect-set S replays only what a --dry-run showed (it prints
both): the run first reads its set as a dry run does and, when it would not
move exactly those N records to the same places, writes and commits nothing
(exit 1, with the dry run's summary); else it moves those records and no
other (one that could not move then, but could now, is skipped). --expect 0
writes nothing, and exits 1 when there is something to move. Give --since
and --until as RFC 3339 times there: a duration ago moves between the two
runs.

The original topic reaches every consumer group reading it. --to-group
replays each dead letter to the group that failed it (consumer_group in
its envelope) only: into the first retry tier of its topic, due now, with
the retry headers naming the group, which the other groups leave alone.
--retry-delays (and --retry-suffix) must be those of the group's consumer
(Config.RetryTopics), so that the tier is one it reads. Dead letters of
the relay name no group: they are skipped (replay them without
--to-group).

The summary goes to stdout; progress goes to stderr (a bar on a terminal,
plain lines otherwise).`,
		Example: `  courier dlq replay orders.dlq --dry-run
  courier dlq replay orders.dlq --error "psp timeout" --since 24h --rate 100
  courier dlq replay orders.dlq --partition 0 --from-offset 120 --until-offset 180
  courier dlq replay orders.dlq --key order-42 --dry-run
  courier dlq replay orders.dlq --key order-42 --expect 2 --expect-set 5c0f7a3e9b214d6e8a1f0c2b4d6e8f01
  courier dlq replay orders.dlq --to orders.reprocess --max 10 --output json
  courier dlq replay orders.dlq --consumer-group payouts --to-group --retry-delays 5s,1m`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := applyEnv(cmd.Flags(), cmd.ErrOrStderr()); err != nil {
				return err
			}
			if err := tf.validate(); err != nil {
				return err
			}
			filter, err := ff.filter(time.Now())
			if err != nil {
				return err
			}
			route, err := tg.route(cmd, cfg, args[0])
			if err != nil {
				return err
			}
			switch {
			case math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0):
				return usageError{fmt.Errorf("--rate %v: use 0 (no limit) or a finite number of records per second", cfg.Rate)}
			case cfg.Rate < 0:
				return usageError{fmt.Errorf("--rate %v: use 0 (no limit) or records per second", cfg.Rate)}
			case cfg.Max < 0:
				return usageError{fmt.Errorf("--max %d: use 0 (no limit) or a count", cfg.Max)}
			case cfg.BatchSize < 1 || cfg.BatchSize > dlq.MaxReplayBatch:
				return usageError{fmt.Errorf("--batch-size %d: use 1 to %d", cfg.BatchSize, dlq.MaxReplayBatch)}
			case cfg.Concurrency < 1 || cfg.Concurrency > dlq.MaxReplayConcurrency:
				return usageError{fmt.Errorf("--concurrency %d: use 1 to %d", cfg.Concurrency, dlq.MaxReplayConcurrency)}
			case cfg.MaxReplays < 1:
				return usageError{fmt.Errorf("--max-replays %d: use 1 or more", cfg.MaxReplays)}
			case cfg.Expect < 0:
				return usageError{fmt.Errorf("--expect %d: give the count --dry-run said would move", cfg.Expect)}
			case (cmd.Flags().Changed("expect") || cfg.ExpectSet != "") && cfg.DryRun:
				return usageError{errors.New("--dry-run and --expect/--expect-set: --dry-run counts, --expect replays that count; pick one")}
			}
			if err := o.out.validate(); err != nil {
				return err
			}
			brokers, sc, err := o.kafka.config()
			if err != nil {
				return err
			}
			boundReads(sc, o.kafka.timeout)
			// Unreachable brokers fail here, within the bound of --kafka-timeout.
			probe, err := o.kafka.dialKafka(cmd.Context(), brokers, sc)
			if err != nil {
				return err
			}
			_ = probe.Close()
			run := cfg
			run.Brokers, run.Sarama, run.Topic, run.Filter, run.Route = brokers, sc, args[0], filter, route
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			tracer, stopTracing, err := tf.provider(cmd.Context(), "courier-dlq-replay", log, traceShutdownTimeout)
			if err != nil {
				return err
			}
			defer stopTracing()
			run.TracerProvider = tracer
			// --expect 0: nothing to move, which a dry run checks.
			expectNone := cmd.Flags().Changed("expect") && run.Expect == 0 && run.ExpectSet == ""
			run.DryRun = run.DryRun || expectNone
			return runReplay(cmd, o, run, expectNone)
		},
	}
	ff.register(cmd)
	tg.register(cmd)
	tf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&cfg.Group, "group", envOr("COURIER_REPLAY_GROUP", dlq.DefaultReplayGroup),
		"consumer group that keeps the replay's position (env COURIER_REPLAY_GROUP)")
	f.StringVar(&cfg.To, "to", "", "write every record to this topic instead of its original topic")
	f.BoolVar(&cfg.DryRun, "dry-run", false, "print what would move; write and commit nothing")
	f.Float64Var(&cfg.Rate, "rate", 0, "at most this many records per second (0: no limit)")
	f.IntVar(&cfg.Max, "max", 0, "stop after moving this many records (0: no limit)")
	f.IntVar(&cfg.Expect, "expect", 0, "replay only when exactly this many records would move (the count --dry-run gave), and only those; else write nothing and exit 1")
	f.StringVar(&cfg.ExpectSet, "expect-set", "", "replay only when the records that would move, and where they would go, are those of the dry run that printed this set; else write nothing and exit 1")
	f.IntVar(&cfg.MaxReplays, "max-replays", dlq.DefaultMaxReplays, "refuse records replayed this many times already, to stop loops")
	f.IntVar(&cfg.BatchSize, "batch-size", dlq.DefaultReplayBatch, fmt.Sprintf("records written before the position is committed (1 to %d)", dlq.MaxReplayBatch))
	f.IntVar(&cfg.Concurrency, "concurrency", dlq.DefaultReplayConcurrency,
		fmt.Sprintf("partitions replayed at once, each in offset order (1 to %d; 1 goes in partition order, as --max always does)", dlq.MaxReplayConcurrency))
	return cmd
}

// runReplay runs cfg and prints what it did; with expectNone (--expect 0,
// run as a dry run), finding records to move is an error.
func runReplay(cmd *cobra.Command, o *dlqOptions, cfg dlq.ReplayConfig, expectNone bool) error {
	stdout := cmd.OutOrStdout()
	bar := newProgress(cmd.ErrOrStderr())
	var records []replayRecordJSON
	cfg.OnRecord = func(r dlq.ReplayedRecord) {
		if o.out.json() {
			records = append(records, newReplayRecordJSON(r))
			return
		}
		bar.clear()
		fmt.Fprintln(stdout, replayLine(cfg.Topic, r))
	}
	cfg.OnProgress = bar.update
	report, err := dlq.Replay(cmd.Context(), cfg)
	bar.clear()
	if errors.Is(err, dlq.ErrInvalidReplayConfig) {
		return usageError{err}
	}
	if err != nil && report.Total == 0 && report.Read == 0 {
		return replayError(o, cfg.Topic, err)
	}
	if records == nil {
		records = []replayRecordJSON{}
	}
	// The partitions replayed at once interleave their records.
	slices.SortStableFunc(records, func(a, b replayRecordJSON) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	j := replayReportJSON{
		Topic: cfg.Topic, Group: cfg.Group, ToGroup: cfg.Route != nil, DryRun: report.DryRun, Total: report.Total, Read: report.Read, Moved: report.Moved,
		AlreadyReplayed: report.AlreadyReplayed, NotSelected: report.NotSelected, Refused: report.Refused, Corrupt: report.Corrupt, Skipped: report.Skipped,
		StoppedAtMax: report.StoppedAtMax, Set: report.Set, Seconds: report.Elapsed.Seconds(),
	}
	if err != nil {
		j.Error = err.Error()
	}
	if werr := o.out.emit(stdout, map[string]any{"report": j, "records": records},
		func(w io.Writer) error { return printReplaySummary(w, cfg, report) }); werr != nil {
		return werr
	}
	if err != nil {
		if cmd.Context().Err() != nil {
			return fmt.Errorf("interrupted after moving %d record(s); their position is committed, so the same command goes on from there", report.Moved)
		}
		return replayError(o, cfg.Topic, err)
	}
	if expectNone && report.Moved > 0 {
		return fmt.Errorf("%d record(s) of %s would move, not the 0 --expect names: the set changed since it was counted, so nothing was written; count it again with --dry-run",
			report.Moved, cfg.Topic)
	}
	if report.Skipped > 0 {
		verb := "were"
		if report.DryRun {
			verb = "would be"
		}
		remedy := "create the topic or replay them with --to"
		if cfg.Route != nil {
			remedy = "replay the relay's (no consumer group) without --to-group, or create the missing tier topic"
		}
		return fmt.Errorf("%d record(s) of %s %s skipped (see the skipped lines for why): they stay; %s, then run the same command again",
			report.Skipped, cfg.Topic, verb, remedy)
	}
	return nil
}

// replayError explains an error of dlq.Replay.
func replayError(o *dlqOptions, topic string, err error) error {
	if errors.Is(err, sarama.ErrOutOfBrokers) {
		return o.kafka.unreachable(err)
	}
	return dlqError(topic, err)
}

// replayLine is the line printed for a record replay acted on.
func replayLine(topic string, r dlq.ReplayedRecord) string {
	place := fmt.Sprintf("%s %d@%d", display.Text(topic), r.Entry.Partition, r.Entry.Offset)
	if r.Entry.Err != nil {
		return fmt.Sprintf("%-10s  %s: %s", r.Action, place, cell(&r.Reason, 200))
	}
	env := r.Entry.Envelope
	// The kind leads the error already ("permanent: …" from
	// consumer.Permanent): say it once.
	errText := strings.TrimPrefix(errorSummary(env.Error), string(env.ErrorKind)+": ")
	what := fmt.Sprintf("key %s, %s: %s", cell(keyText(env), 40), cell(ptr(string(env.ErrorKind)), 40), cell(ptr(errText), 80))
	switch r.Action {
	case dlq.ActionMoved:
		return fmt.Sprintf("%-10s  %s → %s %d@%d  %s", r.Action, place, r.To, r.ToPartition, r.ToOffset, what)
	case dlq.ActionWouldMove:
		return fmt.Sprintf("%-10s  %s → %s %d  %s", r.Action, place, r.To, r.ToPartition, what)
	}
	return fmt.Sprintf("%-10s  %s  %s; %s", r.Action, place, what, display.Text(r.Reason))
}

func printReplaySummary(w io.Writer, cfg dlq.ReplayConfig, r dlq.ReplayReport) error {
	moved := "moved"
	switch {
	case r.DryRun:
		fmt.Fprintf(w, "dry run: %d record(s) of %s would move; nothing was written or committed\n", r.Moved, cfg.Topic)
		if r.Moved > 0 {
			fmt.Fprintf(w, "to replay exactly these, to the same places: --expect %d --expect-set %s\n", r.Moved, r.Set)
		}
		moved = "would move"
	case r.Total == 0:
		fmt.Fprintf(w, "nothing to replay: group %s has read %s to its end\n", cfg.Group, cfg.Topic)
	case cfg.Route != nil:
		fmt.Fprintf(w, "moved %d record(s) of %s to the first retry tier of the group that failed each, in %s (group %s)\n",
			r.Moved, cfg.Topic, r.Elapsed.Round(time.Millisecond), cfg.Group)
	default:
		fmt.Fprintf(w, "moved %d record(s) of %s in %s (group %s)\n", r.Moved, cfg.Topic, r.Elapsed.Round(time.Millisecond), cfg.Group)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	rows := []struct {
		label string
		n     int
		note  string
	}{
		{moved, r.Moved, ""},
		{"already replayed", r.AlreadyReplayed, "by an earlier run of this group"},
		{"left out by filters", r.NotSelected, "they stay for a later run"},
		{"refused", r.Refused, fmt.Sprintf("replayed %d times already; fix the cause, then raise --max-replays", cfg.MaxReplays)},
		{"corrupt", r.Corrupt, "not readable dead letters: reported once, then passed"},
		{"skipped", r.Skipped, "they cannot go where they would (see their lines): they stay (exit 1)"},
	}
	for _, row := range rows {
		if row.n > 0 && row.note != "" {
			fmt.Fprintf(tw, "  %s\t%d\t%s\n", row.label, row.n, row.note)
		} else {
			fmt.Fprintf(tw, "  %s\t%d\n", row.label, row.n)
		}
	}
	if r.StoppedAtMax {
		fmt.Fprintf(tw, "  stopped at --max %d\t\trun again to go on\n", cfg.Max)
	}
	return tw.Flush()
}

// progress shows a replay's progress on w: a bar redrawn in place on a
// terminal, a plain line at most every few seconds otherwise.
type progress struct {
	w     io.Writer
	tty   bool
	drawn bool
	last  time.Time
}

func newProgress(w io.Writer) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, tty: ok && isTerminal(f)}
}

// plainEvery spaces the progress lines when w is not a terminal.
const plainEvery = 5 * time.Second

func (p *progress) update(r dlq.ReplayReport) {
	eta := "?"
	if r.Read > 0 && r.Total > r.Read {
		eta = (time.Duration(float64(r.Elapsed) / float64(r.Read) * float64(r.Total-r.Read))).Round(time.Second).String()
	} else if r.Total <= r.Read {
		eta = "0s"
	}
	moved := "moved"
	if r.DryRun {
		moved = "would move"
	}
	counts := fmt.Sprintf("%d/%d read, %d %s, %d already replayed, %d left out, %d refused, %d corrupt, %d skipped, ETA %s",
		r.Read, r.Total, r.Moved, moved, r.AlreadyReplayed, r.NotSelected, r.Refused, r.Corrupt, r.Skipped, eta)
	if !p.tty {
		if time.Since(p.last) >= plainEvery {
			p.last = time.Now()
			fmt.Fprintln(p.w, "replay:", counts)
		}
		return
	}
	const width = 30
	done := width
	if r.Total > 0 {
		done = int(int64(width) * min(r.Read, r.Total) / r.Total)
	}
	fmt.Fprintf(p.w, "\r\033[K[%s%s] %s", strings.Repeat("=", done), strings.Repeat(" ", width-done), counts)
	p.drawn = true
}

// clear removes the bar from the terminal, before other output.
func (p *progress) clear() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
	}
}
