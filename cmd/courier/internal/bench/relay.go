package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Defaults of RelayConfig.
const (
	DefaultLatencyDuration = 5 * time.Second
	DefaultScaleEvents     = 50_000
	DefaultScaleDelay      = time.Millisecond
)

// DefaultBacklogs are the backlogs each throughput configuration drains,
// and DefaultLatencyRates the rates of the latency phases, unless the
// config names others.
var (
	DefaultBacklogs     = []int{50_000, 200_000}
	DefaultLatencyRates = []int{1_000, 5_000}
)

// Names of the relay measurements' baselines.
const (
	// PlainLoop names the baseline of the relay's throughput without a
	// history: what a team writes by hand over a lean table (a primary key
	// and the event, no order kept, no retry state): as many workers as the
	// relay's default (producer.DefaultWorkers), each repeating SELECT …
	// ORDER BY id LIMIT 1000 FOR UPDATE SKIP LOCKED, a Sarama SyncProducer's
	// SendMessages and DELETE of the rows sent.
	PlainLoop = "plain-skip-locked-loop/delete/workers=4"
	// PlainLoopKeep names the baseline of the relay with its history: the
	// same loop over a lean table that keeps what it sent, as a team that
	// wants the events afterwards writes it: UPDATE … SET published_at,
	// and a partial index over the rows not yet published for its SELECT.
	PlainLoopKeep = "plain-skip-locked-loop/keep/workers=4"
	// RelayDiscard names the relay that keeps no history
	// (RelayConfig.DiscardPublished), beside PlainLoop.
	RelayDiscard = "relay/discard-published"
	// RelayDefaults names the relay with its default configuration: the
	// baseline of the drain beside a long history, and of the scaling run.
	RelayDefaults = "relay/defaults"
	// RelayTraced names the relay with the defaults and a TracerProvider
	// that samples every span and exports it to nowhere: what tracing
	// costs the relay, beside RelayDefaults.
	RelayTraced = "relay/traced"
	// DirectProduce names the baseline of the relay's latency: the same
	// events sent straight to Kafka with a Sarama SyncProducer, at the same
	// pace: what the outbox adds to an event's way.
	DirectProduce = "direct-produce"
)

const (
	plainLimit   = 1_000            // LIMIT of the plain loop's SELECT
	arrivalWait  = 20 * time.Second // for a phase's last events, after its last enqueue
	warmUpEvents = 20               // sent through a latency run's relay before it is measured
	maxNameLen   = 40               // of RelayConfig.Name, leaving room for a schema's suffix
)

// validName is what RelayConfig.Name must match: schema names are built
// from it.
var validName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// RelayConfig says where and how much the relay harness measures.
// DatabaseURL and Brokers are required.
type RelayConfig struct {
	// DatabaseURL is the PostgreSQL database the outbox tables are made
	// in: the run creates a schema per configuration, named after Name,
	// and drops it at the end.
	DatabaseURL string
	// Brokers are the Kafka bootstrap addresses; the run creates (and
	// deletes) a topic per configuration there, named courier.bench.*.
	Brokers []string
	// Sarama returns the client config for creating topics and for the
	// latency runs' consumer. Defaults to sarama.NewConfig() with acks from
	// all in-sync replicas.
	Sarama func() *sarama.Config
	// Backlogs are the backlogs each throughput configuration drains, in
	// events. Defaults to 50,000 and 200,000 (DefaultBacklogs).
	Backlogs []int
	// History is how many published events the history of RelayDefaults'
	// second table holds while it drains the first backlog, beside the
	// same drain with an empty history. 0: no such drain. Defaults to 0.
	History int
	// Only names the throughput configurations to run beside the baselines
	// (the plain loops); empty: all of them. With History, the history
	// drain and RelayDefaults run whatever Only names.
	Only []string
	// Rounds is how many backlogs each throughput configuration drains and
	// how many paced phases each latency configuration runs. Defaults to
	// 1; use 5 for figures.
	Rounds int
	// LatencyRates are the rates of the latency phases, in events per
	// second, each enqueued one per transaction. Defaults to 1,000 and
	// 5,000 (DefaultLatencyRates).
	LatencyRates []int
	// LatencyDuration is how long a latency phase enqueues; negative: no
	// latency phases. Defaults to 5s.
	LatencyDuration time.Duration
	// ScaleEvents is the backlog of the scaling run, which drains it
	// through a proxy adding ScaleDelay each way with 1, 2 and 4 relays,
	// and 1 relay of 2 and 4 workers. Defaults to 50,000.
	ScaleEvents int
	// ScaleDelay is what the scaling run's proxy adds to every packet
	// between the relays and PostgreSQL, each way, as a database on
	// another host would. Negative: no scaling run. Defaults to 1ms.
	ScaleDelay time.Duration
	// Network says that DatabaseURL and Brokers already reach their
	// services through delay lines (courier bench --network): the scaling
	// run then adds no proxy of its own, and ScaleDelay only says whether
	// it runs.
	Network bool
	// Logger receives the relays' logs. Defaults to a logger that formats
	// warnings and discards them, as a service would pay for them.
	Logger *slog.Logger
	// Name makes schema and topic names unique: a lower-case identifier
	// (letters, digits, underscores) of at most 40 bytes. Defaults to a
	// random one.
	Name string
	// Progress, when set, receives a line as each round and phase starts.
	// Defaults to none.
	Progress io.Writer
}

