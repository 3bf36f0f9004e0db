package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/producer"
)

// Defaults of SoakConfig.
const (
	DefaultSoakRate      = 3_000
	DefaultSoakDuration  = 30 * time.Minute
	DefaultSoakSample    = time.Minute
	DefaultSoakSettle    = 5 * time.Minute
	DefaultSoakEnqueuers = 32
)

// The rules of a soak's verdict (see SoakVerdict).
const (
	// soakSizeTolerance is how far, as a fraction, the queue's sizes at the
	// end may be from their sizes at Settle.
	soakSizeTolerance = 0.20
	// soakRateFloor is the fraction of Rate every sample after Settle must
	// enqueue.
	soakRateFloor = 0.95
	// The lag after Settle may reach soakLagFactor times the lag at Settle
	// plus soakLagSlack.
	soakLagFactor = 2
	soakLagSlack  = time.Second
	// soakDrainWait is how long the soak waits for the relay to publish
	// what is left once the load stops.
	soakDrainWait = time.Minute
)

// SoakConfig says where and how long Soak runs. DatabaseURL and Brokers are
// required.
type SoakConfig struct {
	// DatabaseURL is the PostgreSQL database the outbox is made in: the
	// soak creates a schema of its own there, named after Name, and drops it
	// at the end.
	DatabaseURL string
	// Brokers are the Kafka bootstrap addresses; the soak creates (and
	// deletes) a topic of 12 partitions there, named courier.bench.*.
	Brokers []string
	// Sarama returns the client config for creating and deleting the
	// topic. The relay keeps courier's default producer config. Defaults to
	// sarama.NewConfig() with acks from all in-sync replicas.
	Sarama func() *sarama.Config
	// Rate is how many events per second the soak enqueues, one per
	// transaction. Defaults to 3,000.
	Rate int
	// Duration is how long the soak enqueues. Defaults to 30m.
	Duration time.Duration
	// Sample is how often the soak records the queue's sizes, dead tuples,
	// backlog and lag. Defaults to 1m.
	Sample time.Duration
	// Settle is when the tables are expected to have reached their steady
	// size: the verdict compares the end with the sample nearest it. It must
	// be shorter than Duration. Defaults to 5m.
	Settle time.Duration
	// Enqueuers is how many goroutines enqueue, each on a connection of its
	// own. Defaults to 32.
	Enqueuers int
	// Logger receives the relay's logs. Defaults to a logger that formats
	// warnings and discards them.
	Logger *slog.Logger
	// Progress, when set, receives a line as the soak starts and one per
	// sample as it is taken. Defaults to none.
	Progress io.Writer
	// Name makes the schema and topic names unique: a lower-case identifier
	// (letters, digits, underscores) of at most 40 bytes. Defaults to a
	// random one.
	Name string
}

func (c *SoakConfig) setDefaults() error {
	if err := applyCounts(count{&c.Rate, DefaultSoakRate}, count{&c.Enqueuers, DefaultSoakEnqueuers}); err != nil {
		return err
	}
	for _, d := range []struct {
		field string
		value *time.Duration
		def   time.Duration
	}{
		{"Duration", &c.Duration, DefaultSoakDuration},
		{"Sample", &c.Sample, DefaultSoakSample},
		{"Settle", &c.Settle, DefaultSoakSettle},
	} {
		if *d.value < 0 {
			return fmt.Errorf("bench: SoakConfig.%s is %v; use a positive duration, or 0 for the default of %v", d.field, *d.value, d.def)
		}
		if *d.value == 0 {
			*d.value = d.def
		}
	}
	switch {
	case c.Settle >= c.Duration:
		return fmt.Errorf("bench: SoakConfig.Settle (%v) is not shorter than Duration (%v): the verdict compares the end with the sample at Settle; settle sooner or soak longer", c.Settle, c.Duration)
	case c.Sample > c.Duration:
		return fmt.Errorf("bench: SoakConfig.Sample (%v) is longer than Duration (%v): sample more often or soak longer", c.Sample, c.Duration)
	}
	return nil
}

