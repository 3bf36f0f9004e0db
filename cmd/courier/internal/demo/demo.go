// Package demo runs courier's whole pipeline once, on an embedded broker,
// for `courier demo` (`make demo`): orders and their events enqueued in one
// transaction each, the relay publishing them, a payout worker paying them
// through a failing PSP (its breaker opens and closes), poison orders dead-
// lettered, the handler "fixed" and the dead letters replayed, and a summary
// that counts every event.
package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/sony/gobreaker/v2"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/examples/payouts/psp"
	"github.com/courierkit/courier/internal/pgname"
	"github.com/courierkit/courier/internal/rediskeys"
	"github.com/courierkit/courier/migrations"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/retrytopics"
)

// Defaults of Config.
const (
	DefaultOrders     = 300
	DefaultPoison     = 3
	DefaultSlow       = 4
	DefaultDuplicates = 20
	DefaultSchema     = "courier_demo"
	DefaultPSPOutage  = 2 * time.Second
	DefaultTimeout    = time.Minute
)

// DefaultRedisPrefix and DefaultDataDir are Config.RedisPrefix's and
// Config.DataDir's defaults: each demo schema has keys and broker data of
// its own, so two demos on other schemas never share them.
func DefaultRedisPrefix(schema string) string { return "courier:demo:" + schema + ":" }

// DefaultDataDir: see DefaultRedisPrefix.
func DefaultDataDir(schema string) string { return filepath.Join(".courier-demo", schema) }

// retryDelays are the payout worker's retry tiers, which the closing hint
// gives the console.
var retryDelays = []time.Duration{500 * time.Millisecond, time.Second}

// DevListen is the address the closing hint starts `courier dev` on: not
// 9092, which a `courier dev` of the README's tour may hold already.
const DevListen = "127.0.0.1:19092"

// The demo's topic, consumer group and Redis prefix.
const (
	topic       = "orders"
	group       = "payouts"
	replayGroup = "demo-replay"
)

// Config configures Run. DatabaseURL and RedisURL are required.
type Config struct {
	// DatabaseURL is the PostgreSQL the demo creates Schema in. Required.
	DatabaseURL string
	// RedisURL is the Redis for dedupe. Required.
	RedisURL string
	// RedisPrefix starts the demo's Redis keys; keys under it are deleted
	// first. Defaults to "courier:demo:<Schema>:".
	RedisPrefix string
	// Schema holds the demo's outbox and orders tables; it is dropped and
	// created again, so it must start with "courier_demo". One demo runs on
	// a schema at a time: a second one is refused while the first runs.
	// Defaults to "courier_demo".
	Schema string
	// DataDir keeps the embedded broker's data (under DataDir/kafka), so
	// `courier dev --data-dir DataDir/kafka` serves it after the demo. It
	// is emptied first. Defaults to ".courier-demo/<Schema>".
	DataDir string
	// Orders is how many orders are enqueued. Defaults to 300; at most
	// producer.ExactPublishedLimit (100,000), the most Admin.Stats counts
	// exactly, which the demo counts the relay's progress with.
	Orders int
	// Poison is how many of them carry a negative amount, which the PSP
	// rejects until the handler is fixed (`courier demo` takes 3).
	Poison int
	// Slow is how many orders the PSP's fraud check holds up: they fail
	// every in-process attempt and are paid from the first retry topic
	// (`courier demo` takes 4).
	Slow int
	// Duplicates is how many events are published a second time (as a
	// relay that crashed after publishing would), for dedupe to skip
	// (`courier demo` takes 20).
	Duplicates int
	// PSPOutage is how long the PSP fails when the worker starts. Defaults
	// to 2s.
	PSPOutage time.Duration
	// Timeout bounds the whole run. Defaults to 1m.
	Timeout time.Duration
}

