package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/migrations"
	"github.com/courierkit/courier/producer"
)

// Defaults of RelayConfig.
const (
	DefaultEvents          = 20_000
	DefaultLatencyRate     = 1_000
	DefaultLatencyDuration = 5 * time.Second
)

// Names of the relay measurements' baselines.
const (
	// PlainLoop names the baseline of the relay's throughput: two workers
	// repeating SELECT … ORDER BY seq LIMIT 1000 FOR UPDATE SKIP LOCKED,
	// a Sarama SyncProducer's SendMessages and an UPDATE, with no per-key
	// order.
	PlainLoop = "plain-skip-locked-loop/workers=2"
	// LatencyNotify names the latency configuration with the relay's
	// defaults: NOTIFY on, polling every second.
	LatencyNotify = "notify/poll-interval=1s"
	// LatencyPollOnly names the baseline of the relay's latency: no
	// NOTIFY, polling every 100ms.
	LatencyPollOnly = "poll-only/poll-interval=100ms"
)

const (
	seedBatch    = 1_000            // events per EnqueueBatch while seeding
	plainLimit   = 1_000            // LIMIT of the plain loop's SELECT
	enqueuers    = 16               // goroutines enqueueing one event per transaction in a latency phase
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
	// Events is the backlog each throughput drain empties, and the
	// published history a latency run's table starts with. Defaults to
	// 20,000.
	Events int
	// Rounds is how many backlogs each throughput configuration drains and
	// how many paced phases each latency configuration runs. Defaults to
	// 1; use 5 for figures.
	Rounds int
	// LatencyRate is how many events per second a latency phase enqueues,
	// one per transaction. Defaults to 1,000.
	LatencyRate int
	// LatencyDuration is how long a latency phase enqueues. Defaults to 5s.
	LatencyDuration time.Duration
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
	case c.LatencyDuration < 0:
		return fmt.Errorf("bench: a negative latency phase (%v); use a positive one, or 0 for the default of %v", c.LatencyDuration, DefaultLatencyDuration)
	}
	if c.Sarama == nil {
		c.Sarama = defaultSarama
	}
	if err := applyCounts(count{&c.Events, DefaultEvents}, count{&c.Rounds, DefaultRounds}, count{&c.LatencyRate, DefaultLatencyRate}); err != nil {
		return err
	}
	if c.LatencyDuration == 0 {
		c.LatencyDuration = DefaultLatencyDuration
	}
	if c.Logger == nil {
		c.Logger = defaultLogger()
	}
	if c.Name == "" {
		c.Name = randomName()
	}
	if len(c.Name) > maxNameLen || !validName.MatchString(c.Name) {
		return fmt.Errorf("bench: Name %q: use lower-case letters, digits and underscores, at most %d bytes, not starting with a digit", c.Name, maxNameLen)
	}
	return nil
}

// RelayReport is the figures of one Relay run.
type RelayReport struct {
	// PostgreSQL is the server's version.
	PostgreSQL string `json:"postgresql"`
	// Events is the backlog of each drain.
	Events int `json:"events"`
	// Rounds is how many backlogs each throughput configuration drained.
	Rounds int `json:"rounds"`
	// LatencyRate and LatencyDuration are the pace and length of a
	// latency phase.
	LatencyRate     int           `json:"latency_rate"`
	LatencyDuration time.Duration `json:"latency_phase_ns"`
	// Throughput has a result per drain configuration, the baseline first.
	Throughput []ThroughputResult `json:"throughput"`
	// Latency has a result per latency configuration.
	Latency []LatencyResult `json:"latency"`
}

// ThroughputResult is one drain configuration's figure.
type ThroughputResult struct {
	Name string `json:"name"`
	// Rate is events per second over the median drain time.
	Rate float64 `json:"events_per_s"`
	// Baseline names the configuration Ratio compares with.
	Baseline string  `json:"baseline"`
	Ratio    float64 `json:"ratio"`
	// ClaimsPerDrain is how many claim queries the relays made per drain;
	// 0 for the plain loop.
	ClaimsPerDrain float64 `json:"claims_per_drain,omitempty"`
}

