package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/migrations"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// outboxTable is one configuration's own migrated outbox and topic.
type outboxTable struct {
	schema       string
	pool         *pgxpool.Pool // 8 connections, search_path set to schema
	out          *producer.Outbox
	topic        string
	topicCreated bool
	history      int // published events its history keeps across rounds
}

// table creates a schema holding a migrated outbox, and a topic of 12
// partitions.
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

// backlogRows is the SELECT list of the n events of a backlog, the same
// for every table and round: event g (from 1) has key order-<(g·7919) mod
// 1000>, a 200-byte JSON payload, and an id that grows with g, as the
// UUIDv7s Enqueue assigns do. $1 is the topic, $2 n, $3 the first id.
const backlogRows = `
SELECT lpad(to_hex($3::bigint + g), 32, '0')::uuid AS id, $1::text AS topic, k AS partition_key,
    'OrderCreated' AS event_type,
    convert_to(rpad(format('{"order_id":"%s","n":%s,"status":"created","note":"', k, g), 198, 'x') || '"}', 'UTF8') AS payload,
    'application/json' AS content_type
FROM generate_series(1, $2::bigint) AS g, LATERAL (SELECT 'order-' || ((g * 7919) % 1000)) AS x(k)
ORDER BY g`

// seed empties the outbox (but a history kept across rounds) and fills
// its queue with a backlog of n events.
func (t *outboxTable) seed(ctx context.Context, n int) error {
	if err := t.empty(ctx); err != nil {
		return err
	}
	return t.fill(ctx, n)
}

// empty empties the outbox's tables, but a history kept across rounds.
func (t *outboxTable) empty(ctx context.Context) error {
	empty := "TRUNCATE courier_outbox, courier_outbox_waiting, courier_outbox_dead"
	if t.history == 0 {
		empty += ", courier_outbox_published"
	}
	if _, err := t.pool.Exec(ctx, empty); err != nil {
		return fmt.Errorf("empty %s: %w", t.schema, err)
	}
	return nil
}