// SoakReport is what one Soak saw.
type SoakReport struct {
	// PostgreSQL is the server's version; Autovacuum its autovacuum
	// setting ("on" or "off").
	PostgreSQL string `json:"postgresql"`
	Autovacuum string `json:"autovacuum"`
	// Schema and Topic are where the soak ran (dropped and deleted since).
	Schema string `json:"schema"`
	Topic  string `json:"topic"`
	// Rate, Duration, Sample, Settle and Enqueuers are the soak's config.
	Rate      int           `json:"rate"`
	Duration  time.Duration `json:"duration_ns"`
	Sample    time.Duration `json:"sample_ns"`
	Settle    time.Duration `json:"settle_ns"`
	Enqueuers int           `json:"enqueuers"`
	// Relay is the relay's config, after its defaults: what ran.
	Relay SoakRelay `json:"relay"`
	// LoadAverage is the 1-minute load average when the soak started, and
	// Busy is true when it was at least half the cores: other work shared
	// the machine.
	LoadAverage float64 `json:"load_average"`
	Busy        bool    `json:"busy"`
	// Enqueued is how many events the soak enqueued. Published and
	// DeadLettered are how many its history and dead letters held at the
	// end, counted once the relay drained the queue (0 when interrupted).
	Enqueued     int64 `json:"enqueued"`
	Published    int64 `json:"published"`
	DeadLettered int64 `json:"dead_lettered"`
	// Interrupted is true when the soak ended early, its context done or
	// an error: the samples are those taken so far.
	Interrupted bool `json:"interrupted,omitempty"`
	// Samples are in the order taken; the last is Drained unless the soak
	// was interrupted.
	Samples []SoakSample `json:"samples"`
	Verdict SoakVerdict  `json:"verdict"`
}

// SoakRelay is the relay config a soak ran with: courier's defaults.
type SoakRelay struct {
	Workers         int           `json:"workers"`
	BatchSize       int           `json:"batch_size"`
	Retention       time.Duration `json:"retention_ns"`
	CleanupInterval time.Duration `json:"cleanup_interval_ns"`
}

// SoakSample is the state of the outbox at one moment of a soak.
type SoakSample struct {
	// Elapsed is the time since the load started.
	Elapsed time.Duration `json:"elapsed_ns"`
	// Drained marks the sample taken after the load stopped and the relay
	// published what was left (or soakDrainWait passed).
	Drained bool `json:"drained,omitempty"`
	// EnqueueRate is the events enqueued since the sample before over the
	// time since it, per second; 0 when Drained.
	EnqueueRate float64 `json:"enqueued_per_s"`
	// Backlog is the events not yet published: those of the queue and of
	// the waiting table.
	Backlog int64 `json:"backlog"`
	// Lag is the age of the queue's head (its oldest event by seq); 0 when
	// the queue is empty.
	Lag time.Duration `json:"lag_ns"`
	// Queue is courier_outbox, Waiting courier_outbox_waiting.
	Queue   SoakTable `json:"queue"`
	Waiting SoakTable `json:"waiting"`
	// HistoryBytes is the size of every partition of
	// courier_outbox_published, with their indexes and TOAST
	// (pg_total_relation_size).
	HistoryBytes int64 `json:"history_bytes"`
}

// SoakTable is one table's size and pg_stat_user_tables figures.
type SoakTable struct {
	// TableBytes is pg_relation_size, IndexBytes pg_indexes_size.
	TableBytes int64 `json:"table_bytes"`
	IndexBytes int64 `json:"index_bytes"`
	// LiveTuples, DeadTuples and LastAutovacuum are n_live_tup,
	// n_dead_tup and last_autovacuum; Vacuums is vacuum_count plus
	// autovacuum_count: the relay's own vacuums and autovacuum's.
	LiveTuples     int64      `json:"live_tuples"`
	DeadTuples     int64      `json:"dead_tuples"`
	LastAutovacuum *time.Time `json:"last_autovacuum,omitempty"`
	Vacuums        int64      `json:"vacuums"`
}