// LatencyResult is one latency configuration's figures, over every phase.
type LatencyResult struct {
	Name string `json:"name"`
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
	// Unarrived counts the events that had not arrived arrivalWait after
	// their phase's last enqueue; their latency counts as that wait.
	Unarrived int `json:"unarrived"`
	// Baseline names the configuration P50Ratio and P99Ratio compare with
	// (below 1: faster than it); empty when it did not run.
	Baseline string  `json:"baseline,omitempty"`
	P50Ratio float64 `json:"p50_ratio,omitempty"`
	P99Ratio float64 `json:"p99_ratio,omitempty"`
	// Notes say why the figures may not be what they seem.
	Notes []string `json:"notes,omitempty"`
}

// WriteText writes the report as the tables the benchmarks print.
func (r RelayReport) WriteText(w io.Writer) error {
	var b strings.Builder
	if len(r.Throughput) > 0 {
		fmt.Fprintf(&b, "events/s draining %d events over %d keys, %d drains each, taking turns, same PostgreSQL and broker:\n",
			r.Events, keys, r.Rounds)
		writeRateLines(&b, r.throughputRows())
	}
	if len(r.Latency) > 0 {
		fmt.Fprintf(&b, "enqueue-to-arrival latency at %d events/s, one per transaction, %v phases:\n", r.LatencyRate, r.LatencyDuration)
		for _, res := range r.Latency {
			fmt.Fprintf(&b, "  %-36s p50 %7.1fms  p99 %7.1fms  max %7.1fms  %d phases, %.0f enqueued/s", res.Name, res.P50, res.P99, res.Max, res.Phases, res.EnqueueRate)
			if res.Baseline != "" {
				fmt.Fprintf(&b, "  p99 %5.2fx %s", res.P99Ratio, res.Baseline)
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

// throughputRows are the throughput results as the tables show them, with
// the relays' claims.
func (r RelayReport) throughputRows() []rateRow {
	rows := make([]rateRow, len(r.Throughput))
	for i, res := range r.Throughput {
		rows[i] = rateRow{name: res.Name, rate: res.Rate, baseline: res.Baseline, ratio: res.Ratio}
		if res.ClaimsPerDrain > 0 {
			rows[i].note = fmt.Sprintf("%.1f claims per drain", res.ClaimsPerDrain)
			rows[i].cell = fmt.Sprintf("%.1f", res.ClaimsPerDrain)
		}
	}
	return rows
}

// Relay measures the relay beside a baseline, in one run on one
// PostgreSQL and one broker: the figures `courier bench relay` prints and
// BenchmarkRelayThroughput and BenchmarkRelayLatency measure.
//
// Throughput (ThroughputRun): a backlog of Events events (200-byte JSON,
// 1,000 keys, 12 partitions) drained with the relay, per-key order on, in
// several configurations, and with the baseline, a plain SKIP LOCKED loop
// that keeps no order. Latency (LatencyRun): enqueue to arrival at a
// consumer at LatencyRate events/s, with NOTIFY beside polling every 100ms
// (the baseline), Rounds phases each.
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
		progress(cfg.Progress, "relay throughput: round %d of %d, %d configurations draining %d events each", i+1, cfg.Rounds, len(run.drains), cfg.Events)
		if err = run.Round(ctx); err != nil {
			break
		}
	}
	if err = errors.Join(err, run.Close()); err != nil {
		return RelayReport{}, err
	}
	report := run.Report()
	for _, name := range LatencyConfigurations() {
		res, err := latency(ctx, cfg, name)
		if err != nil {
			return RelayReport{}, err
		}
		report.Latency = append(report.Latency, res)
	}
	for i, res := range report.Latency {
		for _, base := range report.Latency {
			if base.Name == LatencyPollOnly && base.P50 > 0 && base.P99 > 0 {
				report.Latency[i].Baseline, report.Latency[i].P50Ratio, report.Latency[i].P99Ratio = base.Name, res.P50/base.P50, res.P99/base.P99
			}
		}
	}
	return report, nil
}

// latency runs cfg.Rounds phases of the latency configuration name.
func latency(ctx context.Context, cfg RelayConfig, name string) (LatencyResult, error) {
	progress(cfg.Progress, "relay latency %s: warming up", name)
	run, err := NewLatencyRun(ctx, cfg, name)
	if err != nil {
		return LatencyResult{}, err
	}
	for i := range cfg.Rounds {
		progress(cfg.Progress, "relay latency %s: phase %d of %d, %d events/s for %v", name, i+1, cfg.Rounds, cfg.LatencyRate, cfg.LatencyDuration)
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

// outboxTable is one configuration's own migrated outbox table and topic.
type outboxTable struct {
	schema       string
	pool         *pgxpool.Pool // 8 connections, search_path set to schema
	out          *producer.Outbox
	topic        string
	topicCreated bool
}

// table creates a schema holding a migrated outbox table, and a topic of
// 12 partitions.
func (s *relayServices) table(ctx context.Context) (*outboxTable, error) {
	t := &outboxTable{schema: fmt.Sprintf("%s_%s_%d", s.cfg.Name, s.kind, len(s.tables))}
	t.topic = "courier.bench." + t.schema
	s.tables = append(s.tables, t) // close drops whatever of it exists
	if _, err := s.admin.Exec(ctx, "CREATE SCHEMA "+t.schema); err != nil {
		return nil, fmt.Errorf("create schema %s: %w", t.schema, err)
	}
	m, err := migrations.New(migrations.Config{Schema: t.schema})
	if err != nil {
		return nil, err
	}
	if _, err := m.Up(ctx, s.admin); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", t.schema, err)
	}
	if t.out, err = producer.NewOutbox(producer.Config{Schema: t.schema}); err != nil {
		return nil, err
	}
	if t.pool, err = s.pool(ctx, t.schema, 8); err != nil {
		return nil, err
	}
	if err := s.kafka.CreateTopic(t.topic, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}, false); err != nil {
		return nil, fmt.Errorf("create topic %s: %w", t.topic, err)
	}
	t.topicCreated = true
	return t, nil
}

// seed empties the table, enqueues n events in batches and ANALYZEs it.
// Keys come from a fixed-seed generator, so every configuration drains the
// same backlog.
func (t *outboxTable) seed(ctx context.Context, n int) error {
	if _, err := t.pool.Exec(ctx, "TRUNCATE courier_outbox"); err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(13, 13))
	events := make([]producer.Event, 0, seedBatch)
	for i := range n {
		events = append(events, orderEvent(t.topic, i, fmt.Sprintf("order-%d", rng.IntN(keys))))
		if len(events) == seedBatch || i == n-1 {
			if _, err := t.out.EnqueueBatch(ctx, t.pool, events); err != nil {
				return fmt.Errorf("seed %s: %w", t.schema, err)
			}
			events = events[:0]
		}
	}
	_, err := t.pool.Exec(ctx, "ANALYZE courier_outbox")
	return err
}

// history gives the table the state of one in service: n events already
// published, and planner statistics gathered (as autovacuum does) while
// nothing waited.
func (t *outboxTable) history(ctx context.Context, n int) error {
	if err := t.seed(ctx, n); err != nil {
		return err
	}
	if _, err := t.pool.Exec(ctx, "UPDATE courier_outbox SET status = 'published', published_at = now()"); err != nil {
		return err
	}
	_, err := t.pool.Exec(ctx, "VACUUM ANALYZE courier_outbox")
	return err
}

// drained fails unless every event of the table is published.
func (t *outboxTable) drained(ctx context.Context) error {
	var n int
	if err := t.pool.QueryRow(ctx, "SELECT count(*) FROM courier_outbox WHERE status <> 'published'").Scan(&n); err != nil {
		return err
	}
	if n != 0 {
		return fmt.Errorf("%d events are not published", n)
	}
	return nil
}

// orderEvent is the i-th OrderCreated event of key.
func orderEvent(topic string, i int, key string) producer.Event {
	return producer.Event{Topic: topic, Key: key, Type: "OrderCreated", Payload: orderPayload(key, i)}
}

// ThroughputRun drains backlogs with the relay in several configurations
// and with the plain SKIP LOCKED loop, one round at a time, for a caller
// that counts the rounds itself (a benchmark's b.Loop); Relay runs it
// RelayConfig.Rounds times. RelayConfig.Rounds is not used.
//
// Every configuration has its own schema and topic on the same PostgreSQL
// and broker and drains the same backlog (same keys, same order); the
// backlog is enqueued and ANALYZEd before the clock starts, so every drain
// runs with plans made for a backlog (the relay's claim is far slower with
// statistics gathered while nothing waited; the poll-only latency run
// shows that).
//
// The configurations take turns: each round drains one backlog with every
// one of them, starting one further along the list each time. On a shared
// machine whose speed drifts over minutes, that compares them at the same
// moments, where one configuration after another would not. A
// configuration's rate is its events over its median drain time.
type ThroughputRun struct {
	svc    *relayServices
	drains []*drainCase
	rounds int
}

// drainCase is one way of draining the backlog of its table.
type drainCase struct {
	name   string
	table  *outboxTable
	drain  func(ctx context.Context) (time.Duration, error) // drains the backlog, checks it is drained, returns how long it took
	spent  []time.Duration                                  // draining, each round
	claims *atomic.Int64                                    // claims made, for the relay
}

// NewThroughputRun validates cfg, applies its defaults, and makes every
// configuration's table, topic and producers. Close drops and closes them.
func NewThroughputRun(ctx context.Context, cfg RelayConfig) (*ThroughputRun, error) {
	svc, err := openRelayServices(ctx, cfg, "drain")
	if err != nil {
		return nil, err
	}
	run := &ThroughputRun{svc: svc}
	for _, workers := range []int{2, 1} {
		c, err := plainDrain(ctx, svc, workers)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("plain loop: %w", err), svc.close())
		}
		run.drains = append(run.drains, c)
	}
	for _, c := range []struct{ relays, workers, batch int }{
		{1, 1, producer.DefaultBatchSize}, {1, 1, 500},
		{1, producer.DefaultWorkers, producer.DefaultBatchSize}, {1, producer.DefaultWorkers, 500},
		{1, 4, producer.DefaultBatchSize},
		{2, producer.DefaultWorkers, producer.DefaultBatchSize},
	} {
		d, err := relayDrain(ctx, svc, c.relays, c.workers, c.batch)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("relay: %w", err), svc.close())
		}
		run.drains = append(run.drains, d)
	}
	return run, nil
}

