package producer_test

// Benchmarks of the relay, each beside a baseline measured in the same run on
// the same PostgreSQL and the same broker (STYLE 13: figures, not asserted
// wall-clock times). They need PostgreSQL (COURIER_TEST_DATABASE_URL) and use
// an in-process kfake broker unless COURIER_TEST_KAFKA_BROKERS names a
// cluster. They never run in a plain `go test`; run them with
//
//	go test -run '^$' -bench . -benchtime 1x ./producer/
//
// -benchtime 1x drains one backlog per throughput configuration and runs
// one paced phase per latency sub-benchmark: about 45s in all on two cores.
// -benchtime 5x drains five backlogs per configuration, the configurations
// taking turns (about 2 minutes): use it for figures. Anything else loading
// the machine (another go test) moves the figures.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/internal/bench"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

const (
	benchEvents      = 20_000 // backlog one throughput iteration drains
	benchKeys        = 1_000  // distinct partition keys
	benchPayloadSize = 200    // bytes of JSON per event
	benchPartitions  = 12
	benchSeedChunk   = 1_000 // events per EnqueueBatch while seeding
	benchPlainLimit  = 1_000 // LIMIT of the plain loop's SELECT

	benchLatencyRate     = 1_000 // events/s enqueued by the latency benchmark
	benchLatencyDuration = 5 * time.Second
	benchEnqueuers       = 16               // goroutines enqueueing one event per transaction
	benchArrivalWait     = 20 * time.Second // for the last events, after the last enqueue
)

// BenchmarkRelayThroughput drains a backlog of benchEvents events with the
// relay in several configurations and, as the baseline, with a plain SKIP
// LOCKED loop that keeps no per-key order, and prints events/s for each
// beside the baseline's. Every configuration has its own schema and topic on
// the same PostgreSQL and broker and drains the same backlog (same keys,
// same order); the backlog is enqueued and ANALYZEd before the clock starts,
// so every drain runs with plans made for a backlog (the relay's claim is
// far slower with statistics gathered while nothing waited;
// BenchmarkRelayLatency/poll-only shows that).
//
// The configurations take turns: each iteration drains one backlog with
// every one of them, starting one further along the list each time. On a
// shared machine whose speed drifts over minutes, that compares them at the
// same moments, where one sub-benchmark after another would not. A
// configuration's rate is its events over its median drain time.
func BenchmarkRelayThroughput(b *testing.B) {
	k := testkit.NewKafka(b)
	cases := []*throughputCase{plainCase(b, k, 2), plainCase(b, k, 1)}
	for _, c := range []struct{ relays, workers, batch int }{
		{1, 1, producer.DefaultBatchSize}, {1, 1, 500},
		{1, producer.DefaultWorkers, producer.DefaultBatchSize}, {1, producer.DefaultWorkers, 500},
		{1, 4, producer.DefaultBatchSize},
		{2, producer.DefaultWorkers, producer.DefaultBatchSize},
	} {
		cases = append(cases, relayCase(b, k, c.relays, c.workers, c.batch))
	}
	round := 0
	for b.Loop() {
		for i := range cases {
			c := cases[(round+i)%len(cases)]
			b.StopTimer()
			c.tbl.seed(b, benchEvents)
			b.StartTimer()
			c.spent = append(c.spent, c.drain(b))
		}
		round++
	}
	results := &testkit.Rates{Unit: "events/s"}
	for _, c := range cases {
		results.Set(c.name, bench.MedianRate(benchEvents, c.spent))
		if c.claims != nil {
			results.Note(c.name, fmt.Sprintf("%.1f claims per drain", float64(c.claims.Load())/float64(round)))
		}
	}
	b.ReportMetric(0, "ns/op") // the sum of every drain: meaningless
	results.Print(os.Stdout, fmt.Sprintf("events/s draining %d events over %d keys, %d drains each, taking turns, same PostgreSQL and broker:",
		benchEvents, benchKeys, round), func(string) string { return cases[0].name })
}

// throughputCase is one way of draining the backlog of its table.
type throughputCase struct {
	name   string
	tbl    *benchTable
	drain  func(b *testing.B) time.Duration // drains tbl's backlog, checks it is drained, returns how long it took
	spent  []time.Duration                  // draining, each iteration
	claims *atomic.Int64                    // claims made, for the relay
}