func (c *RelayConfig) setDefaults() error {
	switch {
	case c.DatabaseURL == "":
		return errors.New("bench: no PostgreSQL database URL given, e.g. postgres://postgres@127.0.0.1:5432/test")
	case len(c.Brokers) == 0:
		return errors.New("bench: no Kafka brokers given")
	case c.History < 0:
		return fmt.Errorf("bench: a negative history (%d); use 0 for none", c.History)
	}
	if c.Sarama == nil {
		c.Sarama = defaultSarama
	}
	if len(c.Backlogs) == 0 {
		c.Backlogs = DefaultBacklogs
	}
	if len(c.LatencyRates) == 0 {
		c.LatencyRates = DefaultLatencyRates
	}
	for _, n := range append(slices.Clone(c.Backlogs), c.LatencyRates...) {
		if n < 1 {
			return fmt.Errorf("bench: a backlog or rate of %d; use 1 or more", n)
		}
	}
	if err := applyCounts(count{&c.Rounds, DefaultRounds}, count{&c.ScaleEvents, DefaultScaleEvents}); err != nil {
		return err
	}
	if c.LatencyDuration == 0 {
		c.LatencyDuration = DefaultLatencyDuration
	}
	if c.ScaleDelay == 0 {
		c.ScaleDelay = DefaultScaleDelay
	}
	if c.Logger == nil {
		c.Logger = defaultLogger()
	}
	return applyName(&c.Name)
}

// RelayReport is the figures of one Relay run.
type RelayReport struct {
	// PostgreSQL is the server's version.
	PostgreSQL string `json:"postgresql"`
	// Backlogs are the drains' backlogs; History the published events of
	// the history drain's table (0: none ran).
	Backlogs []int `json:"backlogs"`
	History  int   `json:"history,omitempty"`
	// Rounds is how many backlogs each throughput configuration drained.
	Rounds int `json:"rounds"`
	// LatencyRates and LatencyDuration are the paces and length of the
	// latency phases.
	LatencyRates    []int         `json:"latency_rates"`
	LatencyDuration time.Duration `json:"latency_phase_ns"`
	// Throughput has a result per drain configuration and backlog.
	Throughput []ThroughputResult `json:"throughput"`
	// Scale has a result per scaling configuration, the one relay first;
	// ScaleEvents and ScaleDelay are its backlog and the proxy's delay
	// (zero under the network profile, which delays every connection
	// instead).
	Scale       []ThroughputResult `json:"scale,omitempty"`
	ScaleEvents int                `json:"scale_events,omitempty"`
	ScaleDelay  time.Duration      `json:"scale_delay_ns,omitempty"`
	// Latency has a result per latency configuration and rate.
	Latency []LatencyResult `json:"latency"`
}