// Round drains one backlog with every configuration, starting one further
// along the list than the round before.
func (r *ThroughputRun) Round(ctx context.Context) error {
	for i := range r.drains {
		c := r.drains[(r.rounds+i)%len(r.drains)]
		if err := c.table.seed(ctx, r.svc.cfg.Events); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		took, err := c.drain(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		c.spent = append(c.spent, took)
	}
	r.rounds++
	return nil
}

// Report is the figures of the rounds so far, the baseline first, with
// no latency results.
func (r *ThroughputRun) Report() RelayReport {
	cfg := r.svc.cfg
	report := RelayReport{PostgreSQL: r.svc.version, Events: cfg.Events, Rounds: r.rounds,
		LatencyRate: cfg.LatencyRate, LatencyDuration: cfg.LatencyDuration}
	base := MedianRate(cfg.Events, r.drains[0].spent)
	for _, c := range r.drains {
		res := ThroughputResult{Name: c.name, Rate: MedianRate(cfg.Events, c.spent), Baseline: PlainLoop}
		if base > 0 {
			res.Ratio = res.Rate / base
		}
		if c.claims != nil && r.rounds > 0 {
			res.ClaimsPerDrain = float64(c.claims.Load()) / float64(r.rounds)
		}
		report.Throughput = append(report.Throughput, res)
	}
	return report
}

// Close closes the producers and pools and drops the schemas and topics.
func (r *ThroughputRun) Close() error { return r.svc.close() }

// plainDrain is the baseline: workers goroutines, each on its own
// connection and Sarama producer, repeat SELECT … ORDER BY seq LIMIT 1000
// FOR UPDATE SKIP LOCKED, SendMessages, UPDATE … SET status='published' and
// COMMIT until nothing is left. It sends the same records as the relay
// (payload, key and the CloudEvents binary-mode headers), so both put the
// same bytes on the broker.
func plainDrain(ctx context.Context, svc *relayServices, workers int) (*drainCase, error) {
	table, err := svc.table(ctx)
	if err != nil {
		return nil, err
	}
	producers := make([]sarama.SyncProducer, workers)
	for i := range producers {
		sp, err := sarama.NewSyncProducer(svc.cfg.Brokers, producer.NewSaramaConfig())
		if err != nil {
			return nil, err
		}
		svc.closers = append(svc.closers, sp.Close)
		if _, _, err := sp.SendMessage(&sarama.ProducerMessage{Topic: table.topic, Value: sarama.StringEncoder("warm-up")}); err != nil {
			return nil, err
		}
		producers[i] = sp
	}
	events := svc.cfg.Events
	return &drainCase{name: fmt.Sprintf("plain-skip-locked-loop/workers=%d", workers), table: table, drain: func(ctx context.Context) (time.Duration, error) {
		start := time.Now()
		var wg sync.WaitGroup
		published := make([]int, workers)
		errs := make([]error, workers)
		for w := range workers {
			wg.Go(func() { published[w], errs[w] = plainWorker(ctx, table.pool, producers[w]) })
		}
		wg.Wait()
		elapsed := time.Since(start)
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
		total := 0
		for _, n := range published {
			total += n
		}
		if total != events {
			return 0, fmt.Errorf("the plain loop published %d events, want %d", total, events)
		}
		return elapsed, table.drained(ctx)
	}}, nil
}

const (
	plainClaimSQL = `
SELECT id, topic, partition_key, event_type, payload, content_type, created_at
FROM courier_outbox
WHERE status = 'pending'
ORDER BY seq
LIMIT $1
FOR UPDATE SKIP LOCKED`
	plainSettleSQL = `UPDATE courier_outbox SET status = 'published', published_at = now() WHERE id = ANY($1)`
)

// plainWorker runs plain batches until one finds nothing.
func plainWorker(ctx context.Context, pool *pgxpool.Pool, sp sarama.SyncProducer) (int, error) {
	total := 0
	for {
		n, err := plainBatch(ctx, pool, sp)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// plainBatch claims, sends and settles one batch in one transaction and
// returns its size.
func plainBatch(ctx context.Context, pool *pgxpool.Pool, sp sarama.SyncProducer) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, plainClaimSQL, plainLimit)
		if err != nil {
			return err
		}
		ids := make([]uuid.UUID, 0, plainLimit)
		msgs := make([]*sarama.ProducerMessage, 0, plainLimit)
		for rows.Next() {
			var (
				id                uuid.UUID
				topic, typ, ctype string
				key               pgtype.Text
				payload           []byte
				createdAt         time.Time
			)
			if err := rows.Scan(&id, &topic, &key, &typ, &payload, &ctype, &createdAt); err != nil {
				rows.Close()
				return err
			}
			msg := &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(payload), Headers: []sarama.RecordHeader{
				header(producer.HeaderSpecVersion, "1.0"),
				header(producer.HeaderID, id.String()),
				header(producer.HeaderType, typ),
				header(producer.HeaderSource, producer.DefaultSource),
				header(producer.HeaderTime, createdAt.UTC().Format(time.RFC3339Nano)),
				header(producer.HeaderContentType, ctype),
			}}
			if key.Valid {
				msg.Key = sarama.StringEncoder(key.String)
			}
			ids, msgs = append(ids, id), append(msgs, msg)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if len(ids) == 0 {
			return nil
		}
		if err := sp.SendMessages(msgs); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, plainSettleSQL, ids); err != nil {
			return err
		}
		n = len(ids)
		return nil
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// relayDrain drains the backlog with relays relays of BatchSize batch: one
// relay of one worker is driven by RunOnce in a loop until a claim finds
// nothing; otherwise the relays run Run side by side (NOTIFY on), like
// processes, and the drain ends when the last event is recorded as
// published. Each relay has its own Sarama producer, connected beforehand,
// as the plain loop's are.
func relayDrain(ctx context.Context, svc *relayServices, relays, workers, batch int) (*drainCase, error) {
	table, err := svc.table(ctx)
	if err != nil {
		return nil, err
	}
	pubs := make([]producer.Publisher, relays)
	for i := range pubs {
		pub, err := producer.NewSaramaPublisher(svc.cfg.Brokers, producer.NewSaramaConfig())
		if err != nil {
			return nil, err
		}
		svc.closers = append(svc.closers, pub.Close)
		warm := []*sarama.ProducerMessage{{Topic: table.topic, Value: sarama.StringEncoder("warm-up")}}
		if err := pub.Publish(ctx, warm)[0]; err != nil {
			return nil, err
		}
		pubs[i] = pub
	}
	events := svc.cfg.Events
	c := &drainCase{name: fmt.Sprintf("relay/relays=%d/workers=%d/batch=%d", relays, workers, batch), table: table,
		claims: &atomic.Int64{}}
	c.drain = func(ctx context.Context) (time.Duration, error) {
		counter := &drainCounter{target: int64(events), done: make(chan struct{})}
		rs := make([]*producer.Relay, relays)
		for i := range rs {
			r, err := producer.NewRelay(table.pool, producer.RelayConfig{
				Schema: table.schema, Publisher: pubs[i], BatchSize: batch, Workers: workers,
				Logger: svc.cfg.Logger, Metrics: counter,
			})
			if err != nil {
				return 0, err
			}
			rs[i] = r
		}
		defer func() { c.claims.Add(counter.claims.Load()) }()
		start := time.Now()
		var elapsed time.Duration
		if relays == 1 && workers == 1 {
			for {
				res, err := rs[0].RunOnce(ctx)
				if err != nil {
					return 0, err
				}
				if res.Claimed == 0 {
					break
				}
			}
			elapsed = time.Since(start)
		} else {
			runCtx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			failed := make(chan error, len(rs))
			for _, r := range rs {
				wg.Go(func() {
					if err := r.Run(runCtx); err != nil {
						failed <- err
					}
				})
			}
			defer func() { cancel(); wg.Wait() }()
			// Published is reported once a batch's outcome is committed.
			select {
			case <-counter.done:
			case err := <-failed:
				return 0, fmt.Errorf("a relay stopped: %w", err)
			case <-ctx.Done():
				return 0, ctx.Err()
			case <-time.After(deadline):
				return 0, fmt.Errorf("the relays published %d of %d events in %v", counter.published.Load(), events, deadline)
			}
			elapsed = time.Since(start)
		}
		if n := counter.published.Load(); n != int64(events) {
			return 0, fmt.Errorf("the relays published %d events, want %d", n, events)
		}
		return elapsed, table.drained(ctx)
	}
	return c, nil
}

// drainCounter is a RelayMetrics that counts claims and publishes and
// closes done when target events are published.
type drainCounter struct {
	target    int64
	done      chan struct{}
	published atomic.Int64
	claims    atomic.Int64
}

func (c *drainCounter) Claimed(int) { c.claims.Add(1) }

func (c *drainCounter) Published(string, time.Duration) {
	if c.published.Add(1) == c.target {
		close(c.done)
	}
}
func (c *drainCounter) PublishFailed(string, string)         {}
func (c *drainCounter) DeadLettered(string)                  {}
func (c *drainCounter) BreakerChanged(producer.BreakerState) {}
func (c *drainCounter) Backlog(int64, time.Duration)         {}