// plainCase is the baseline: workers goroutines, each on its own
// connection and Sarama producer, repeat SELECT … ORDER BY seq LIMIT 1000
// FOR UPDATE SKIP LOCKED, SendMessages, UPDATE … SET status='published' and
// COMMIT until nothing is left. It sends the same records as the relay
// (payload, key and the CloudEvents binary-mode headers), so both put the
// same bytes on the broker.
func plainCase(b *testing.B, k *testkit.Kafka, workers int) *throughputCase {
	tbl := newBenchTable(b, k)
	producers := make([]sarama.SyncProducer, workers)
	for i := range producers {
		sp, err := sarama.NewSyncProducer(k.Brokers, producer.NewSaramaConfig())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sp.Close() })
		if _, _, err := sp.SendMessage(&sarama.ProducerMessage{Topic: tbl.topic, Value: sarama.StringEncoder("warm-up")}); err != nil {
			b.Fatal(err)
		}
		producers[i] = sp
	}
	return &throughputCase{name: "plain-skip-locked-loop/workers=" + fmt.Sprint(workers), tbl: tbl, drain: func(b *testing.B) time.Duration {
		start := time.Now()
		var wg sync.WaitGroup
		published := make([]int, workers)
		errs := make([]error, workers)
		for w := range workers {
			wg.Go(func() { published[w], errs[w] = benchPlainWorker(context.Background(), tbl.pool, producers[w]) })
		}
		wg.Wait()
		elapsed := time.Since(start)
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		if n := benchSum(published); n != benchEvents {
			b.Fatalf("the plain loop published %d events, want %d", n, benchEvents)
		}
		tbl.assertDrained(b)
		return elapsed
	}}
}

const (
	benchPlainClaimSQL = `
SELECT id, topic, partition_key, event_type, payload, content_type, created_at
FROM courier_outbox
WHERE status = 'pending'
ORDER BY seq
LIMIT $1
FOR UPDATE SKIP LOCKED`
	benchPlainSettleSQL = `UPDATE courier_outbox SET status = 'published', published_at = now() WHERE id = ANY($1)`
)

// benchPlainWorker runs plain batches until one finds nothing.
func benchPlainWorker(ctx context.Context, pool *pgxpool.Pool, sp sarama.SyncProducer) (int, error) {
	total := 0
	for {
		n, err := benchPlainBatch(ctx, pool, sp)
		total += n
		if err != nil || n == 0 {
			return total, err
		}
	}
}

func benchPlainBatch(ctx context.Context, pool *pgxpool.Pool, sp sarama.SyncProducer) (int, error) {
	n := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, benchPlainClaimSQL, benchPlainLimit)
		if err != nil {
			return err
		}
		ids := make([]uuid.UUID, 0, benchPlainLimit)
		msgs := make([]*sarama.ProducerMessage, 0, benchPlainLimit)
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
				benchHeader(producer.HeaderSpecVersion, "1.0"),
				benchHeader(producer.HeaderID, id.String()),
				benchHeader(producer.HeaderType, typ),
				benchHeader(producer.HeaderSource, producer.DefaultSource),
				benchHeader(producer.HeaderTime, createdAt.UTC().Format(time.RFC3339Nano)),
				benchHeader(producer.HeaderContentType, ctype),
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
		if _, err := tx.Exec(ctx, benchPlainSettleSQL, ids); err != nil {
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

func benchHeader(name, value string) sarama.RecordHeader {
	return sarama.RecordHeader{Key: []byte(name), Value: []byte(value)}
}

// relayCase drains the backlog with relays relays of BatchSize batch: one
// relay of one worker is driven by RunOnce in a loop until a claim finds
// nothing; otherwise the relays run Run side by side (NOTIFY on), like
// processes, and the drain ends when the last event is recorded as
// published. Each relay has its own Sarama producer, connected beforehand,
// as the plain loop's are.
func relayCase(b *testing.B, k *testkit.Kafka, relays, workers, batch int) *throughputCase {
	tbl := newBenchTable(b, k)
	ctx := context.Background()
	pubs := make([]producer.Publisher, relays)
	for i := range pubs {
		pub, err := producer.NewSaramaPublisher(k.Brokers, producer.NewSaramaConfig())
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = pub.Close() })
		warm := []*sarama.ProducerMessage{{Topic: tbl.topic, Value: sarama.StringEncoder("warm-up")}}
		if err := pub.Publish(ctx, warm)[0]; err != nil {
			b.Fatal(err)
		}
		pubs[i] = pub
	}
	c := &throughputCase{name: fmt.Sprintf("relay/relays=%d/workers=%d/batch=%d", relays, workers, batch), tbl: tbl,
		claims: &atomic.Int64{}}
	c.drain = func(b *testing.B) time.Duration {
		counter := &benchCounter{target: benchEvents, done: make(chan struct{})}
		rs := make([]*producer.Relay, relays)
		for i := range rs {
			r, err := producer.NewRelay(tbl.pool, producer.RelayConfig{
				Schema: tbl.pg.Schema, Publisher: pubs[i], BatchSize: batch, Workers: workers,
				Logger: testkit.Logger(b), Metrics: counter,
			})
			if err != nil {
				b.Fatal(err)
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
					b.Fatal(err)
				}
				if res.Claimed == 0 {
					break
				}
			}
			elapsed = time.Since(start)
		} else {
			runCtx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			for _, r := range rs {
				wg.Go(func() { _ = r.Run(runCtx) })
			}
			defer func() { cancel(); wg.Wait() }()
			// Published is reported once a batch's outcome is committed.
			select {
			case <-counter.done:
			case <-time.After(2 * time.Minute):
				b.Fatalf("the relays published %d of %d events in 2 minutes", counter.published.Load(), benchEvents)
			}
			elapsed = time.Since(start)
		}
		if n := counter.published.Load(); n != benchEvents {
			b.Fatalf("the relays published %d events, want %d", n, benchEvents)
		}
		tbl.assertDrained(b)
		return elapsed
	}
	return c
}