// SoakVerdict is a soak's samples judged against the goal: the queue's
// table and index sizes at the end at most 20 % above their sizes at
// Settle (a queue vacuumed back below its size then has not bloated),
// every sample after Settle enqueuing at least 95 % of the rate, and the
// largest lag after Settle at most twice the lag at Settle plus 1 s.
type SoakVerdict struct {
	// Evaluated is false when no sample under load came after the one
	// nearest Settle (the soak was interrupted): nothing below is set.
	Evaluated bool `json:"evaluated"`
	// Reference indexes Samples: the sample under load nearest Settle.
	// End indexes the last sample under load. Both are -1 when there is
	// none.
	Reference int `json:"reference_sample"`
	End       int `json:"end_sample"`
	// TableRatio and IndexRatio are the queue's table and index sizes at
	// End over those at Reference (0 when the reference size is 0);
	// TableOK and IndexOK hold when they are at most 1.2 (when the
	// reference size is 0, when the end size is 0 too).
	TableRatio float64 `json:"table_ratio"`
	TableOK    bool    `json:"table_ok"`
	IndexRatio float64 `json:"index_ratio"`
	IndexOK    bool    `json:"index_ok"`
	// MinRate is the lowest EnqueueRate after Reference, up to End;
	// RateFlat holds when it is at least 95 % of the rate.
	MinRate  float64 `json:"min_enqueued_per_s"`
	RateFlat bool    `json:"rate_flat"`
	// LagAtSettle is the lag at Reference, MaxLag the largest after it, up
	// to End; LagFlat holds when MaxLag ≤ 2 × LagAtSettle + 1 s.
	LagAtSettle time.Duration `json:"lag_at_settle_ns"`
	MaxLag      time.Duration `json:"max_lag_ns"`
	LagFlat     bool          `json:"lag_flat"`
	// Drained holds when the last sample is Drained and found no backlog.
	Drained bool `json:"drained"`
	// Pass holds when TableOK, IndexOK, RateFlat and LagFlat all do.
	Pass bool `json:"pass"`
}

// Soak holds the outbox at a steady load and watches its tables for bloat:
// the goal that a 30-minute soak at 3,000 events/s (enqueue, relay and
// retention) ends with the queue's table and index sizes within 20 % of
// their sizes after 5 minutes, the enqueue rate and the relay's lag flat.
//
// It makes a schema of its own with courier's migrations and a topic of 12
// partitions, and runs one relay on it with courier's default RelayConfig
// (retention runs every minute). Enqueuers goroutines enqueue Rate events/s
// (200-byte JSON, 1,000 keys), one per transaction through a pool, paced on
// a 1ms ticker, for Duration. Every Sample, and at the end, it records a
// SoakSample; then it waits up to a minute for the relay to publish what
// is left, records a last, Drained, sample, and counts the published and
// dead-lettered events. Then it stops the relay and drops the schema and
// topic.
//
// When ctx ends or something fails, it cleans up all the same and returns
// the report of the samples taken so far (Interrupted) with the error.
func Soak(ctx context.Context, cfg SoakConfig) (SoakReport, error) {
	if err := cfg.setDefaults(); err != nil {
		return SoakReport{}, err
	}
	svc, err := openRelayServices(ctx, RelayConfig{DatabaseURL: cfg.DatabaseURL, Brokers: cfg.Brokers, Sarama: cfg.Sarama,
		Logger: cfg.Logger, Name: cfg.Name, Progress: cfg.Progress}, "soak")
	if err != nil {
		return SoakReport{}, err
	}
	s := &soak{cfg: cfg, svc: svc, report: SoakReport{PostgreSQL: svc.version, Rate: cfg.Rate, Duration: cfg.Duration,
		Sample: cfg.Sample, Settle: cfg.Settle, Enqueuers: cfg.Enqueuers}}
	s.report.LoadAverage, s.report.Busy = ThisMachine().busy()
	err = s.start(ctx)
	if err == nil {
		err = s.run(ctx)
	}
	s.report.Interrupted = err != nil
	s.report.Enqueued = s.enqueued.Load()
	s.report.Verdict = judge(s.report.Samples, cfg.Rate, cfg.Settle)
	return s.report, errors.Join(err, svc.close())
}