// fill writes a backlog of n events into the queue and ANALYZEs it, in one
// transaction that takes no lock a relay's would wait for: a relay that
// runs meanwhile finds the whole backlog at once.
func (t *outboxTable) fill(ctx context.Context, n int) error {
	err := pgx.BeginFunc(ctx, t.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO courier_outbox (id, topic, partition_key, event_type, payload, content_type)
			SELECT * FROM (`+backlogRows+`) b`, t.topic, n, int64(t.history)+1); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "ANALYZE courier_outbox")
		return err
	})
	if err != nil {
		return fmt.Errorf("seed %s: %w", t.schema, err)
	}
	return nil
}

// keepHistory gives the table n published events, today's, and planner
// statistics gathered (as autovacuum does) while nothing waited; later
// rounds keep them.
func (t *outboxTable) keepHistory(ctx context.Context, n int) error {
	_, err := t.pool.Exec(ctx, `INSERT INTO courier_outbox_published (seq, id, topic, partition_key, event_type, payload,
			content_type, created_at, retry_count, published_at)
		SELECT row_number() OVER (), b.*, now(), 0, now() FROM (`+backlogRows+`) b`, t.topic, n, 0)
	if err == nil {
		_, err = t.pool.Exec(ctx, "SELECT setval('courier_outbox_seq', $1)", n)
	}
	if err == nil {
		_, err = t.pool.Exec(ctx, "VACUUM ANALYZE courier_outbox_published")
	}
	if err != nil {
		return fmt.Errorf("give %s a history of %d events: %w", t.schema, n, err)
	}
	t.history = n
	return nil
}

// drained fails unless every event of the table is published.
func (t *outboxTable) drained(ctx context.Context) error {
	var n int
	err := t.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM courier_outbox) + (SELECT count(*) FROM courier_outbox_waiting)
		+ (SELECT count(*) FROM courier_outbox_dead)`).Scan(&n)
	if err != nil {
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
// and broker and drains the same backlogs (same events, same order); a
// backlog is written and ANALYZEd before the clock starts, so every drain
// runs with plans made for a backlog.
//
// The configurations take turns: each round drains each backlog with every
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
	name     string
	baseline string // the name of the case its rates compare with
	target   float64
	backlogs []int // the backlogs it drains; all of the config's when nil
	table    *outboxTable
	// drain seeds a backlog of n, drains it with cpu open over the
	// draining, checks it is drained, and returns how long the drain took.
	drain  func(ctx context.Context, n int, cpu *cpuWindow) (time.Duration, error)
	spent  map[int][]time.Duration // draining, each round, by backlog
	cpu    map[int][]cpuWindow     // the CPU counters around each round's drain, by backlog
	claims map[int]*atomic.Int64   // claims made, for the relay, by backlog
	stages map[int]*stageSums      // the relay's batch stages, by backlog
}

// NewThroughputRun validates cfg, applies its defaults, and makes every
// configuration's table, topic and producers. Close drops and closes them.
func NewThroughputRun(ctx context.Context, cfg RelayConfig) (*ThroughputRun, error) {
	svc, err := openRelayServices(ctx, cfg, "drain")
	if err != nil {
		return nil, err
	}
	run := &ThroughputRun{svc: svc}
	add := func(c *drainCase, err error) error {
		if err != nil {
			return errors.Join(fmt.Errorf("%s: %w", c.name, err), svc.close())
		}
		c.spent, c.cpu, c.claims, c.stages = map[int][]time.Duration{}, map[int][]cpuWindow{}, map[int]*atomic.Int64{}, map[int]*stageSums{}
		run.drains = append(run.drains, c)
		return nil
	}
	for _, p := range []struct {
		workers int
		keep    bool
	}{{producer.DefaultWorkers, false}, {1, false}, {producer.DefaultWorkers, true}} {
		if err := add(plainDrain(ctx, svc, p.workers, p.keep)); err != nil {
			return nil, err
		}
	}
	defaults := relayConfig{workers: producer.DefaultWorkers}
	relays := []relayCase{
		{name: RelayDefaults, relays: 1, rc: defaults, baseline: PlainLoopKeep, target: 1.2},
		{name: RelayDiscard, relays: 1, rc: relayConfig{workers: producer.DefaultWorkers, discard: true}, baseline: PlainLoop, target: 1.2},
		{name: "relay/workers=1", relays: 1, rc: relayConfig{workers: 1}, baseline: PlainLoopKeep},
		{name: "relay/workers=2", relays: 1, rc: relayConfig{workers: 2}, baseline: PlainLoopKeep},
		{name: "relay/relays=2", relays: 2, rc: defaults, baseline: PlainLoopKeep},
		{name: RelayTraced, relays: 1, rc: defaults, baseline: RelayDefaults},
	}
	// wanted reports whether the configuration name runs: every one when
	// Only is empty, else the plain loops, those Only names and their
	// baselines, and the history drain and its baseline whenever History
	// asks for them.
	historyName := fmt.Sprintf("%s/history=%s", RelayDefaults, thousands(float64(cfg.History)))
	wanted := func(name string) bool {
		if len(cfg.Only) == 0 || strings.HasPrefix(name, "plain-") || slices.Contains(cfg.Only, name) ||
			cfg.History > 0 && (name == historyName || name == RelayDefaults) {
			return true
		}
		return slices.ContainsFunc(relays, func(c relayCase) bool { return c.baseline == name && slices.Contains(cfg.Only, c.name) })
	}
	for _, c := range relays {
		if !wanted(c.name) {
			continue
		}
		if c.name == RelayTraced {
			c.rc.tracer = svc.tracer()
		}
		if err := add(relayDrain(ctx, svc, c.name, c.relays, c.rc, c.baseline, c.target)); err != nil {
			return nil, err
		}
	}
	if cfg.History > 0 {
		c, err := relayDrain(ctx, svc, historyName, 1, defaults, RelayDefaults, 0.9)
		if err == nil {
			progress(cfg.Progress, "relay throughput: writing a history of %d published events", cfg.History)
			err = c.table.keepHistory(ctx, cfg.History)
		}
		c.backlogs = cfg.Backlogs[:1]
		if err := add(c, err); err != nil {
			return nil, err
		}
	}
	return run, nil
}

// Round drains each backlog with every configuration, starting one further
// along the list than the round before.
func (r *ThroughputRun) Round(ctx context.Context) error {
	for _, n := range r.svc.cfg.Backlogs {
		for i := range r.drains {
			c := r.drains[(r.rounds+i)%len(r.drains)]
			if c.backlogs != nil && !slices.Contains(c.backlogs, n) {
				continue
			}
			var cpu cpuWindow
			took, err := c.drain(ctx, n, &cpu)
			if err != nil {
				return fmt.Errorf("%s, %d events: %w", c.name, n, err)
			}
			c.spent[n], c.cpu[n] = append(c.spent[n], took), append(c.cpu[n], cpu)
		}
	}
	r.rounds++
	return nil
}

// Report is the figures of the rounds so far, by backlog, each
// configuration beside its baseline, with no latency results.
func (r *ThroughputRun) Report() RelayReport {
	cfg := r.svc.cfg
	report := RelayReport{PostgreSQL: r.svc.version, Backlogs: cfg.Backlogs, History: cfg.History, Rounds: r.rounds,
		LatencyRates: cfg.LatencyRates, LatencyDuration: cfg.LatencyDuration}
	for _, n := range cfg.Backlogs {
		rates := map[string]float64{}
		for _, c := range r.drains {
			if spent, ok := c.spent[n]; ok {
				rates[c.name] = MedianRate(n, spent)
			}
		}
		for _, c := range r.drains {
			rate, ok := rates[c.name]
			if !ok {
				continue
			}
			res := ThroughputResult{Name: fmt.Sprintf("%s/events=%s", c.name, thousands(float64(n))), Events: n, Rate: rate,
				Baseline: fmt.Sprintf("%s/events=%s", c.baseline, thousands(float64(n))), Target: c.target}
			if base := rates[c.baseline]; base > 0 {
				res.Ratio = rate / base
			}
			if claims := c.claims[n]; claims != nil && r.rounds > 0 {
				res.ClaimsPerDrain = float64(claims.Load()) / float64(r.rounds)
			}
			res.CPUBusy, res.CPUMicrosPerEvent = cpuOf(c.cpu[n], n)
			if sums := c.stages[n]; sums != nil {
				res.Stages = sums.means()
			}
			report.Throughput = append(report.Throughput, res)
		}
	}
	return report
}

// Close closes the producers and pools and drops the schemas and topics.
func (r *ThroughputRun) Close() error { return r.svc.close() }

// cpuOf is the median share of the machine's CPU busy over windows, and
// of its CPU time per event of n drained in each.
func cpuOf(windows []cpuWindow, n int) (busy, microsPerEvent float64) {
	var shares, micros []float64
	for _, w := range windows {
		if share := w.machineBusyShare(); share > 0 {
			shares, micros = append(shares, share), append(micros, w.machineMicrosPer(n))
		}
	}
	if len(shares) == 0 {
		return 0, 0
	}
	return median(shares), median(micros)
}

// leanTable is what a team would write for a hand-made outbox: a primary
// key and the event, no order kept, no retry state; with keepColumns, it
// keeps what it sent, marked with published_at, and a partial index finds
// the rest.
const (
	leanTable = `
CREATE TABLE lean_outbox (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id      uuid        NOT NULL,
    topic         text        NOT NULL,
    partition_key text,
    event_type    text        NOT NULL,
    payload       bytea       NOT NULL,
    content_type  text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now()`
	keepColumns = `,
    published_at  timestamptz);
CREATE INDEX lean_outbox_unpublished ON lean_outbox (id) WHERE published_at IS NULL`
)

// plainLoop is the statements of a plain loop, which deletes or keeps what
// it sent.
type plainLoop struct{ claim, settle string }

var (
	plainDelete = plainLoop{
		claim: `
SELECT id, event_id, topic, partition_key, event_type, payload, content_type, created_at
FROM lean_outbox
ORDER BY id
LIMIT $1
FOR UPDATE SKIP LOCKED`,
		settle: `DELETE FROM lean_outbox WHERE id = ANY($1)`,
	}
	plainKeep = plainLoop{
		claim: `
SELECT id, event_id, topic, partition_key, event_type, payload, content_type, created_at
FROM lean_outbox
WHERE published_at IS NULL
ORDER BY id
LIMIT $1
FOR UPDATE SKIP LOCKED`,
		settle: `UPDATE lean_outbox SET published_at = now() WHERE id = ANY($1)`,
	}
)

// plainDrain is a baseline: workers goroutines, each on its own connection
// and Sarama producer, repeat SELECT … ORDER BY id LIMIT 1000 FOR UPDATE
// SKIP LOCKED on the lean table, SendMessages, DELETE (or, with keep,
// UPDATE … SET published_at) of the rows sent and COMMIT until nothing is
// left. It sends the same records as the relay (payload, key and the
// CloudEvents binary-mode headers), so both put the same bytes on the
// broker.
func plainDrain(ctx context.Context, svc *relayServices, workers int, keep bool) (*drainCase, error) {
	c := &drainCase{name: fmt.Sprintf("plain-skip-locked-loop/delete/workers=%d", workers), baseline: PlainLoop}
	ddl, loop := leanTable+")", plainDelete
	if keep {
		c.name, c.baseline = fmt.Sprintf("plain-skip-locked-loop/keep/workers=%d", workers), PlainLoopKeep
		ddl, loop = leanTable+keepColumns, plainKeep
	}
	table, err := svc.table(ctx)
	if err != nil {
		return c, err
	}
	c.table = table
	if _, err := table.pool.Exec(ctx, ddl); err != nil {
		return c, err
	}
	producers := make([]sarama.SyncProducer, workers)
	for i := range producers {
		sp, err := sarama.NewSyncProducer(svc.cfg.Brokers, producer.NewSaramaConfig())
		if err != nil {
			return c, err
		}
		svc.closers = append(svc.closers, sp.Close)
		if _, _, err := sp.SendMessage(&sarama.ProducerMessage{Topic: table.topic, Value: sarama.StringEncoder("warm-up")}); err != nil {
			return c, err
		}
		producers[i] = sp
	}
	seed := func(ctx context.Context, n int) error {
		_, err := table.pool.Exec(ctx, "TRUNCATE lean_outbox")
		if err == nil {
			_, err = table.pool.Exec(ctx, `INSERT INTO lean_outbox (event_id, topic, partition_key, event_type, payload, content_type)
				SELECT * FROM (`+backlogRows+`) b`, table.topic, n, 1)
		}
		if err == nil {
			_, err = table.pool.Exec(ctx, "ANALYZE lean_outbox")
		}
		return err
	}
	c.drain = func(ctx context.Context, n int, cpu *cpuWindow) (time.Duration, error) {
		if err := seed(ctx, n); err != nil {
			return 0, err
		}
		cpu.start()
		start := time.Now()
		var wg sync.WaitGroup
		published := make([]int, workers)
		errs := make([]error, workers)
		for w := range workers {
			wg.Go(func() { published[w], errs[w] = plainWorker(ctx, table.pool, producers[w], loop) })
		}
		wg.Wait()
		elapsed := time.Since(start)
		cpu.stop()
		if err := errors.Join(errs...); err != nil {
			return 0, err
		}
		total := 0
		for _, p := range published {
			total += p
		}
		if total != n {
			return 0, fmt.Errorf("the plain loop published %d events, want %d", total, n)
		}
		return elapsed, nil
	}
	return c, nil
}

// plainWorker runs plain batches until one finds nothing.
func plainWorker(ctx context.Context, pool *pgxpool.Pool, sp sarama.SyncProducer, loop plainLoop) (int, error) {
	total := 0
	for {
		n, err := plainBatch(ctx, pool, sp, loop)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

// plainBatch claims, sends and settles one batch in one transaction and
// returns its size.
func plainBatch(ctx context.Context, pool *pgxpool.Pool, sp sarama.SyncProducer, loop plainLoop) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, loop.claim, plainLimit)
		if err != nil {
			return err
		}
		ids := make([]int64, 0, plainLimit)
		msgs := make([]*sarama.ProducerMessage, 0, plainLimit)
		for rows.Next() {
			var (
				id                int64
				eventID           uuid.UUID
				topic, typ, ctype string
				key               pgtype.Text
				payload           []byte
				createdAt         time.Time
			)
			if err := rows.Scan(&id, &eventID, &topic, &key, &typ, &payload, &ctype, &createdAt); err != nil {
				rows.Close()
				return err
			}
			msg := &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(payload),
				Headers: cloudEventHeaders(eventID, typ, ctype, createdAt)}
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
		if _, err := tx.Exec(ctx, loop.settle, ids); err != nil {
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

// relayCase is a configuration of the relay that drains a backlog beside
// its baseline; target is the ratio the goal asks for (0: none).
type relayCase struct {
	name     string
	relays   int
	rc       relayConfig
	baseline string
	target   float64
}

// relayDrain drains the backlog with relays relays configured as rc says,
// with the default batch size (see drainWith). Each relay has its own
// Sarama producer, connected beforehand, as the plain loop's are. target is
// the ratio to baseline the goal asks for (0: none).
func relayDrain(ctx context.Context, svc *relayServices, name string, relays int, rc relayConfig, baseline string, target float64) (*drainCase, error) {
	c := &drainCase{name: name, baseline: baseline, target: target}
	table, err := svc.table(ctx)
	if err != nil {
		return c, err
	}
	c.table = table
	pubs, err := warmPublishers(ctx, svc, table.topic, relays)
	if err != nil {
		return c, err
	}
	c.drain = func(ctx context.Context, n int, cpu *cpuWindow) (time.Duration, error) {
		if c.claims[n] == nil {
			c.claims[n], c.stages[n] = &atomic.Int64{}, &stageSums{}
		}
		rc := rc
		rc.started, rc.stages = cpu.start, c.stages[n]
		took, err := drainWith(ctx, []*pgxpool.Pool{table.pool}, table, pubs, rc, n, svc.cfg.Logger, c.claims[n])
		cpu.stop()
		return took, err
	}
	return c, nil
}

// warmPublishers returns n Sarama publishers, each connected to the broker
// by a first record on topic; the run closes them.
func warmPublishers(ctx context.Context, svc *relayServices, topic string, n int) ([]record.Publisher, error) {
	pubs := make([]record.Publisher, n)
	for i := range pubs {
		pub, err := producer.NewSaramaPublisher(svc.cfg.Brokers, producer.NewSaramaConfig())
		if err != nil {
			return nil, err
		}
		svc.closers = append(svc.closers, pub.Close)
		warm := []*record.Record{{Topic: topic, Value: []byte("warm-up")}}
		if err := pub.Publish(ctx, warm)[0]; err != nil {
			return nil, err
		}
		pubs[i] = pub
	}
	return pubs, nil
}

// relayConfig is what drainWith sets of each relay's configuration.
type relayConfig struct {
	workers int
	discard bool                 // DiscardPublished, else the history keeps them
	tracer  trace.TracerProvider // TracerProvider; nil: none
	started func()               // when set, called as the clock starts
	stages  *stageSums           // when set, hears of every batch's stages
}

// hooks are the relays' hooks: counter, and the stages' when set.
func (rc relayConfig) hooks(counter *drainCounter) []producer.Hook {
	if rc.stages == nil {
		return []producer.Hook{counter}
	}
	return []producer.Hook{counter, rc.stages}
}

func (rc relayConfig) atStart() {
	if rc.started != nil {
		rc.started()
	}
}

// drainWith seeds table with a backlog of n events and drains it with one
// relay per publisher, each of rc's workers and rc's history, relay i on
// pools[i mod len(pools)], and returns how long the drain took; claims
// counts the claims the drain made. One relay of one worker is driven by
// RunOnce in a loop from the seed until a claim finds nothing. Otherwise
// the relays run, as a service's relays do, before the backlog exists:
// they have connected, looked once and found nothing; the seed commits the
// whole backlog at once, the relays are woken, and the clock runs from
// that commit until the last event is recorded as published.
func drainWith(ctx context.Context, pools []*pgxpool.Pool, table *outboxTable, pubs []record.Publisher, rc relayConfig, n int,
	logger *slog.Logger, claims *atomic.Int64,
) (time.Duration, error) {
	workers := rc.workers
	counter := &drainCounter{target: int64(n), done: make(chan struct{})}
	rs := make([]*producer.Relay, len(pubs))
	for i := range rs {
		r, err := producer.NewRelay(pools[i%len(pools)], producer.RelayConfig{
			Schema: table.schema, Publisher: pubs[i], Workers: workers, DiscardPublished: rc.discard, Logger: logger, Hooks: rc.hooks(counter),
			TracerProvider: rc.tracer,
		})
		if err != nil {
			return 0, err
		}
		rs[i] = r
	}
	if len(rs) == 1 && workers == 1 {
		if err := table.seed(ctx, n); err != nil {
			return 0, err
		}
		defer func() { claims.Add(counter.claims.Load()) }()
		rc.atStart()
		start := time.Now()
		for {
			res, err := rs[0].RunOnce(ctx)
			if err != nil {
				return 0, err
			}
			if res.Claimed == 0 {
				break
			}
		}
		return time.Since(start), counter.check(ctx, table, n)
	}
	if err := table.empty(ctx); err != nil {
		return 0, err
	}
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
	for counter.claims.Load() < int64(len(rs)*workers) { // each worker's first claim, of nothing
		select {
		case err := <-failed:
			return 0, fmt.Errorf("a relay stopped: %w", err)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
	if err := table.fill(ctx, n); err != nil {
		return 0, err
	}
	rc.atStart()
	start, warmClaims := time.Now(), counter.claims.Load()
	defer func() { claims.Add(counter.claims.Load() - warmClaims) }()
	for _, r := range rs {
		r.Wake()
	}
	// Published is reported once a batch's outcome is committed.
	select {
	case <-counter.done:
	case err := <-failed:
		return 0, fmt.Errorf("a relay stopped: %w", err)
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(deadline):
		return 0, fmt.Errorf("the relays published %d of %d events in %v", counter.published.Load(), n, deadline)
	}
	return time.Since(start), counter.check(ctx, table, n)
}

// check reports an error unless the drain published n events and left
// table's queue empty.
func (c *drainCounter) check(ctx context.Context, table *outboxTable, n int) error {
	if got := c.published.Load(); got != int64(n) {
		return fmt.Errorf("the relays published %d events, want %d", got, n)
	}
	return table.drained(ctx)
}

// drainCounter is a relay hook (a producer.ClaimedHook and
// PublishedHook) that counts claims and publishes and closes done when
// target events are published.
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

// cloudEventHeaders are the CloudEvents binary-mode headers the relay puts
// on an event's record, for the baselines that send records themselves.
func cloudEventHeaders(id uuid.UUID, typ, contentType string, at time.Time) []sarama.RecordHeader {
	return []sarama.RecordHeader{
		header(producer.HeaderSpecVersion, "1.0"),
		header(producer.HeaderID, id.String()),
		header(producer.HeaderType, typ),
		header(producer.HeaderSource, producer.DefaultSource),
		header(producer.HeaderTime, at.UTC().Format(time.RFC3339Nano)),
		header(producer.HeaderContentType, contentType),
	}
}