// benchCounter is a RelayMetrics that counts claims and publishes and closes
// done when target events are published.
type benchCounter struct {
	target    int64
	done      chan struct{}
	published atomic.Int64
	claims    atomic.Int64
}

func (c *benchCounter) Claimed(int) { c.claims.Add(1) }

func (c *benchCounter) Published(string, time.Duration) {
	if c.published.Add(1) == c.target {
		close(c.done)
	}
}
func (c *benchCounter) PublishFailed(string, string)         {}
func (c *benchCounter) DeadLettered(string)                  {}
func (c *benchCounter) BreakerChanged(producer.BreakerState) {}
func (c *benchCounter) Backlog(int64, time.Duration)         {}

// BenchmarkRelayLatency measures enqueue-to-arrival latency: one relay runs
// with Run while benchEnqueuers goroutines enqueue one event per
// transaction at benchLatencyRate events/s for benchLatencyDuration, and a
// Sarama consumer reads the topic. An event's latency is the time it
// arrived at the consumer minus the time its enqueue returned (its commit).
// "notify" keeps the default PollInterval of 1s, so latencies well under 1s
// come from NOTIFY; "poll-only" polls every 100ms, for contrast. The table
// starts as one in service does: benchEvents events already published and
// planner statistics gathered while nothing waited.
func BenchmarkRelayLatency(b *testing.B) {
	k := testkit.NewKafka(b)
	b.Run("notify/poll-interval=1s", func(b *testing.B) {
		benchLatency(b, k, producer.RelayConfig{})
	})
	b.Run("poll-only/poll-interval=100ms", func(b *testing.B) {
		benchLatency(b, k, producer.RelayConfig{PollOnly: true, PollInterval: 100 * time.Millisecond})
	})
}

func benchLatency(b *testing.B, k *testkit.Kafka, cfg producer.RelayConfig) {
	tbl := newBenchTable(b, k)
	tbl.history(b, benchEvents)
	enqueuePool := tbl.pg.NewPool(b, benchEnqueuers)
	cons := startBenchConsumer(b, k, tbl.topic)
	defer cons.stop()

	cfg.Schema, cfg.Brokers, cfg.Logger = tbl.pg.Schema, k.Brokers, testkit.Logger(b)
	relay, err := producer.NewRelay(tbl.pool, cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- relay.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-runDone; err != nil {
			b.Errorf("Run returned %v", err)
		}
	}()

	// Warm up: connections, metadata, the consumer's first fetch.
	var warm []uuid.UUID
	for i := range 20 {
		ev := benchEvent(tbl.topic, i, fmt.Sprintf("warm-%d", i))
		res, err := tbl.out.Enqueue(ctx, enqueuePool, ev)
		if err != nil {
			b.Fatal(err)
		}
		warm = append(warm, res.ID)
	}
	cons.waitFor(b, warm, 30*time.Second)

	var latencies []time.Duration
	var rates []float64
	missing := 0
	for b.Loop() {
		lat, rate, late := benchPaced(b, tbl, enqueuePool, cons)
		latencies = append(latencies, lat...)
		rates = append(rates, rate)
		missing += late
	}
	slices.Sort(latencies)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(benchPercentile(latencies, 0.50)), "p50-ms")
	b.ReportMetric(ms(benchPercentile(latencies, 0.99)), "p99-ms")
	b.ReportMetric(ms(latencies[len(latencies)-1]), "max-ms")
	b.ReportMetric(slices.Min(rates), "enqueued/s")
	b.ReportMetric(float64(missing)/float64(b.N), "unarrived/op")
	if missing > 0 {
		b.Logf("%d events had not arrived %v after the last enqueue: the relay fell behind; their latencies count as that wait, so the figures are lower bounds",
			missing, benchArrivalWait)
	}
	if slowest := slices.Min(rates); slowest < 0.95*benchLatencyRate {
		b.Logf("enqueued only %.0f events/s of the %d asked for: PostgreSQL or the CPU is saturated (is something else running?), so the latencies are not at that rate",
			slowest, benchLatencyRate)
	}
	b.ReportMetric(0, "ns/op")
}