func (c Config) withDefaults() (Config, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Orders, DefaultOrders)
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if _, err := pgname.NewTable(c.Schema, "orders"); err != nil || !strings.HasPrefix(c.Schema, DefaultSchema) {
		return c, fmt.Errorf("%w: Schema %q: the demo drops its schema first, so it only takes a plain lower-case name starting with %s (courier_demo2, courier_demo_alice)",
			ErrInvalidConfig, c.Schema, DefaultSchema)
	}
	if c.RedisPrefix == "" {
		c.RedisPrefix = DefaultRedisPrefix(c.Schema)
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir(c.Schema)
	}
	if c.PSPOutage == 0 {
		c.PSPOutage = DefaultPSPOutage
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	switch {
	case c.DatabaseURL == "":
		return c, fmt.Errorf("%w: DatabaseURL is empty; name the PostgreSQL to run in", ErrInvalidConfig)
	case c.RedisURL == "":
		return c, fmt.Errorf("%w: RedisURL is empty; name the Redis for dedupe", ErrInvalidConfig)
	case c.Orders < 1 || c.Orders > producer.ExactPublishedLimit || c.Poison < 0 || c.Slow < 0 || c.Poison+c.Slow > c.Orders ||
		c.Duplicates < 0 || c.Duplicates > c.Orders-c.Poison-c.Slow:
		return c, fmt.Errorf("%w: %d orders, %d poison, %d slow, %d duplicates: use 1 to %d orders, and no more poison, slow and duplicated orders than orders",
			ErrInvalidConfig, c.Orders, c.Poison, c.Slow, c.Duplicates, producer.ExactPublishedLimit)
	case c.PSPOutage < 0 || c.Timeout < time.Second:
		return c, fmt.Errorf("%w: PSPOutage %v, Timeout %v: no negative outage, and a timeout of at least 1s", ErrInvalidConfig, c.PSPOutage, c.Timeout)
	}
	return c, nil
}

// ErrInvalidConfig is matched by the error of Run for a Config it cannot
// use.
var ErrInvalidConfig = errors.New("demo: invalid config")

// ErrBusy is matched by the error of Run when another demo runs on the
// same schema of the same database.
var ErrBusy = errors.New("demo: schema in use")

// Summary counts what happened to the events.
type Summary struct {
	// Enqueued is the events enqueued with their orders.
	Enqueued int `json:"enqueued"`
	// Published is the events the relay published.
	Published int `json:"published"`
	// Handled is the messages the payout handler succeeded on.
	Handled int `json:"handled"`
	// Retried counts handler attempts after a first failed one.
	Retried int `json:"retried"`
	// SentToRetryTopics counts messages moved to a retry topic.
	SentToRetryTopics int `json:"sent_to_retry_topics"`
	// DeadLettered counts messages written to the dead-letter topic.
	DeadLettered int `json:"dead_lettered"`
	// Replayed counts dead letters replayed to the topic.
	Replayed int `json:"replayed"`
	// DuplicatesSuppressed counts duplicate deliveries dedupe skipped.
	DuplicatesSuppressed int `json:"duplicates_suppressed"`
	// BreakerOpened counts the times the PSP breaker opened.
	BreakerOpened int `json:"breaker_opened"`
	// Paid is the orders the PSP paid, each once.
	Paid int `json:"paid"`
	// Lost is the orders enqueued and never paid: 0.
	Lost int `json:"lost"`
	// Seconds is how long the run took.
	Seconds float64 `json:"seconds"`
	// Broker, Schema, RedisPrefix and DataDir say where the state is, for
	// inspection.
	Broker      string `json:"broker"`
	Schema      string `json:"schema"`
	RedisPrefix string `json:"redis_prefix"`
	DataDir     string `json:"data_dir"`
}