// ThroughputResult is one drain configuration's figure.
type ThroughputResult struct {
	Name string `json:"name"`
	// Events is the backlog of each drain.
	Events int `json:"events"`
	// Rate is events per second over the median drain time.
	Rate float64 `json:"events_per_s"`
	// Baseline names the configuration Ratio compares with.
	Baseline string  `json:"baseline"`
	Ratio    float64 `json:"ratio"`
	// Target is the ratio the goal asks for; 0 when it asks none.
	Target float64 `json:"target,omitempty"`
	// ClaimsPerDrain is how many claim queries the relays made per drain;
	// 0 for the plain loop.
	ClaimsPerDrain float64 `json:"claims_per_drain,omitempty"`
	// CPUBusy is the fraction of the machine's CPU time (every core,
	// every process) busy while it drained, the median of the drains; 0
	// where it was not measured.
	CPUBusy float64 `json:"cpu_busy,omitempty"`
	// CPUMicrosPerEvent is the machine's CPU time (every core, every
	// process) per event drained, in µs, the median of the drains; 0
	// where it was not measured.
	CPUMicrosPerEvent float64 `json:"cpu_us_per_event,omitempty"`
	// Stages is where the relay's batches spent their time, over every
	// drain; nil for the plain loops.
	Stages *BatchStages `json:"batch_stages,omitempty"`
}

// LatencyResult is one latency configuration's figures, over every phase.
type LatencyResult struct {
	Name string `json:"name"`
	// Rate is the pace asked for, in events per second.
	Rate int `json:"rate"`
	// Phases is how many paced phases ran; Events is how many events they
	// measured.
	Phases int `json:"phases"`
	Events int `json:"events"`
	// P50, P99 and Max are enqueue-to-arrival latencies in milliseconds.
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
	// EnqueueRate is the slowest phase's enqueue rate, events per second.
	EnqueueRate float64 `json:"enqueued_per_s"`
	// ClaimsPerEvent is how many claims the relay made per event measured
	// (for its workers together); 0 for DirectProduce.
	ClaimsPerEvent float64 `json:"claims_per_event,omitempty"`
	// Unarrived counts the events that had not arrived arrivalWait after
	// their phase's last enqueue; their latency counts as that wait.
	Unarrived int `json:"unarrived"`
	// Baseline names the configuration P50Ratio and P99Ratio compare with
	// (below 1: faster than it); empty when it did not run.
	Baseline string  `json:"baseline,omitempty"`
	P50Ratio float64 `json:"p50_ratio,omitempty"`
	P99Ratio float64 `json:"p99_ratio,omitempty"`
	// Stages is where the relay's batches spent their time, over every
	// phase; nil for DirectProduce.
	Stages *BatchStages `json:"batch_stages,omitempty"`
	// Notes say why the figures may not be what they seem.
	Notes []string `json:"notes,omitempty"`
}

// WriteText writes the report as the tables the benchmarks print.
// scaleLink says how the scaling run reached PostgreSQL.
func (r RelayReport) scaleLink() string {
	if r.ScaleDelay == 0 {
		return "through the network profile's delay lines"
	}
	return fmt.Sprintf("through a proxy that holds every packet %v each way", r.ScaleDelay)
}