// benchPaced enqueues benchLatencyRate·benchLatencyDuration events, one per
// transaction, paced on a 1ms ticker (several per tick when ticks run late),
// waits up to benchArrivalWait for all of them at the consumer and returns
// their latencies, the enqueue rate achieved and how many never arrived (their
// latency is counted as the time waited for them).
func benchPaced(b *testing.B, tbl *benchTable, pool *pgxpool.Pool, cons *benchConsumer) ([]time.Duration, float64, int) {
	b.Helper()
	ctx := context.Background()
	n := int(benchLatencyRate * benchLatencyDuration.Seconds())
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	committed := make([]time.Time, n)
	errs := make([]error, benchEnqueuers)
	jobs := make(chan int, n)
	var wg sync.WaitGroup
	for w := range benchEnqueuers {
		wg.Go(func() {
			for i := range jobs {
				ev := benchEvent(tbl.topic, i, fmt.Sprintf("order-%d", rand.IntN(benchKeys)))
				ev.ID = ids[i]
				if _, err := tbl.out.Enqueue(ctx, pool, ev); err != nil && errs[w] == nil {
					errs[w] = err
				}
				committed[i] = time.Now()
			}
		})
	}
	interval := time.Second / benchLatencyRate
	ticker := time.NewTicker(time.Millisecond)
	start := time.Now()
	for sent := 0; sent < n; {
		due := min(n, int(time.Since(start)/interval)+1)
		for ; sent < due; sent++ {
			jobs <- sent
		}
		<-ticker.C
	}
	ticker.Stop()
	close(jobs)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	rate := float64(n) / slices.MaxFunc(committed, time.Time.Compare).Sub(start).Seconds()
	arrived, missing := cons.collect(ids, benchArrivalWait)
	gaveUp := time.Now()
	lat := make([]time.Duration, n)
	for i := range ids {
		if arrived[i].IsZero() {
			arrived[i] = gaveUp
		}
		lat[i] = arrived[i].Sub(committed[i])
	}
	return lat, rate, missing
}

func benchPercentile(sorted []time.Duration, q float64) time.Duration {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// benchConsumer records when each event, by ce_id, first arrives.
type benchConsumer struct {
	client   sarama.Client
	consumer sarama.Consumer
	pcs      []sarama.PartitionConsumer
	wg       sync.WaitGroup

	mu      sync.Mutex
	arrived map[uuid.UUID]time.Time
}

func startBenchConsumer(b *testing.B, k *testkit.Kafka, topic string) *benchConsumer {
	b.Helper()
	client, err := sarama.NewClient(k.Brokers, k.Config())
	if err != nil {
		b.Fatal(err)
	}
	c := &benchConsumer{client: client, arrived: map[uuid.UUID]time.Time{}}
	if c.consumer, err = sarama.NewConsumerFromClient(client); err != nil {
		_ = client.Close()
		b.Fatal(err)
	}
	partitions, err := c.consumer.Partitions(topic)
	if err != nil {
		c.stop()
		b.Fatal(err)
	}
	for _, p := range partitions {
		pc, err := c.consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			c.stop()
			b.Fatal(err)
		}
		c.pcs = append(c.pcs, pc)
		c.wg.Go(func() {
			for m := range pc.Messages() {
				now := time.Now()
				for _, h := range m.Headers {
					if string(h.Key) != producer.HeaderID {
						continue
					}
					if id, err := uuid.ParseBytes(h.Value); err == nil {
						c.mu.Lock()
						if _, seen := c.arrived[id]; !seen {
							c.arrived[id] = now
						}
						c.mu.Unlock()
					}
				}
			}
		})
	}
	return c
}