// Run runs the demo, narrating on w, and returns its summary.
func Run(ctx context.Context, cfg Config, w io.Writer) (Summary, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Summary{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	d := &run{cfg: cfg, w: w, start: time.Now(), log: slog.New(slog.DiscardHandler)}
	defer d.close()
	if err := d.setUp(ctx); err != nil {
		return Summary{}, err
	}
	if err := d.pipeline(ctx); err != nil {
		return d.summary, err
	}
	return d.summary, nil
}

// run is one run of the demo.
type run struct {
	cfg   Config
	w     io.Writer
	start time.Time
	log   *slog.Logger

	broker *kfake.Cluster
	pool   *pgxpool.Pool
	admin  *producer.Admin // counts what the relay published
	redis  *redis.Client
	psp    *psp.Server

	fixed   atomic.Bool
	paid    sync.Map // order id → true, once the PSP accepted its payout
	slow    sync.Map // order id → true for the orders the fraud check holds up
	counts  outcomes
	summary Summary
	closers []func()
}

func (d *run) say(format string, args ...any) {
	fmt.Fprintf(d.w, "[%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func (d *run) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// setUp starts the broker and the PSP stub, and prepares PostgreSQL and
// Redis.
func (d *run) setUp(ctx context.Context) error {
	var err error
	if d.pool, err = pgxpool.New(ctx, d.cfg.DatabaseURL); err == nil {
		err = d.pool.Ping(ctx)
	}
	if err != nil {
		return fmt.Errorf("demo: PostgreSQL: %w (is it running? try `make services`)", err)
	}
	d.closers = append(d.closers, d.pool.Close)
	if err := d.lockSchema(ctx); err != nil {
		return err
	}
	kafkaDir := filepath.Join(d.cfg.DataDir, "kafka")
	if err := os.RemoveAll(kafkaDir); err != nil {
		return fmt.Errorf("demo: empty %s: %w", kafkaDir, err)
	}
	if err := os.MkdirAll(kafkaDir, 0o755); err != nil {
		return fmt.Errorf("demo: create %s: %w", kafkaDir, err)
	}
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(kafkaDir), kfake.SeedTopics(3, topic))
	if err != nil {
		return fmt.Errorf("demo: start the embedded broker: %w", err)
	}
	d.broker = broker
	d.closers = append(d.closers, broker.Close)
	d.summary.Broker, d.summary.DataDir, d.summary.Schema, d.summary.RedisPrefix = broker.ListenAddrs()[0], kafkaDir, d.cfg.Schema, d.cfg.RedisPrefix

	schema := pgx.Identifier{d.cfg.Schema}.Sanitize()
	if _, err := d.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema+
		"; CREATE TABLE "+schema+".orders (id text PRIMARY KEY, amount_cents bigint NOT NULL, currency text NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"); err != nil {
		return fmt.Errorf("demo: create schema %s: %w", d.cfg.Schema, err)
	}
	m, err := migrations.New(migrations.Config{Schema: d.cfg.Schema})
	if err == nil {
		_, err = m.Up(ctx, d.pool)
	}
	if err == nil {
		d.admin, err = producer.NewAdmin(d.pool, producer.AdminConfig{Schema: d.cfg.Schema})
	}
	if err != nil {
		return fmt.Errorf("demo: create the outbox table: %w", err)
	}

	opts, err := redis.ParseURL(d.cfg.RedisURL)
	if err != nil {
		return fmt.Errorf("demo: Redis URL: %w (want redis://host:6379/0)", err)
	}
	d.redis = redis.NewClient(opts)
	d.closers = append(d.closers, func() { _ = d.redis.Close() })
	if _, err := rediskeys.Delete(ctx, d.redis, d.cfg.RedisPrefix); err != nil { // what an earlier demo left
		return fmt.Errorf("demo: Redis: %w (is it running? try `make services`)", err)
	}

	if d.psp, err = psp.Start(); err != nil {
		return fmt.Errorf("demo: start the PSP stub: %w", err)
	}
	d.closers = append(d.closers, d.psp.Close)
	fmt.Fprintf(d.w, "courier demo: the whole pipeline on an embedded Kafka broker (%s)\n", d.summary.Broker)
	fmt.Fprintf(d.w, "  PostgreSQL schema %s, Redis keys %s*, broker data in %s\n\n", d.cfg.Schema, d.cfg.RedisPrefix, kafkaDir)
	return nil
}

// lockSchema takes a session advisory lock on the demo's schema, held on a
// connection of its own until the run ends, so a second demo on the same
// schema is refused before it drops the schema, the Redis keys or the broker
// data of the first.
func (d *run) lockSchema(ctx context.Context) error {
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("demo: PostgreSQL: %w (is it running? try `make services`)", err)
	}
	var locked bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended('courier demo ' || $1, 0))", d.cfg.Schema).Scan(&locked); err != nil {
		conn.Release()
		return fmt.Errorf("demo: lock schema %s: %w", d.cfg.Schema, err)
	}
	if !locked {
		conn.Release()
		return fmt.Errorf("%w: another courier demo is running on schema %s of this database; wait for it to finish, or run this one on a schema of its own (--schema %s2)",
			ErrBusy, d.cfg.Schema, d.cfg.Schema)
	}
	// Closing the connection (not returning it to the pool) ends the lock.
	d.closers = append(d.closers, func() { _ = conn.Hijack().Close(context.Background()) })
	return nil
}