// soak is one Soak run.
type soak struct {
	cfg     SoakConfig
	svc     *relayServices
	table   *outboxTable
	enqueue *pgxpool.Pool   // Enqueuers connections
	relay   <-chan struct{} // closes when the relay's Run returns
	report  SoakReport

	enqueued atomic.Int64
	began    time.Time // when the load started
	last     time.Time // when the last sample was taken
	lastN    int64     // enqueued then
}

// start makes the schema, the topic and the enqueuers' pool and starts the
// relay, with its defaults; closing the services stops it first.
func (s *soak) start(ctx context.Context) error {
	var err error
	if s.table, err = s.svc.table(ctx); err != nil {
		return err
	}
	s.report.Schema, s.report.Topic = s.table.schema, s.table.topic
	if s.enqueue, err = s.svc.pool(ctx, s.table.schema, int32(s.cfg.Enqueuers)); err != nil {
		return err
	}
	if err := s.svc.admin.QueryRow(ctx, "SHOW autovacuum").Scan(&s.report.Autovacuum); err != nil {
		return fmt.Errorf("read PostgreSQL's autovacuum setting: %w", err)
	}
	relay, err := producer.NewRelay(s.table.pool, producer.RelayConfig{Schema: s.table.schema, Brokers: s.cfg.Brokers, Logger: s.svc.cfg.Logger})
	if err != nil {
		return err
	}
	// What NewRelay defaults to, for the report.
	s.report.Relay = SoakRelay{Workers: producer.DefaultWorkers, BatchSize: producer.DefaultBatchSize,
		Retention: producer.DefaultRetention, CleanupInterval: producer.DefaultCleanupInterval}
	var stop func() error
	s.relay, stop = runRelay(ctx, relay)
	s.svc.closers = append(s.svc.closers, stop)
	return nil
}

// runRelay runs relay in the background until stop, which returns what Run
// returned; done closes when Run returns, whether stopped or not. The relay
// outlives ctx, so that stop, not ctx, ends it.
func runRelay(ctx context.Context, relay *producer.Relay) (done <-chan struct{}, stop func() error) {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	ended := make(chan struct{})
	var err error
	go func() { err = relay.Run(runCtx); close(ended) }()
	return ended, func() error {
		cancel()
		<-ended
		if err != nil {
			return fmt.Errorf("the relay's Run returned %w", err)
		}
		return nil
	}
}

// run enqueues for Duration, sampling every Sample and at the end, then
// waits for the relay to drain the backlog and takes the Drained sample.
func (s *soak) run(ctx context.Context) error {
	loadCtx, stopLoad := context.WithCancelCause(ctx)
	defer stopLoad(nil)
	s.began = time.Now()
	s.last = s.began
	end := s.began.Add(s.cfg.Duration)
	progress(s.cfg.Progress, "soak: %d events/s for %v into schema %s (topic %s), a sample every %v, the reference at %v",
		s.cfg.Rate, s.cfg.Duration, s.table.schema, s.table.topic, s.cfg.Sample, s.cfg.Settle)

	jobs := make(chan int, s.cfg.Enqueuers)
	var load sync.WaitGroup
	load.Go(func() { pace(loadCtx, jobs, s.cfg.Rate, s.began, end) })
	for range s.cfg.Enqueuers {
		load.Go(func() { s.enqueueJobs(loadCtx, jobs, stopLoad) })
	}
	err := s.sampleUntil(loadCtx, end)
	if err != nil {
		stopLoad(err)
	}
	load.Wait()
	if err != nil {
		if cause := context.Cause(loadCtx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause // an enqueue failed
		}
		return fmt.Errorf("the soak stopped after %v: %w", time.Since(s.began).Round(time.Second), err)
	}
	if err := s.sample(ctx, false); err != nil {
		return err
	}
	progress(s.cfg.Progress, "soak: the load stopped; waiting up to %v for the relay to publish the rest", soakDrainWait)
	if err := s.waitDrained(ctx); err != nil {
		return err
	}
	if err := s.sample(ctx, true); err != nil {
		return err
	}
	return s.svc.admin.QueryRow(ctx, s.sql("SELECT (SELECT count(*) FROM {s}.courier_outbox_published), (SELECT count(*) FROM {s}.courier_outbox_dead)")).
		Scan(&s.report.Published, &s.report.DeadLettered)
}