func (r RelayReport) WriteText(w io.Writer) error {
	var b strings.Builder
	if len(r.Throughput) > 0 {
		fmt.Fprintf(&b, "events/s draining backlogs over %d keys, %d drains each, taking turns, same PostgreSQL and broker:\n", keys, r.Rounds)
		writeRateLines(&b, throughputRows(r.Throughput))
	}
	if len(r.Scale) > 0 {
		fmt.Fprintf(&b, "events/s draining %d events %s:\n", r.ScaleEvents, r.scaleLink())
		writeRateLines(&b, throughputRows(r.Scale))
	}
	if len(r.Latency) > 0 {
		fmt.Fprintf(&b, "enqueue-to-arrival latency, one event per transaction, %v phases:\n", r.LatencyDuration)
		for _, res := range r.Latency {
			fmt.Fprintf(&b, "  %-20s %6d/s p50 %7.1fms  p99 %7.1fms  max %7.1fms  %d phases, %.0f enqueued/s, %.2f claims per event", res.Name, res.Rate,
				res.P50, res.P99, res.Max, res.Phases, res.EnqueueRate, res.ClaimsPerEvent)
			if res.Baseline != "" {
				fmt.Fprintf(&b, "  p99 %5.2fx %s", res.P99Ratio, res.Baseline)
			}
			if res.Stages != nil {
				fmt.Fprintf(&b, "  %s", res.Stages)
			}
			b.WriteByte('\n')
			for _, note := range res.Notes {
				fmt.Fprintf(&b, "    note: %s\n", note)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// throughputRows are throughput results as the tables show them, with the
// relays' claims and the targets.
func throughputRows(results []ThroughputResult) []rateRow {
	rows := make([]rateRow, len(results))
	for i, res := range results {
		rows[i] = rateRow{name: res.Name, rate: res.Rate, baseline: res.Baseline, ratio: res.Ratio}
		if res.Target > 0 {
			verdict := "met"
			if res.Ratio < res.Target {
				verdict = "**not met**"
			}
			rows[i].note = fmt.Sprintf("target %.2fx", res.Target)
			rows[i].cell = fmt.Sprintf("%s (%s)", ratio(res.Target), verdict)
		}
		if res.ClaimsPerDrain > 0 {
			rows[i].note = strings.TrimSpace(rows[i].note + fmt.Sprintf(" %.1f claims per drain", res.ClaimsPerDrain))
		}
		if res.CPUBusy > 0 {
			cpu := fmt.Sprintf("CPU %.0f%% busy", 100*res.CPUBusy)
			if res.CPUMicrosPerEvent > 0 {
				cpu += fmt.Sprintf(", %.1f µs/event", res.CPUMicrosPerEvent)
			}
			rows[i].note = strings.TrimSpace(rows[i].note + " " + cpu)
			rows[i].cell = strings.TrimSpace(rows[i].cell + " (" + strings.Replace(cpu, "%", " %", 1) + ")")
		}
		if res.Stages != nil {
			rows[i].note = strings.TrimSpace(rows[i].note + "; " + res.Stages.String())
			rows[i].cell = strings.TrimSpace(rows[i].cell + " " + res.Stages.String())
		}
	}
	return rows
}

// Relay measures the relay beside its baselines, in one run on one
// PostgreSQL and one broker: the figures `courier bench relay` prints and
// the producer package's benchmarks measure.
//
// Throughput (ThroughputRun): each backlog of Backlogs (200-byte JSON,
// 1,000 keys, 12 partitions) drained with the relay, per-key order on, in
// several configurations, beside the plain SKIP LOCKED loop over a lean
// table; with History, RelayDefaults also drains beside a history of that
// many published events. Scaling (ScaleRun): a backlog drained through a
// proxy that delays every packet, with 1, 2 and 4 relays. Latency
// (LatencyRun): enqueue to arrival at a consumer at each of LatencyRates,
// with the relay's defaults beside DirectProduce.
//
// It returns the report, or the first error.
func Relay(ctx context.Context, cfg RelayConfig) (RelayReport, error) {
	if err := cfg.setDefaults(); err != nil {
		return RelayReport{}, err
	}
	run, err := NewThroughputRun(ctx, cfg)
	if err != nil {
		return RelayReport{}, err
	}
	for i := range cfg.Rounds {
		progress(cfg.Progress, "relay throughput: round %d of %d, %d configurations draining %v events each", i+1, cfg.Rounds, len(run.drains), cfg.Backlogs)
		if err = run.Round(ctx); err != nil {
			break
		}
	}
	if err = errors.Join(err, run.Close()); err != nil {
		return RelayReport{}, err
	}
	report := run.Report()
	if cfg.ScaleDelay > 0 {
		if report.Scale, err = scale(ctx, cfg); err != nil {
			return RelayReport{}, err
		}
		report.ScaleEvents = cfg.ScaleEvents
		if !cfg.Network {
			report.ScaleDelay = cfg.ScaleDelay
		}
	}
	for _, rate := range cfg.LatencyRates {
		if cfg.LatencyDuration < 0 {
			break
		}
		var pair []LatencyResult
		for _, name := range LatencyConfigurations() {
			res, err := latency(ctx, cfg, name, rate)
			if err != nil {
				return RelayReport{}, err
			}
			pair = append(pair, res)
		}
		report.Latency = append(report.Latency, withLatencyBaseline(pair)...)
	}
	return report, nil
}

// withLatencyBaseline sets each result's ratios to DirectProduce's, when it
// is among them.
func withLatencyBaseline(results []LatencyResult) []LatencyResult {
	for _, base := range results {
		if base.Name != DirectProduce || base.P50 <= 0 || base.P99 <= 0 {
			continue
		}
		for i, res := range results {
			results[i].Baseline, results[i].P50Ratio, results[i].P99Ratio = base.Name, res.P50/base.P50, res.P99/base.P99
		}
	}
	return results
}

// latency runs cfg.Rounds phases of the latency configuration name at rate
// events/s.
func latency(ctx context.Context, cfg RelayConfig, name string, rate int) (LatencyResult, error) {
	progress(cfg.Progress, "relay latency %s at %d/s: warming up", name, rate)
	run, err := NewLatencyRun(ctx, cfg, name, rate)
	if err != nil {
		return LatencyResult{}, err
	}
	for i := range cfg.Rounds {
		progress(cfg.Progress, "relay latency %s: phase %d of %d, %d events/s for %v", name, i+1, cfg.Rounds, rate, cfg.LatencyDuration)
		if err = run.Phase(ctx); err != nil {
			break
		}
	}
	if err = errors.Join(err, run.Close()); err != nil {
		return LatencyResult{}, fmt.Errorf("%s: %w", name, err)
	}
	return run.Result(), nil
}

// relayServices are what a relay run shares: an admin pool on PostgreSQL,
// a Kafka cluster admin, and the tables, topics, pools and producers it
// made, which close drops and closes.
type relayServices struct {
	cfg     RelayConfig
	kind    string // in the names of the schemas and topics, after RelayConfig.Name
	version string // PostgreSQL's server_version
	admin   *pgxpool.Pool
	kafka   sarama.ClusterAdmin
	tables  []*outboxTable
	closers []func() error // run before the tables are dropped, last first
}

// openRelayServices applies cfg's defaults and connects to PostgreSQL and
// Kafka. kind tells the names of its schemas and topics from those of the
// run's other measurements.
func openRelayServices(ctx context.Context, cfg RelayConfig, kind string) (*relayServices, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	s := &relayServices{cfg: cfg, kind: kind}
	var err error
	if s.admin, err = connect(ctx, cfg.DatabaseURL, 2, ""); err != nil {
		return nil, err
	}
	if err := s.admin.QueryRow(ctx, "SHOW server_version").Scan(&s.version); err != nil {
		s.admin.Close()
		return nil, fmt.Errorf("read PostgreSQL's version: %w", err)
	}
	if s.kafka, err = sarama.NewClusterAdmin(cfg.Brokers, cfg.Sarama()); err != nil {
		s.admin.Close()
		return nil, fmt.Errorf("connect to Kafka at %s: %w (is the broker running, and are the brokers right?)", strings.Join(cfg.Brokers, ","), err)
	}
	return s, nil
}

// connect opens a pool of maxConns on url, with search_path set to
// searchPath when it is not empty.
func connect(ctx context.Context, url string, maxConns int32, searchPath string) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's error hides the password.
		return nil, fmt.Errorf("the PostgreSQL database URL: %w (want postgres://user@host:5432/database)", err)
	}
	pc.MaxConns = maxConns
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if searchPath != "" {
		pc.ConnConfig.RuntimeParams["search_path"] = searchPath
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("connect to PostgreSQL at %s:%d: %w (is it running? try `make services`, or check the database URL)", pc.ConnConfig.Host, pc.ConnConfig.Port, err)
	}
	return pool, nil
}

// pool opens a pool on schema that close closes.
func (s *relayServices) pool(ctx context.Context, schema string, maxConns int32) (*pgxpool.Pool, error) {
	pool, err := connect(ctx, s.cfg.DatabaseURL, maxConns, schema)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() error { pool.Close(); return nil })
	return pool, nil
}

// close closes what the run opened and drops its schemas and topics.
func (s *relayServices) close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, t := range s.tables {
		if _, err := s.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+t.schema+" CASCADE"); err != nil {
			errs = append(errs, fmt.Errorf("drop schema %s: %w", t.schema, err))
		}
		if t.topicCreated {
			if err := s.kafka.DeleteTopic(t.topic); err != nil {
				errs = append(errs, fmt.Errorf("delete topic %s: %w", t.topic, err))
			}
		}
	}
	s.admin.Close()
	errs = append(errs, s.kafka.Close())
	return errors.Join(errs...)
}