// order is the payload of an OrderCreated event.
type order struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// pipeline enqueues, relays, pays, dead-letters, replays and counts.
func (d *run) pipeline(ctx context.Context) error {
	ids, err := d.enqueue(ctx)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	defer func() {
		stop()
		wg.Wait()
	}()

	relay, err := producer.NewRelay(d.pool, producer.RelayConfig{Schema: d.cfg.Schema, Brokers: d.broker.ListenAddrs(), Source: "orders-service", Logger: d.log})
	if err != nil {
		return err
	}
	wg.Go(func() {
		if err := relay.Run(runCtx); err != nil {
			errs <- fmt.Errorf("relay: %w", err)
		}
	})

	d.psp.SetMode(psp.ModeFail)
	d.say("the payout worker starts; the PSP is down for %v from its first call", d.cfg.PSPOutage)
	worker, err := d.worker()
	if err != nil {
		return err
	}
	wg.Go(func() {
		if err := worker.Run(runCtx); err != nil {
			errs <- fmt.Errorf("payout worker: %w", err)
		}
	})
	var outage <-chan time.Time // runs from the PSP's first call

	valid := d.cfg.Orders - d.cfg.Poison
	duplicated := false
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for d.psp.Paid() < valid || d.counts.deadLettered.Load() < int64(d.cfg.Poison) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("demo: %d of %d orders paid and %d of %d poison orders dead-lettered when the time ran out: %w",
				d.psp.Paid(), valid, d.counts.deadLettered.Load(), d.cfg.Poison, ctx.Err())
		case err := <-errs:
			return err
		case <-outage:
			outage = nil
			d.psp.SetMode(psp.ModeOK)
			d.say("the PSP is back")
		case <-tick.C:
			if outage == nil && d.psp.Mode() == psp.ModeFail && d.psp.Calls() > 0 {
				outage = time.After(d.cfg.PSPOutage)
			}
			if !duplicated && d.published(ctx) == d.cfg.Orders {
				duplicated = true
				if err := d.publishDuplicates(ctx); err != nil {
					return err
				}
				d.say("the relay published all %d events; %d of them published again, as after a relay crash", d.cfg.Orders, d.cfg.Duplicates)
			}
		}
	}
	d.say("%d orders paid; %d poison orders (negative amounts) dead-lettered to %s", d.psp.Paid(), d.counts.deadLettered.Load(), dlq.Topic(topic, ""))

	d.fixed.Store(true)
	d.say("handler fixed (it now reads the amount's absolute value); replaying %s", dlq.Topic(topic, ""))
	report, err := dlq.Replay(ctx, dlq.ReplayConfig{Brokers: d.broker.ListenAddrs(), Topic: dlq.Topic(topic, ""), Group: replayGroup})
	if err != nil {
		return fmt.Errorf("demo: replay: %w", err)
	}
	d.summary.Replayed = report.Moved
	if err := d.waitFor(ctx, errs, func() bool { return d.psp.Paid() == d.cfg.Orders }); err != nil {
		return fmt.Errorf("demo: %d of %d orders paid after the replay: %w", d.psp.Paid(), d.cfg.Orders, err)
	}
	d.say("replayed %d; all %d orders paid", report.Moved, d.psp.Paid())
	if !duplicated {
		return errors.New("demo: the relay never published every event")
	}
	stop()
	wg.Wait()
	return d.count(ctx, ids)
}