// sampleUntil takes a sample every Sample until end, the sample at end
// left to the caller. It returns early, with an error, when ctx ends (an
// enqueue failed, or the caller's ctx ended) or the relay stops.
func (s *soak) sampleUntil(ctx context.Context, end time.Time) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for k := 1; ; k++ {
		at := s.began.Add(time.Duration(k) * s.cfg.Sample)
		if !at.Before(end) {
			at = end
		}
		timer.Reset(time.Until(at))
		select {
		case <-timer.C:
		case <-ctx.Done():
			return ctx.Err()
		case <-s.relay:
			return errors.New("the relay stopped before the soak ended")
		}
		if at.Equal(end) {
			return nil
		}
		if err := s.sample(ctx, false); err != nil {
			return err
		}
	}
}

// pace sends job numbers to jobs at rate per second from start until end
// or ctx ends, checking on a 1ms ticker: each look sends every job that
// fell due since the last (several when the ticker ran late or the
// enqueuers fell behind, and the jobs still due at end never). It closes
// jobs when it returns.
func pace(ctx context.Context, jobs chan<- int, rate int, start, end time.Time) {
	defer close(jobs)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	over := time.NewTimer(time.Until(end))
	defer over.Stop()
	for sent := 0; ; {
		for due := int(time.Since(start).Seconds()*float64(rate)) + 1; sent < due; sent++ {
			select {
			case jobs <- sent:
			case <-over.C:
				return
			case <-ctx.Done():
				return
			}
		}
		select {
		case <-tick.C:
		case <-over.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// enqueueJobs enqueues one event per job, one per transaction, until jobs
// closes. The first failure while ctx lasts ends the load with it.
func (s *soak) enqueueJobs(ctx context.Context, jobs <-chan int, fail context.CancelCauseFunc) {
	for i := range jobs {
		ev := orderEvent(s.table.topic, i, fmt.Sprintf("order-%d", rand.IntN(keys)))
		if _, err := s.table.out.Enqueue(ctx, s.enqueue, ev); err != nil {
			if ctx.Err() == nil {
				fail(fmt.Errorf("enqueue: %w", err))
			}
			continue
		}
		s.enqueued.Add(1)
	}
}

// sql fills {s} with the soak's schema.
func (s *soak) sql(q string) string { return strings.ReplaceAll(q, "{s}", s.table.schema) }

// soakBacklog counts the events not yet published.
const soakBacklog = "(SELECT count(*) FROM {s}.courier_outbox) + (SELECT count(*) FROM {s}.courier_outbox_waiting)"

// soakSampleSQL measures the backlog, the age of the queue's head and the
// size of the history.
const soakSampleSQL = `
SELECT ` + soakBacklog + `,
    COALESCE(EXTRACT(EPOCH FROM now() - (SELECT created_at FROM {s}.courier_outbox ORDER BY seq LIMIT 1)), 0)::float8,
    (SELECT COALESCE(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits
     WHERE inhparent = '{s}.courier_outbox_published'::regclass)`

// soakTablesSQL reads the sizes and statistics of the queue and the
// waiting table.
const soakTablesSQL = `
SELECT relname, pg_relation_size(relid), pg_indexes_size(relid), n_live_tup, n_dead_tup, last_autovacuum,
    vacuum_count + autovacuum_count
FROM pg_stat_user_tables
WHERE schemaname = $1 AND relname IN ('courier_outbox', 'courier_outbox_waiting')`

// sample records a sample and prints it as a progress line.
func (s *soak) sample(ctx context.Context, drained bool) error {
	now := time.Now()
	n := s.enqueued.Load()
	smp := SoakSample{Elapsed: now.Sub(s.began), Drained: drained}
	if !drained {
		smp.EnqueueRate = float64(n-s.lastN) / now.Sub(s.last).Seconds()
	}
	s.last, s.lastN = now, n
	var lag float64
	if err := s.svc.admin.QueryRow(ctx, s.sql(soakSampleSQL)).Scan(&smp.Backlog, &lag, &smp.HistoryBytes); err != nil {
		return fmt.Errorf("sample the outbox in %s: %w", s.table.schema, err)
	}
	smp.Lag = max(time.Duration(lag*float64(time.Second)), 0) // an enqueue that began after the sample did has a head younger than now()
	rows, err := s.svc.admin.Query(ctx, soakTablesSQL, s.table.schema)
	if err != nil {
		return fmt.Errorf("read pg_stat_user_tables of %s: %w", s.table.schema, err)
	}
	for rows.Next() {
		var name string
		var t SoakTable
		if err := rows.Scan(&name, &t.TableBytes, &t.IndexBytes, &t.LiveTuples, &t.DeadTuples, &t.LastAutovacuum, &t.Vacuums); err != nil {
			rows.Close()
			return fmt.Errorf("read pg_stat_user_tables of %s: %w", s.table.schema, err)
		}
		if name == "courier_outbox" {
			smp.Queue = t
		} else {
			smp.Waiting = t
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read pg_stat_user_tables of %s: %w", s.table.schema, err)
	}
	s.report.Samples = append(s.report.Samples, smp)
	c := sampleCells(smp)
	progress(s.cfg.Progress, "soak minute %s: %s enqueued/s, backlog %s, lag %s ms, queue %s MB + %s MB indexes, %s live/dead tuples, %s vacuums; waiting %s MB; history %s MB",
		c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9])
	return nil
}

// waitDrained polls the backlog every 100ms until it is 0 or soakDrainWait
// passes; the Drained sample then tells which.
func (s *soak) waitDrained(ctx context.Context) error {
	deadline := time.NewTimer(soakDrainWait)
	defer deadline.Stop()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		var n int64
		if err := s.svc.admin.QueryRow(ctx, s.sql("SELECT "+soakBacklog)).Scan(&n); err != nil {
			return fmt.Errorf("count the backlog of %s: %w", s.table.schema, err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// judge computes the verdict of samples taken at rate with settle as the
// reference point.
func judge(samples []SoakSample, rate int, settle time.Duration) SoakVerdict {
	v := SoakVerdict{Reference: -1, End: -1}
	distance := func(i int) time.Duration { return (samples[i].Elapsed - settle).Abs() }
	for i, smp := range samples {
		if smp.Drained {
			v.Drained = i == len(samples)-1 && smp.Backlog == 0
			continue
		}
		v.End = i
		if v.Reference < 0 || distance(i) < distance(v.Reference) {
			v.Reference = i
		}
	}
	if v.Reference < 0 || v.End <= v.Reference {
		return v
	}
	ref, end := samples[v.Reference], samples[v.End]
	v.Evaluated = true
	v.TableRatio, v.TableOK = sizeRatio(end.Queue.TableBytes, ref.Queue.TableBytes)
	v.IndexRatio, v.IndexOK = sizeRatio(end.Queue.IndexBytes, ref.Queue.IndexBytes)
	v.LagAtSettle, v.MinRate = ref.Lag, math.Inf(1)
	for _, smp := range samples[v.Reference+1 : v.End+1] {
		v.MinRate = min(v.MinRate, smp.EnqueueRate)
		v.MaxLag = max(v.MaxLag, smp.Lag)
	}
	v.RateFlat = v.MinRate >= soakRateFloor*float64(rate)
	v.LagFlat = v.MaxLag <= soakLagFactor*v.LagAtSettle+soakLagSlack
	v.Pass = v.TableOK && v.IndexOK && v.RateFlat && v.LagFlat
	return v
}

// sizeRatio is end over ref, and whether it is at most 1 plus
// soakSizeTolerance; a reference of 0 has ratio 0 and holds only when end
// is 0 too.
func sizeRatio(end, ref int64) (float64, bool) {
	if ref == 0 {
		return 0, end == 0
	}
	r := float64(end) / float64(ref)
	return r, r <= 1+soakSizeTolerance
}

// soakColumns head the samples' table.
var soakColumns = []string{"minute", "enqueued/s", "backlog", "lag ms", "queue table MB", "queue indexes MB",
	"queue live/dead tuples", "vacuums", "waiting table MB", "history MB"}

// sampleCells are a sample's cells under soakColumns.
func sampleCells(smp SoakSample) []string {
	minute, rate := minutes(smp.Elapsed), thousands(smp.EnqueueRate)
	if smp.Drained {
		minute, rate = minute+" (drained)", "–"
	}
	return []string{minute, rate, thousands(float64(smp.Backlog)), strconv.FormatFloat(float64(smp.Lag)/float64(time.Millisecond), 'f', 1, 64),
		mb(smp.Queue.TableBytes), mb(smp.Queue.IndexBytes),
		thousands(float64(smp.Queue.LiveTuples)) + "/" + thousands(float64(smp.Queue.DeadTuples)),
		strconv.FormatInt(smp.Queue.Vacuums, 10), mb(smp.Waiting.TableBytes), mb(smp.HistoryBytes)}
}

// minutes formats d in minutes, to two decimals at most: 5, 0.25.
func minutes(d time.Duration) string {
	return strconv.FormatFloat(math.Round(d.Minutes()*100)/100, 'f', -1, 64)
}

// mb formats a size in MB (2^20 bytes): three decimals below 10 MB, one
// above.
func mb(bytes int64) string {
	m := float64(bytes) / (1 << 20)
	if m < 10 {
		return strconv.FormatFloat(m, 'f', 3, 64)
	}
	return strconv.FormatFloat(m, 'f', 1, 64)
}

// description is the paragraph that says what ran and how to read the
// samples.
func (r SoakReport) description() string {
	retention := r.Relay.Retention.String()
	if days := r.Relay.Retention / (24 * time.Hour); days > 0 && r.Relay.Retention%(24*time.Hour) == 0 {
		retention = plural(int(days), "day")
	}
	return fmt.Sprintf(`Enqueued %s events/s for %v, one event per transaction (%d-byte JSON, %s keys, %d
partitions), from %d goroutines through a pool, while one relay with courier's default RelayConfig
(%d workers, batches of %s, retention of %s run every %v) published them to Kafka; a sample
every %v. PostgreSQL %s, autovacuum %s. Backlog is the events not yet published (in
courier_outbox and courier_outbox_waiting); lag is the age of the queue's oldest event; the
queue's sizes are pg_relation_size and pg_indexes_size of courier_outbox, its tuples and
vacuums (the relay's and autovacuum's) those of pg_stat_user_tables; history is every partition of
courier_outbox_published with its indexes. MB are 2^20 bytes.`,
		thousands(float64(r.Rate)), r.Duration, payloadSize, thousands(keys), partitions, r.Enqueuers, r.Relay.Workers,
		thousands(float64(r.Relay.BatchSize)), retention, r.Relay.CleanupInterval, r.Sample, r.PostgreSQL, r.Autovacuum)
}

// verdictLines are the verdict and its rules, then the notes, one per
// line; strong marks the words that say pass or fail.
func (r SoakReport) verdictLines(strong func(string) string) []string {
	v := r.Verdict
	word := func(ok bool, yes, no string) string {
		if ok {
			return strong(yes)
		}
		return strong(no)
	}
	var lines []string
	if v.Evaluated {
		ref, end := r.Samples[v.Reference], r.Samples[v.End]
		at := "minute " + minutes(ref.Elapsed)
		lines = append(lines,
			fmt.Sprintf("The reference is the sample nearest the settle time, %v (%s); the end is the last sample under load (minute %s).", r.Settle, at, minutes(end.Elapsed)),
			fmt.Sprintf("Queue table: %s MB at the end, %s MB at %s, %.2f×: %s (rule: at most %.0f %% above the reference).",
				mb(end.Queue.TableBytes), mb(ref.Queue.TableBytes), at, v.TableRatio, word(v.TableOK, "pass", "fail"), soakSizeTolerance*100),
			fmt.Sprintf("Queue indexes: %s MB at the end, %s MB at %s, %.2f×: %s (rule: at most %.0f %% above the reference).",
				mb(end.Queue.IndexBytes), mb(ref.Queue.IndexBytes), at, v.IndexRatio, word(v.IndexOK, "pass", "fail"), soakSizeTolerance*100),
			fmt.Sprintf("Enqueue rate: at least %s events/s in every sample after %s, %.1f %% of %s: %s (rule: every sample after the reference at least %.0f %% of the rate).",
				thousands(v.MinRate), at, 100*v.MinRate/float64(r.Rate), thousands(float64(r.Rate)), word(v.RateFlat, "flat", "not flat"), soakRateFloor*100),
			fmt.Sprintf("Relay lag: at most %.1f ms after %s, %.1f ms at it: %s (rule: the largest lag after the reference at most %d × the reference's + %v).",
				float64(v.MaxLag)/float64(time.Millisecond), at, float64(v.LagAtSettle)/float64(time.Millisecond), word(v.LagFlat, "flat", "not flat"), soakLagFactor, soakLagSlack),
			"Verdict: "+word(v.Pass, "pass", "fail")+".")
	} else {
		lines = append(lines, fmt.Sprintf("No verdict: no sample under load came after the one nearest the settle time, %v.", r.Settle))
	}
	if !r.Interrupted && len(r.Samples) > 0 {
		last := r.Samples[len(r.Samples)-1]
		drain := fmt.Sprintf("the relay published all %s events enqueued", thousands(float64(r.Enqueued)))
		if !v.Drained {
			drain = fmt.Sprintf("%s events were still unpublished %v after the load stopped", thousands(float64(last.Backlog)), soakDrainWait)
		}
		lines = append(lines, fmt.Sprintf("Drain: %s: %s; the history holds %s events, %s dead-lettered.",
			word(v.Drained, "drained", "not drained"), drain, thousands(float64(r.Published)), thousands(float64(r.DeadLettered))))
	} else if len(r.Samples) > 0 {
		lines = append(lines, fmt.Sprintf("Note: the soak was interrupted after minute %s; these are the samples taken so far.", minutes(r.Samples[len(r.Samples)-1].Elapsed)))
	}
	if r.Autovacuum == "off" {
		lines = append(lines, "Note: autovacuum is off on this PostgreSQL server: only the relay's own vacuums (the vacuums column) clean the queue.")
	}
	if r.Busy {
		lines = append(lines, fmt.Sprintf("Note: the machine was busy when the soak started (load average %.2f over the last minute, at least half the cores): other work competed for the cores, which can lower the enqueue rate and raise the lag.", r.LoadAverage))
	}
	return lines
}

// WriteText writes the report as plain text: what ran, a table of the
// samples, and the verdict.
func (r SoakReport) WriteText(w io.Writer) error {
	var b strings.Builder
	b.WriteString("soak: " + strings.ReplaceAll(r.description(), "\n", " ") + "\n\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(soakColumns, "\t")+"\t")
	for _, smp := range r.Samples {
		fmt.Fprintln(tw, strings.Join(sampleCells(smp), "\t")+"\t")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteByte('\n')
	for _, line := range r.verdictLines(strings.ToUpper) {
		b.WriteString(line + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteMarkdown writes the report as the section "## Soak" of a Markdown
// document.
func (r SoakReport) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	r.writeMarkdown(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

func (r SoakReport) writeMarkdown(b *strings.Builder) {
	b.WriteString("\n## Soak\n\n" + r.description() + "\n\n")
	b.WriteString("| " + strings.Join(soakColumns, " | ") + " |\n| --- |" + strings.Repeat(" ---: |", len(soakColumns)-1) + "\n")
	for _, smp := range r.Samples {
		b.WriteString("| " + strings.Join(sampleCells(smp), " | ") + " |\n")
	}
	b.WriteByte('\n')
	for _, line := range r.verdictLines(func(s string) string { return "**" + s + "**" }) {
		b.WriteString("- " + line + "\n")
	}
}