func (r RelayReport) writeMarkdown(b *strings.Builder) {
	if len(r.Throughput) > 0 {
		history := ""
		if r.History > 0 {
			history = fmt.Sprintf(" The `%s/history=…` rows drain the first backlog from an outbox whose history "+
				"already holds %s published events, beside the same drain with an empty history.", RelayDefaults, thousands(float64(r.History)))
		}
		fmt.Fprintf(b, `
## Relay throughput

Draining backlogs of %s events (%d-byte JSON, %s keys, %d partitions) from the outbox to
Kafka: the relay, per-key order on, in several configurations, beside the loop a team writes by
hand over a lean table that keeps no order and no retry state (a primary key and the event):
`+"`SELECT … ORDER BY id LIMIT %d FOR UPDATE SKIP LOCKED`"+`, a Sarama SyncProducer, then `+"`DELETE`"+`
of the rows sent (`+"`%s`"+`), or, to keep them as the relay keeps its history,
`+"`UPDATE … SET published_at`"+` with a partial index over the rows not yet published (`+"`%s`"+`). The relay with its
history (the default) stands beside the loop that keeps, the relay with `+"`DiscardPublished`"+`
beside the loop that deletes. Each configuration has its own schema holding the same backlog;
%s each, and a figure is the events over the median drain time.%s

| configuration | events/s | baseline | baseline events/s | ratio | target |
| --- | ---: | --- | ---: | ---: | --- |
`, listOf(r.Backlogs), payloadSize, thousands(keys), partitions, plainLimit, PlainLoop, PlainLoopKeep, plural(r.Rounds, "drain"), history)
		writeRateTable(b, throughputRows(r.Throughput))
	}
	if len(r.Scale) > 0 {
		fmt.Fprintf(b, `
## Relay scaling

Draining %s events with 1, 2 and 4 relays of one worker each (each relay its own connection
pool and Kafka producer, as separate processes have), and with one relay of 2 and 4 workers,
against a PostgreSQL reached %s, as a database
on another host would. A configuration of N workers in all should drain at least 0.8·N times as
fast as one relay. %s each, medians; beside the target, how busy the machine's cores were
during the drains (all processes: PostgreSQL, the broker, the relays), which bounds what more
relays can add.

| configuration | events/s | baseline | baseline events/s | ratio | target |
| --- | ---: | --- | ---: | ---: | --- |
`, thousands(float64(r.ScaleEvents)), r.scaleLink(), plural(r.Rounds, "drain"))
		writeRateTable(b, throughputRows(r.Scale))
	}
	if len(r.Latency) > 0 {
		fmt.Fprintf(b, `
## Relay latency

From an event's enqueue (its commit) to its arrival at a consumer, one event per transaction,
%v per phase, %s per configuration and rate: the relay with its default configuration (no
NOTIFY: it probes the outbox's sequence every millisecond while events come, backing off to
100 ms when none do), on an outbox already holding %s published events, beside the same events
sent straight to Kafka by a Sarama SyncProducer at the same pace (the baseline: what the outbox
adds to an event's way). A ratio below 1 is faster than the baseline.

| configuration | rate asked | p50 ms | p99 ms | max ms | sent/s | baseline | p50 ratio | p99 ratio | where a batch's time went |
| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- |
`, r.LatencyDuration, plural(r.Latency[0].Phases, "phase"), thousands(latencyHistory))
		var notes []string
		for _, res := range r.Latency {
			base, p50, p99 := "", "", ""
			if res.Baseline != "" {
				base, p50, p99 = "`"+res.Baseline+"`", ratio(res.P50Ratio), ratio(res.P99Ratio)
			}
			stages := ""
			if res.Stages != nil {
				stages = res.Stages.String()
			}
			fmt.Fprintf(b, "| `%s` | %s | %.1f | %.1f | %.1f | %s | %s | %s | %s | %s |\n",
				res.Name, thousands(float64(res.Rate)), res.P50, res.P99, res.Max, thousands(res.EnqueueRate), base, p50, p99, stages)
			for _, note := range res.Notes {
				notes = append(notes, fmt.Sprintf("- `%s` at %s/s: %s.", res.Name, thousands(float64(res.Rate)), note))
			}
		}
		if len(notes) > 0 {
			b.WriteString("\n" + strings.Join(notes, "\n") + "\n")
		}
	}
}

// listOf formats counts as "50,000 and 200,000".
func listOf(ns []int) string {
	parts := make([]string, len(ns))
	for i, n := range ns {
		parts[i] = thousands(float64(n))
	}
	if len(parts) < 2 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " and " + parts[len(parts)-1]
}