// waitFor polls cond until it holds, ctx ends or a component fails.
func (d *run) waitFor(ctx context.Context, errs <-chan error, cond func() bool) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-errs:
			return err
		case <-tick.C:
		}
	}
	return nil
}

// enqueue writes each order and its OrderCreated event in one transaction
// and returns the order ids.
func (d *run) enqueue(ctx context.Context) ([]string, error) {
	outbox, err := producer.NewOutbox(producer.Config{Schema: d.cfg.Schema})
	if err != nil {
		return nil, err
	}
	poison := spread(d.cfg.Poison, d.cfg.Orders, 0)
	slow := spread(d.cfg.Slow, d.cfg.Orders, 1)
	ids := make([]string, d.cfg.Orders)
	for i := range d.cfg.Orders {
		o := order{OrderID: fmt.Sprintf("order-%04d", i+1), AmountCents: int64(1000 + i), Currency: "EUR"}
		switch {
		case poison[i]:
			o.AmountCents = -o.AmountCents // the checkout bug the handler gets fixed for
		case slow[i]:
			d.slow.Store(o.OrderID, true)
		}
		ids[i] = o.OrderID
		payload, _ := json.Marshal(o)
		err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{d.cfg.Schema, "orders"}.Sanitize()+" (id, amount_cents, currency) VALUES ($1, $2, $3)",
				o.OrderID, o.AmountCents, o.Currency); err != nil {
				return err
			}
			_, err := outbox.Enqueue(ctx, tx, producer.Event{
				Topic: topic, Key: o.OrderID, Type: "OrderCreated", Payload: payload,
				AggregateType: "Order", AggregateID: o.OrderID, CorrelationID: o.OrderID,
			})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("demo: enqueue %s: %w", o.OrderID, err)
		}
	}
	d.summary.Enqueued = d.cfg.Orders
	d.say("enqueued %d orders, each with its OrderCreated event in one transaction (%d with a negative amount: poison; %d held up by a fraud check)",
		d.cfg.Orders, d.cfg.Poison, d.cfg.Slow)
	return ids, nil
}

// spread picks n of total indexes, evenly apart, shifted by shift so that
// two spreads do not meet.
func spread(n, total, shift int) map[int]bool {
	picked := map[int]bool{}
	for k := range n {
		picked[(k*total/n+total/(2*n)+shift)%total] = true
	}
	return picked
}