// waitFor waits until every id arrived and returns their arrival times.
func (c *benchConsumer) waitFor(b *testing.B, ids []uuid.UUID, timeout time.Duration) []time.Time {
	b.Helper()
	times, missing := c.collect(ids, timeout)
	if missing > 0 {
		b.Fatalf("%d of %d events had not arrived after %v", missing, len(ids), timeout)
	}
	return times
}

// collect waits up to timeout for every id to arrive and returns their
// arrival times (zero for those that did not) and how many did not.
func (c *benchConsumer) collect(ids []uuid.UUID, timeout time.Duration) ([]time.Time, int) {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		times := make([]time.Time, len(ids))
		missing := 0
		for i, id := range ids {
			t, ok := c.arrived[id]
			if !ok {
				missing++
			}
			times[i] = t
		}
		c.mu.Unlock()
		if missing == 0 || time.Now().After(deadline) {
			return times, missing
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (c *benchConsumer) stop() {
	for _, pc := range c.pcs {
		pc.AsyncClose() // closes its Messages channel
	}
	c.wg.Wait()
	if c.consumer != nil {
		_ = c.consumer.Close()
	}
	_ = c.client.Close()
}

// benchTable is a sub-benchmark's own migrated schema and topic.
type benchTable struct {
	pg    *testkit.PG
	pool  *pgxpool.Pool
	out   *producer.Outbox
	topic string
}

func newBenchTable(b *testing.B, k *testkit.Kafka) *benchTable {
	b.Helper()
	pg := testkit.Postgres(b)
	pg.Migrate(b)
	out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema})
	if err != nil {
		b.Fatal(err)
	}
	return &benchTable{pg: pg, pool: pg.NewPool(b, 8), out: out, topic: k.Topic(b, benchPartitions)}
}

// seed empties the table, enqueues n events in batches and ANALYZEs it. Keys
// come from a fixed-seed generator, so every sub-benchmark drains the same
// backlog.
func (t *benchTable) seed(b *testing.B, n int) {
	b.Helper()
	ctx := context.Background()
	if _, err := t.pool.Exec(ctx, "TRUNCATE courier_outbox"); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(13, 13))
	events := make([]producer.Event, 0, benchSeedChunk)
	for i := range n {
		events = append(events, benchEvent(t.topic, i, fmt.Sprintf("order-%d", rng.IntN(benchKeys))))
		if len(events) == benchSeedChunk || i == n-1 {
			if _, err := t.out.EnqueueBatch(ctx, t.pool, events); err != nil {
				b.Fatal(err)
			}
			events = events[:0]
		}
	}
	if _, err := t.pool.Exec(ctx, "ANALYZE courier_outbox"); err != nil {
		b.Fatal(err)
	}
}

// history gives the table the state of one in service: n events already
// published, and planner statistics gathered (as autovacuum does) while
// nothing waited.
func (t *benchTable) history(b *testing.B, n int) {
	b.Helper()
	t.seed(b, n)
	ctx := context.Background()
	if _, err := t.pool.Exec(ctx, "UPDATE courier_outbox SET status = 'published', published_at = now()"); err != nil {
		b.Fatal(err)
	}
	if _, err := t.pool.Exec(ctx, "VACUUM ANALYZE courier_outbox"); err != nil {
		b.Fatal(err)
	}
}

func (t *benchTable) unfinished(b *testing.B) int {
	b.Helper()
	var n int
	if err := t.pool.QueryRow(context.Background(), "SELECT count(*) FROM courier_outbox WHERE status <> 'published'").Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

func (t *benchTable) assertDrained(b *testing.B) {
	b.Helper()
	if n := t.unfinished(b); n != 0 {
		b.Fatalf("%d events are not published", n)
	}
}

// benchEvent is an OrderCreated event with a JSON payload of
// benchPayloadSize bytes.
func benchEvent(topic string, i int, key string) producer.Event {
	payload := fmt.Appendf(nil, `{"order_id":%q,"n":%d,"status":"created","note":"`, key, i)
	payload = append(payload, strings.Repeat("x", max(benchPayloadSize-len(payload)-2, 0))...)
	payload = append(payload, `"}`...)
	return producer.Event{Topic: topic, Key: key, Type: "OrderCreated", Payload: payload}
}

func benchSum(xs []int) int {
	total := 0
	for _, x := range xs {
		total += x
	}
	return total
}