// worker is the payout worker: it pays each order at the PSP through a
// breaker, with in-process retries, two retry tiers, Redis dedupe and the
// dead-letter topic.
func (d *run) worker() (*consumer.Consumer, error) {
	store, err := dedupe.NewRedis(d.redis, dedupe.RedisConfig{Scope: group, Prefix: d.cfg.RedisPrefix + "dedupe:", Window: 10 * time.Minute})
	if err != nil {
		return nil, err
	}
	breaker, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", ConsecutiveFailures: 5, OpenFor: 500 * time.Millisecond,
		Logger: d.log, Hooks: []consumer.Hook{&d.counts}})
	if err != nil {
		return nil, err
	}
	client := psp.NewClient(d.psp.URL(), time.Second)
	sc := consumer.NewSaramaConfig()
	sc.Consumer.Offsets.AutoCommit.Interval = 100 * time.Millisecond
	return consumer.New(consumer.Config{
		Brokers: d.broker.ListenAddrs(), Sarama: sc, Group: group, Topics: []string{topic},
		MaxAttempts: 6, Backoff: backoff.Backoff{Base: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		Workers:     8,
		RetryTopics: retrytopics.Config{Delays: retryDelays, CreateTopics: true},
		Dedupe:      consumer.DedupeConfig{Store: store},
		Handler: consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
			if m.Attempt > 1 {
				d.counts.retried.Add(1)
			}
			var o order
			if err := json.Unmarshal(m.Value, &o); err != nil {
				return consumer.Permanent(fmt.Errorf("order payload: %w", err))
			}
			if d.fixed.Load() {
				o.AmountCents = int64(math.Abs(float64(o.AmountCents)))
			}
			if _, held := d.slow.Load(o.OrderID); held && m.RetryRound == 0 {
				return errors.New("psp: fraud check pending; try again later") // transient: on to the retry topics
			}
			// The PSP's outage (503 in ModeFail) comes back marked
			// consumer.Unavailable, which the breaker counts; the poison
			// orders' 422 (Permanent) and any other answer about one
			// order it does not.
			err := breaker.Do(ctx, func(ctx context.Context) error {
				return client.Pay(ctx, psp.Payout{ID: m.ID, OrderID: o.OrderID, AmountCents: o.AmountCents, Currency: o.Currency})
			})
			if err == nil {
				d.paid.Store(o.OrderID, true)
			}
			return err
		}),
		Hooks:  []consumer.Hook{&d.counts},
		Logger: d.log,
	})
}

// published counts the events the relay has published.
func (d *run) published(ctx context.Context) int {
	stats, err := d.admin.Stats(ctx)
	if err != nil {
		return 0 // asked again at the next tick
	}
	return int(stats.Counts[producer.StatusPublished])
}

// publishDuplicates publishes valid events again, byte for byte, as a
// relay that crashed after publishing and before recording it would.
func (d *run) publishDuplicates(ctx context.Context) error {
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	client, err := sarama.NewClient(d.broker.ListenAddrs(), cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	reader, err := sarama.NewConsumer(d.broker.ListenAddrs(), cfg)
	if err != nil {
		return err
	}
	defer reader.Close()
	writer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		return err
	}
	defer writer.Close()
	partitions, err := client.Partitions(topic)
	if err != nil {
		return err
	}
	sent := 0
	for _, p := range partitions {
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil || end == 0 {
			continue
		}
		pc, err := reader.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return err
		}
		for sent < d.cfg.Duplicates {
			var m *sarama.ConsumerMessage
			select {
			case <-ctx.Done():
				pc.AsyncClose()
				return ctx.Err()
			case m = <-pc.Messages():
			}
			if m == nil {
				return fmt.Errorf("demo: reading %s/%d for duplicates stopped early", topic, p)
			}
			var o order
			if json.Unmarshal(m.Value, &o) == nil && o.AmountCents > 0 {
				headers := make([]sarama.RecordHeader, len(m.Headers))
				for i, h := range m.Headers {
					headers[i] = *h
				}
				if _, _, err := writer.SendMessage(&sarama.ProducerMessage{Topic: topic, Partition: m.Partition,
					Key: sarama.ByteEncoder(m.Key), Value: sarama.ByteEncoder(m.Value), Headers: headers}); err != nil {
					pc.AsyncClose()
					return err
				}
				sent++
			}
			if m.Offset+1 >= end {
				break
			}
		}
		pc.AsyncClose()
	}
	return nil
}

// count fills the summary and checks that no order was lost.
func (d *run) count(ctx context.Context, ids []string) error {
	s := &d.summary
	s.Published = d.published(ctx)
	s.Handled = int(d.counts.handled.Load())
	s.Retried = int(d.counts.retried.Load())
	s.SentToRetryTopics = int(d.counts.sentToRetry.Load())
	s.DeadLettered = int(d.counts.deadLettered.Load())
	s.DuplicatesSuppressed = int(d.counts.deduplicated.Load())
	s.BreakerOpened = int(d.counts.breakerOpened.Load())
	for _, id := range ids {
		if _, ok := d.paid.Load(id); !ok {
			s.Lost++
		}
	}
	s.Paid = d.psp.Paid()
	s.Seconds = time.Since(d.start).Seconds()
	if s.Lost > 0 {
		return fmt.Errorf("demo: %d orders were never paid", s.Lost)
	}
	return nil
}

// outcomes counts the consumer's outcomes; it is the consumer's and the
// breaker's hook.
type outcomes struct {
	handled, retried, sentToRetry, deadLettered, deduplicated, breakerOpened atomic.Int64
}

func (o *outcomes) Message(_ string, outcome consumer.Outcome) {
	switch outcome {
	case consumer.OutcomeHandled:
		o.handled.Add(1)
	case consumer.OutcomeSentToRetry:
		o.sentToRetry.Add(1)
	case consumer.OutcomeDeadLettered:
		o.deadLettered.Add(1)
	case consumer.OutcomeDeduplicated:
		o.deduplicated.Add(1)
	}
}

func (o *outcomes) BreakerChanged(name string, state gobreaker.State) {
	if state == gobreaker.StateOpen {
		o.breakerOpened.Add(1)
	}
}
func (o *outcomes) HandlerDuration(string, time.Duration) {}
func (o *outcomes) InFlight(string, int)                  {}
func (o *outcomes) Lag(string, int32, int64)              {}
func (o *outcomes) Released(string, int32)                {}

// WriteSummary prints s as a table, then the commands that inspect what
// the demo left behind.
func WriteSummary(w io.Writer, s Summary, databaseURL, redisURL string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w)
	for _, row := range []struct {
		n     int
		label string
	}{
		{s.Enqueued, "events enqueued (one transaction with each order)"},
		{s.Published, "published by the relay"},
		{s.Handled, "handled by the payout worker"},
		{s.Retried, "attempts retried in process"},
		{s.SentToRetryTopics, "sent to a retry topic (and paid from there)"},
		{s.BreakerOpened, "times the PSP breaker opened (the worker paused)"},
		{s.DeadLettered, "dead-lettered"},
		{s.Replayed, "replayed from the dead-letter topic"},
		{s.DuplicatesSuppressed, "duplicates suppressed by dedupe"},
		{s.Paid, "orders paid at the PSP, each once"},
		{s.Lost, "lost"},
	} {
		fmt.Fprintf(tw, "%d\t  %s\n", row.n, row.label)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, `
finished in %.1fs. Inspect what it left:
  psql %q -c "SELECT count(*) AS published, min(published_at), max(published_at) FROM %s.courier_outbox_published"
  redis-cli -u %q --scan --pattern '%sdedupe:*' | head
  courier dev --data-dir %s --listen %s &   # the demo's topics, beside a courier dev on 9092
  kcat -b %[7]s -t orders.dlq -C -e -f '%%k %%h\n'
  courier dlq list orders.dlq --brokers %[7]s
  courier console --database-url %[2]q --schema %[3]s --brokers %[7]s --retry-delays %[8]s
      # the outbox and orders.dlq in a browser, at http://127.0.0.1:8080/
`, s.Seconds, databaseURL, s.Schema, redisURL, s.RedisPrefix, s.DataDir, DevListen, delaysFlag(retryDelays))
	return err
}

// delaysFlag writes delays as --retry-delays takes them: 500ms,1s.
func delaysFlag(delays []time.Duration) string {
	parts := make([]string, len(delays))
	for i, d := range delays {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}
