package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/rediskeys"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/retrytopics"
)

// Defaults of ConsumeConfig.
const (
	DefaultMessages     = 200_000
	DefaultSlowMessages = 4_000
	DefaultRounds       = 1
)

const (
	failEvery   = 100 // 1%: messages i with i%failEvery == failEvery-1 fail for good
	retryEvery  = 20  // 5%: messages i with i%retryEvery == retryEvery-1 go through a retry tier once
	seedChunk   = 5_000
	slowHandler = 5 * time.Millisecond
	deadline    = 2 * time.Minute // to join the group, then again to consume the backlog

	// Raw names the baseline configuration.
	Raw = "raw-sarama-group"
	// NoFailures names the runner whose handler fails no message.
	NoFailures = "runner/no-failures"
	slowBase   = "runner/handler=5ms/workers=1"
	// RetryTiers names the configuration where 1% of the messages fail
	// twice and pass through two retry tiers; its rate is the main topic's.
	RetryTiers = "runner/1%-through-retry-tiers"
	// DedupeRedis names the configuration with Redis dedupe on.
	DedupeRedis = "runner/dedupe-redis"
	// DedupeMemory names the configuration with dedupe on an in-process
	// store: the consumer's own cost of deduplication, without Redis.
	DedupeMemory = "runner/dedupe-in-process-store"
	// RetryTier names the configuration where 5% of the messages fail once
	// and pass through one retry tier; its rate is the main topic's.
	RetryTier = "runner/5%-through-a-retry-tier"

	// What a team writes without courier, each the baseline of the runner
	// configuration that does the same work: a raw Sarama group that,
	// before it marks a message, sends the 1% meant to fail to the
	// dead-letter topic with a SyncProducer (RawDeadLetters), sends the
	// 5% meant to retry to a retry topic the same way (RawRetries), or
	// claims every message's id in Redis with SET NX EX, one round trip a
	// message (RawSetNX).
	RawDeadLetters = "raw-sarama-group/1%-sync-dead-letter"
	RawRetries     = "raw-sarama-group/5%-sync-retry"
	RawSetNX       = "raw-sarama-group/set-nx-per-message"
)

// retryTiers are the retry tiers of the RetryTiers configuration: short,
// so that the failing messages cycle through them while the main topic
// flows.
var retryTiers = retrytopics.Config{Delays: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}}

// ConsumeConfig says where and how much Consume measures. Only Brokers is
// required.
type ConsumeConfig struct {
	// Brokers are the Kafka bootstrap addresses; the run creates (and
	// deletes) its own topics there.
	Brokers []string
	// Sarama returns the client config for creating topics, seeding and
	// reading dead letters. Defaults to sarama.NewConfig() with acks from
	// all in-sync replicas.
	Sarama func() *sarama.Config
	// Messages is the backlog of the throughput configurations. Defaults
	// to 200,000.
	Messages int
	// SlowMessages is the backlog of the 5 ms handler configurations.
	// Defaults to 4,000.
	SlowMessages int
	// Rounds is how many backlogs each configuration consumes. Defaults
	// to 1; use 5 for figures.
	Rounds int
	// Fetching, when set, returns a channel closed when the broker receives
	// the first fetch of topic, so that the group join is not timed.
	Fetching func(topic string) <-chan struct{}
	// Logger receives the runners' logs; their "message dead-lettered"
	// lines are expected. Defaults to a logger that formats and discards,
	// as a service would pay for them.
	Logger *slog.Logger
	// Name makes topic and group names unique. Defaults to a random one.
	Name string
	// Only names the configurations to run beside the baseline (the 5 ms
	// handler on 16 workers brings its 1-worker baseline). Defaults to all.
	Only []string
	// Redis, when set, adds the configuration with Redis dedupe on; its
	// keys live under courier:bench:<Name>: and are deleted after each
	// round. Defaults to none.
	Redis redis.UniversalClient
	// RedisBenchmark, when set with Redis, is the path of redis-benchmark:
	// each round then also runs it against that Redis (a *redis.Client
	// reached over TCP without TLS or a password), Messages requests of each
	// command the Redis dedupe sends per message, so that the report shows
	// what Redis alone does with them. Defaults to none.
	RedisBenchmark string
	// Progress, when set, receives a line as each round starts. Defaults
	// to none.
	Progress io.Writer
}

// Result is one configuration's figure.
type Result struct {
	Name string `json:"name"`
	// Rate is messages per second over the median consuming time.
	Rate float64 `json:"msgs_per_s"`
	// Baseline names the configuration Ratio compares with.
	Baseline string  `json:"baseline"`
	Ratio    float64 `json:"ratio"`
	// Ceiling is the most a 5 ms handler configuration could reach; 0 for
	// the others.
	Ceiling float64 `json:"ceiling_msgs_per_s,omitempty"`
	// CPU is where the CPU went while it consumed; nil where it could not
	// be read (see ConsumeReport.CPUUnknown).
	CPU *CPUUse `json:"cpu,omitempty"`
}

// ConsumeReport is the figures of one Consume run.
type ConsumeReport struct {
	Messages     int      `json:"messages"`
	SlowMessages int      `json:"slow_messages"`
	Rounds       int      `json:"rounds"`
	Results      []Result `json:"results"`
	// Redis is what redis-benchmark measured of the commands the Redis
	// dedupe sends per message (ConsumeConfig.RedisBenchmark); empty when
	// it did not run.
	Redis []RedisCommandRate `json:"redis_benchmark,omitempty"`
	// RedisServer is what the Redis server spent while the Redis dedupe
	// consumed; nil without that configuration, with a Redis other than a
	// single *redis.Client, or when it refuses INFO.
	RedisServer *RedisServerLoad `json:"redis_server,omitempty"`
	// CPUUnknown is why a round of some configuration has no CPU figure
	// (the first reason met: not Linux, an unreadable /proc/stat); empty
	// when every round has one. A Result's CPU is then the median of the
	// rounds that have one, or nil.
	CPUUnknown string `json:"cpu_unknown,omitempty"`
}

// WriteText writes the report as the table the benchmarks print.
func (r ConsumeReport) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "msgs/s consuming %d messages (%d with the 5ms handler) over %d keys and %d partitions, %d times each, taking turns, same broker:\n",
		r.Messages, r.SlowMessages, keys, partitions, r.Rounds)
	writeRateLines(&b, r.rows())
	b.WriteString("  (ceiling: the backlog's busiest worker handling its messages one after the other)\n")
	if alone, dedupe, ok := r.redisAlone(); ok {
		fmt.Fprintf(&b, "redis-benchmark against the same Redis, the commands %s sends, median of %s:\n", DedupeRedis, plural(r.Rounds, "run"))
		for _, c := range r.Redis {
			fmt.Fprintf(&b, "  %-26s %9.0f ops/s = %9.0f msgs/s  %s\n", c.What, c.Rate, c.MessageRate(), c.Command)
		}
		fmt.Fprintf(&b, "  Redis alone, a claim and a share of a done mark per message: %.0f msgs/s; %s: %.0f msgs/s (%.2fx)\n", alone, DedupeRedis, dedupe, dedupe/alone)
	}
	if l := r.RedisServer; l != nil {
		fmt.Fprintf(&b, "redis-server while %s consumed (INFO cpu and stats), median of %s: %.2f cores busy, %.1f us of CPU per command, %.2f commands per message\n",
			DedupeRedis, plural(r.Rounds, "run"), l.Busy, l.MicrosPerCommand, l.CommandsPerMessage)
	}
	r.writeCPUText(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// redisAlone returns the messages per second Redis alone serves when each
// costs its share of each command redis-benchmark measured (a claim, a
// batch's share of a done mark: the commands' times add up), and the Redis
// dedupe configuration's rate; ok is false when either is missing.
func (r ConsumeReport) redisAlone() (alone, dedupe float64, ok bool) {
	if len(r.Redis) == 0 {
		return 0, 0, false
	}
	perMessage := 0.0
	for _, c := range r.Redis {
		perMessage += 1 / c.MessageRate()
	}
	for _, res := range r.Results {
		if res.Name == DedupeRedis {
			dedupe = res.Rate
		}
	}
	return 1 / perMessage, dedupe, dedupe > 0
}

// rows are the results as the tables show them, with their ceilings.
func (r ConsumeReport) rows() []rateRow {
	rows := make([]rateRow, len(r.Results))
	for i, res := range r.Results {
		rows[i] = rateRow{name: res.Name, rate: res.Rate, baseline: res.Baseline, ratio: res.Ratio}
		if res.Ceiling > 0 {
			rows[i].note = fmt.Sprintf("(ceiling %.0f: %.2fx)", res.Ceiling, res.Rate/res.Ceiling)
			rows[i].cell = thousands(res.Ceiling)
		}
	}
	return rows
}

// Consume measures the consumer runner beside a raw Sarama consumer group,
// in one run on one broker: the figures `courier bench consume` and
// BenchmarkConsume print.
//
// Each configuration consumes its own freshly seeded backlog: 200,000
// messages by default, 1,000 keys over 12 partitions, ~200-byte JSON values
// with the CloudEvents headers courier's relay writes. The configurations:
//
//   - raw-sarama-group: a Sarama consumer group that only marks each
//     message (the baseline);
//   - runner/no-failures: consumer.Consumer, default config, handler
//     returning nil;
//   - raw-sarama-group/1%-sync-dead-letter: the raw group sending the 1%
//     meant to fail to the dead-letter topic with a SyncProducer before it
//     marks them, as a handler that writes its own dead letters does;
//   - runner/1%-permanent: the same, failing 1% of the messages with
//     consumer.Permanent, so they go to the dead-letter topic (whose
//     records are checked afterwards), beside the raw group that writes
//     them synchronously;
//   - runner/1%-through-retry-tiers: the same 1% fail twice and pass
//     through two retry tiers (50ms and 100ms) before they are handled;
//     its rate is the main topic's, from the first fetch until every
//     message of the main topic is handled or in its first tier, while
//     the tiers are consumed beside it;
//   - raw-sarama-group/5%-sync-retry and runner/5%-through-a-retry-tier:
//     5% of the messages sent once to a retry topic, synchronously by the
//     raw group, through one retry tier (50ms) by the runner, whose rate
//     is the main topic's as above;
//   - runner/dedupe-in-process-store: no failures, each message claimed
//     and marked in a map: what deduplication costs the consumer itself;
//   - raw-sarama-group/set-nx-per-message (with ConsumeConfig.Redis): the
//     raw group claiming each message's id with SET NX EX, one round trip
//     a message, as a team writes dedupe by hand;
//   - runner/dedupe-redis (with ConsumeConfig.Redis): no failures, each
//     message claimed and marked in Redis (dedupe.NewRedis);
//   - runner/handler=5ms/workers=1 and =16: 4,000 messages with a handler
//     that takes 5 ms, one worker per partition against 16, each beside its
//     ceiling (the backlog's busiest worker handling its messages one after
//     the other).
//
// They take turns, Rounds times, each round starting one further along the
// list, so that a machine whose speed drifts meets them all alike; a
// configuration's rate is its messages over its median consuming time,
// which starts at the group's first fetch when ConsumeConfig.Fetching can tell it
// (the in-process broker can), else when the consumer starts. Over that
// same time it reads this process's CPU time and the machine's (Linux
// only), so that each configuration's CPU figure shows whether it kept the
// cores busy or waited.
//
// It returns the report, or the first error.
func Consume(ctx context.Context, cfg ConsumeConfig) (ConsumeReport, error) {
	run, err := NewConsumeRun(cfg)
	if err != nil {
		return ConsumeReport{}, err
	}
	for i := range run.cfg.Rounds {
		progress(run.cfg.Progress, "consumer: round %d of %d, %d configurations", i+1, run.cfg.Rounds, len(run.cases))
		if err := run.Round(ctx); err != nil {
			return ConsumeReport{}, err
		}
	}
	return run.Report(), nil
}

// ConsumeRun is Consume one round at a time, for a caller that counts the
// rounds itself (a benchmark's b.Loop). ConsumeConfig.Rounds is not used.
type ConsumeRun struct {
	cfg    ConsumeConfig
	cases  []*benchCase
	rounds int
	// redisBench runs redis-benchmark after each round; nil when it does
	// not.
	redisBench *redisBench
	// redisLoads is what the Redis server spent in each round's Redis
	// dedupe run.
	redisLoads *redisLoads
}

// NewConsumeRun validates cfg and applies its defaults.
func NewConsumeRun(cfg ConsumeConfig) (*ConsumeRun, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	slow := func(ctx context.Context, _ *consumer.Message, _ *backlog) error {
		t := time.NewTimer(slowHandler)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	cases := []*benchCase{
		{name: Raw, n: cfg.Messages, consume: rawGroup(nil)},
		{name: NoFailures, n: cfg.Messages,
			consume: runner(consumer.Config{}, handleAll)},
		{name: RawDeadLetters, n: cfg.Messages, consume: rawGroup(syncSend(func(bl *backlog) (map[string]bool, string) { return bl.fail, bl.dlq }))},
		{name: "runner/1%-permanent", n: cfg.Messages, baseline: RawDeadLetters,
			consume: runner(consumer.Config{}, func(_ context.Context, m *consumer.Message, bl *backlog) error {
				if bl.fail[m.ID] {
					return consumer.Permanent(fmt.Errorf("bench: message %s fails for good", m.ID))
				}
				return nil
			})},
	}
	cases = append(cases, &benchCase{name: RetryTiers, n: cfg.Messages, consume: runner(
		// One attempt per tier: a failing message leaves its partition at
		// once (in-process retries would hold the partition up).
		consumer.Config{MaxAttempts: 1, RetryTopics: retrytopics.Config{Delays: retryTiers.Delays, CreateTopics: true}},
		func(_ context.Context, m *consumer.Message, bl *backlog) error {
			if bl.fail[m.ID] && m.RetryRound < 2 {
				return fmt.Errorf("bench: message %s fails in round %d", m.ID, m.RetryRound)
			}
			return nil
		})})
	cases = append(cases, &benchCase{name: RawRetries, n: cfg.Messages, consume: rawGroup(syncSend(func(bl *backlog) (map[string]bool, string) { return bl.retry, bl.retryTopic }))})
	cases = append(cases, &benchCase{name: RetryTier, n: cfg.Messages, baseline: RawRetries, consume: runner(
		consumer.Config{MaxAttempts: 1, RetryTopics: retrytopics.Config{Delays: retryTiers.Delays[:1], CreateTopics: true}},
		func(_ context.Context, m *consumer.Message, bl *backlog) error {
			if bl.retry[m.ID] && m.RetryRound == 0 {
				return fmt.Errorf("bench: message %s fails in round 0", m.ID)
			}
			return nil
		})})
	cases = append(cases, &benchCase{name: DedupeMemory, n: cfg.Messages, consume: memoryDedupeRunner})
	loads := &redisLoads{}
	if cfg.Redis != nil {
		cases = append(cases, &benchCase{name: RawSetNX, n: cfg.Messages, consume: rawGroup(setNX(cfg.Redis))})
		cases = append(cases, &benchCase{name: DedupeRedis, n: cfg.Messages, consume: dedupeRunner(cfg.Redis, loads)})
	}
	for _, workers := range []int{1, 16} {
		cases = append(cases, &benchCase{name: fmt.Sprintf("runner/handler=5ms/workers=%d", workers), n: cfg.SlowMessages,
			workers: workers, consume: runner(consumer.Config{Workers: workers}, slow)})
	}
	if len(cfg.Only) > 0 {
		kept := cases[:1] // the baseline
		for _, c := range cases[1:] {
			if slices.Contains(cfg.Only, c.name) || c.name == slowBase && slices.Contains(cfg.Only, "runner/handler=5ms/workers=16") ||
				slices.ContainsFunc(cases, func(o *benchCase) bool { return o.baseline == c.name && slices.Contains(cfg.Only, o.name) }) {
				kept = append(kept, c)
			}
		}
		if len(kept) == 1 {
			return nil, fmt.Errorf("bench: none of %q is a configuration; see the names `courier bench consume` prints", cfg.Only)
		}
		cases = kept
	}
	run := &ConsumeRun{cfg: cfg, cases: cases, redisLoads: loads}
	if cfg.Redis != nil && cfg.RedisBenchmark != "" && slices.ContainsFunc(cases, func(c *benchCase) bool { return c.name == DedupeRedis }) {
		b, err := newRedisBench(cfg.RedisBenchmark, cfg.Redis, cfg.Name)
		if err != nil {
			return nil, err
		}
		run.redisBench = b
	}
	return run, nil
}

// Round consumes one backlog with every configuration, starting one
// further along the list than the round before.
func (r *ConsumeRun) Round(ctx context.Context) error {
	for i := range r.cases {
		c := r.cases[(r.rounds+i)%len(r.cases)]
		if err := c.once(ctx, &r.cfg, fmt.Sprintf("%s_%d_%d", r.cfg.Name, r.rounds, i)); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	if r.redisBench != nil {
		if err := r.redisBench.round(ctx, r.cfg.Messages); err != nil {
			return err
		}
	}
	r.rounds++
	return nil
}

// Report is the figures of the rounds so far.
func (r *ConsumeRun) Report() ConsumeReport {
	report := ConsumeReport{Messages: r.cfg.Messages, SlowMessages: r.cfg.SlowMessages, Rounds: r.rounds}
	rates := map[string]float64{}
	for _, c := range r.cases {
		rates[c.name] = MedianRate(c.n, c.spent)
	}
	for _, c := range r.cases {
		res := Result{Name: c.name, Rate: rates[c.name], Baseline: cmp.Or(c.baseline, Raw)}
		if c.workers > 0 && c.last != nil {
			res.Baseline = slowBase
			res.Ceiling = c.last.ceiling(c.workers, slowHandler)
		}
		if base := rates[res.Baseline]; base > 0 {
			res.Ratio = res.Rate / base
		}
		res.CPU = c.cpu.median()
		if c.cpu.err != nil && report.CPUUnknown == "" {
			report.CPUUnknown = c.cpu.err.Error()
		}
		report.Results = append(report.Results, res)
	}
	if r.redisBench != nil {
		report.Redis = r.redisBench.rates()
	}
	report.RedisServer = r.redisLoads.load()
	return report
}

func (c *ConsumeConfig) setDefaults() error {
	if len(c.Brokers) == 0 {
		return errors.New("bench: no Kafka brokers given")
	}
	if c.Sarama == nil {
		c.Sarama = defaultSarama
	}
	if err := applyCounts(count{&c.Messages, DefaultMessages}, count{&c.SlowMessages, DefaultSlowMessages}, count{&c.Rounds, DefaultRounds}); err != nil {
		return err
	}
	if c.Logger == nil {
		c.Logger = defaultLogger()
	}
	if c.Name == "" {
		c.Name = randomName()
	}
	return nil
}

// benchCase is one way of consuming a backlog.
type benchCase struct {
	name     string
	baseline string // the configuration its ratio compares with; Raw when empty
	n        int    // messages in its backlog
	workers  int    // Config.Workers of a 5 ms handler case, else 0
	consume  consumeFunc
	spent    []time.Duration // consuming, each round
	cpu      cpuUses         // CPU use while consuming, each round
	last     *backlog        // the last backlog, for the ceiling
}

// consumeFunc consumes bl until s has counted every message, then stops
// and returns how long consuming took (see settled.measure), once its
// consumer has shut down.
type consumeFunc func(ctx context.Context, cfg *ConsumeConfig, bl *backlog, s *settled) (time.Duration, error)

// once seeds a backlog named name and consumes it under the pprof label
// config=<c.name>, which the goroutines the consumer starts inherit, so
// that a CPU profile splits by configuration.
func (c *benchCase) once(ctx context.Context, cfg *ConsumeConfig, name string) error {
	bl, err := seed(cfg, name, c.n)
	if err != nil {
		return err
	}
	defer bl.drop()
	c.last = bl
	runtime.GC() // start from the same heap: no collection owed by the seeding or an earlier consumption
	s := &settled{target: int64(c.n), done: make(chan struct{})}
	var took time.Duration
	pprof.Do(ctx, pprof.Labels("config", c.name), func(ctx context.Context) {
		took, err = c.consume(ctx, cfg, bl, s)
	})
	if err != nil {
		return err
	}
	if got := s.count.Load(); got != int64(c.n) {
		return fmt.Errorf("%d messages settled, want %d (redelivered after a rebalance?)", got, c.n)
	}
	c.spent = append(c.spent, took)
	c.cpu.add(s.cpu.use(c.n))
	return nil
}

// backlog is a seeded topic, its dead-letter topic and a fresh group.
type backlog struct {
	brokers []string
	admin   sarama.ClusterAdmin
	sarama  *sarama.Config
	topic   string
	dlq     string
	group   string
	n       int
	fail    map[string]bool  // ce_id of the messages meant to fail (1%)
	retry   map[string]bool  // ce_id of the messages meant to retry once (5%)
	keys    []map[string]int // messages by key, by partition
	// retryTopic is where a raw group's retries go (RawRetries): the
	// first retry tier's topic, which drop deletes.
	retryTopic string
}

// ceiling is the most msgs/s a handler taking d can reach on the backlog
// with Config.Workers workers: the busiest worker of the busiest partition
// handles its messages one after the other. Keys are spread over workers by
// CRC-32, as the runner does; with 1 worker this is the busiest partition.
func (bl *backlog) ceiling(workers int, d time.Duration) float64 {
	busiest := 0
	for _, keys := range bl.keys {
		load := make([]int, workers)
		for key, n := range keys {
			load[crc32.ChecksumIEEE([]byte(key))%uint32(workers)] += n
		}
		busiest = max(busiest, slices.Max(load))
	}
	return float64(bl.n) / (float64(busiest) * d.Seconds())
}

// seed creates a topic and its dead-letter topic and writes n messages to
// the topic. Keys come from a fixed-seed generator, so every configuration
// consumes the same backlog; each message has a new ce_id.
func seed(cfg *ConsumeConfig, name string, n int) (*backlog, error) {
	saramaCfg := cfg.Sarama()
	admin, err := sarama.NewClusterAdmin(cfg.Brokers, saramaCfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Kafka at %v: %w", cfg.Brokers, err)
	}
	bl := &backlog{
		brokers: cfg.Brokers, admin: admin, sarama: saramaCfg,
		topic: "courier.bench." + name, group: "courier.bench." + name,
		n: n, fail: map[string]bool{}, retry: map[string]bool{}, keys: make([]map[string]int, partitions),
	}
	for i := range bl.keys {
		bl.keys[i] = map[string]int{}
	}
	bl.dlq = dlq.Topic(bl.topic, consumer.DefaultDeadLetterSuffix)
	topo, err := retrytopics.New(bl.topic, retryTiers, consumer.DefaultDeadLetterSuffix)
	if err != nil {
		return nil, err
	}
	bl.retryTopic = topo.Topics()[0]
	for topic, parts := range map[string]int32{bl.topic: partitions, bl.dlq: 1} {
		if err := admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: parts, ReplicationFactor: 1}, false); err != nil {
			bl.drop()
			return nil, fmt.Errorf("create topic %s: %w", topic, err)
		}
	}
	if err := bl.write(n); err != nil {
		bl.drop()
		return nil, err
	}
	return bl, nil
}

// write produces the backlog's n messages.
func (bl *backlog) write(n int) error {
	sp, err := sarama.NewSyncProducer(bl.brokers, bl.sarama)
	if err != nil {
		return err
	}
	defer sp.Close()
	rng := rand.New(rand.NewPCG(13, 13))
	created := time.Now().UTC().Format(time.RFC3339Nano)
	msgs := make([]*sarama.ProducerMessage, 0, seedChunk)
	for i := range n {
		key := fmt.Sprintf("order-%d", rng.IntN(keys))
		id := uuid.Must(uuid.NewV7()).String()
		if i%failEvery == failEvery-1 {
			bl.fail[id] = true
		}
		if i%retryEvery == retryEvery-1 {
			bl.retry[id] = true
		}
		payload := orderPayload(key, i)
		msgs = append(msgs, &sarama.ProducerMessage{
			Topic: bl.topic,
			Key:   sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(payload),
			Headers: []sarama.RecordHeader{
				header(producer.HeaderSpecVersion, "1.0"),
				header(producer.HeaderID, id),
				header(producer.HeaderType, "OrderCreated"),
				header(producer.HeaderSource, producer.DefaultSource),
				header(producer.HeaderTime, created),
				header(producer.HeaderContentType, "application/json"),
				header(producer.HeaderCorrelationID, "corr-"+key),
			},
		})
		if len(msgs) == seedChunk || i == n-1 {
			if err := sp.SendMessages(msgs); err != nil {
				return fmt.Errorf("seed %s: %w", bl.topic, err)
			}
			for _, m := range msgs {
				bl.keys[m.Partition][string(m.Key.(sarama.StringEncoder))]++
			}
			msgs = msgs[:0]
		}
	}
	return nil
}

// drop deletes the backlog's topics (its retry topics too, if a runner
// created them) and closes its admin client.
func (bl *backlog) drop() {
	topics := []string{bl.topic, bl.dlq}
	if topo, err := retrytopics.New(bl.topic, retryTiers, consumer.DefaultDeadLetterSuffix); err == nil {
		topics = append(topics, topo.Topics()...)
	}
	for _, topic := range topics {
		_ = bl.admin.DeleteTopic(topic)
	}
	_ = bl.admin.Close()
}

// settled counts settled messages and closes done with the last.
type settled struct {
	target int64
	count  atomic.Int64
	done   chan struct{}
	cpu    cpuWindow // read by measure around the consuming
}

func (s *settled) add() {
	if s.count.Add(1) == s.target {
		close(s.done)
	}
}

// measure times the consumption, from when fetching starts (see
// ConsumeConfig.Fetching; now when nil) to the last settled message, failing
// after deadline for either. It reads the CPU counters at both ends too.
func (s *settled) measure(ctx context.Context, fetching <-chan struct{}) (time.Duration, error) {
	if fetching != nil {
		select {
		case <-fetching:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(deadline):
			return 0, fmt.Errorf("the group did not fetch within %v: did it join?", deadline)
		}
	}
	s.cpu.start()
	start := time.Now()
	select {
	case <-s.done:
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(deadline):
		return 0, fmt.Errorf("%d of %d messages settled within %v", s.count.Load(), s.target, deadline)
	}
	took := time.Since(start)
	s.cpu.stop()
	return took, nil
}

func (cfg *ConsumeConfig) fetching(topic string) <-chan struct{} {
	if cfg.Fetching == nil {
		return nil
	}
	return cfg.Fetching(topic)
}

// rawStep is what a raw group does with a message before it marks it; it
// returns what to close when the group is done.
type rawStep func(ctx context.Context, cfg *ConsumeConfig, bl *backlog) (func(*sarama.ConsumerMessage) error, func() error, error)

// rawGroup consumes with a Sarama consumer group, configured as the
// runner's default, whose ConsumeClaim runs step (nil: none, the Raw
// baseline) on each message, then marks it.
func rawGroup(step rawStep) consumeFunc {
	return func(ctx context.Context, cfg *ConsumeConfig, bl *backlog, s *settled) (time.Duration, error) {
		handle, closeStep := func(*sarama.ConsumerMessage) error { return nil }, func() error { return nil }
		if step != nil {
			var err error
			if handle, closeStep, err = step(ctx, cfg, bl); err != nil {
				return 0, err
			}
		}
		fetching := cfg.fetching(bl.topic)
		group, err := sarama.NewConsumerGroup(bl.brokers, bl.group, consumer.NewSaramaConfig())
		if err != nil {
			return 0, errors.Join(err, closeStep())
		}
		drained := make(chan struct{})
		go func() {
			defer close(drained)
			for err := range group.Errors() {
				cfg.Logger.Warn("raw consumer group error", "error", err)
			}
		}()
		runCtx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		failed := make(chan error, 1)
		wg.Go(func() {
			for runCtx.Err() == nil {
				if err := group.Consume(runCtx, []string{bl.topic}, marker{s, handle, failed}); err != nil && runCtx.Err() == nil {
					cfg.Logger.Warn("raw consumer group session failed", "error", err)
				}
			}
		})
		took, err := s.measure(runCtx, fetching)
		select {
		case ferr := <-failed:
			err = ferr
		default:
		}
		cancel()
		wg.Wait()
		err = errors.Join(err, group.Close(), closeStep())
		<-drained
		return took, err
	}
}

// marker is the raw group's handler: it runs handle on each message and
// marks it; the first failure of handle goes to failed, and ends the claim.
type marker struct {
	s      *settled
	handle func(*sarama.ConsumerMessage) error
	failed chan<- error
}

func (marker) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (marker) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h marker) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case <-sess.Context().Done():
			return nil
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			if err := h.handle(msg); err != nil {
				select {
				case h.failed <- err:
				default:
				}
				return err
			}
			sess.MarkMessage(msg, "")
			h.s.add()
		}
	}
}

// ceID is a message's ce_id header, "" without one.
func ceID(msg *sarama.ConsumerMessage) string {
	for _, h := range msg.Headers {
		if string(h.Key) == producer.HeaderID {
			return string(h.Value)
		}
	}
	return ""
}

// syncSend is the step of a raw group that sends each message of the set
// of ce_ids that meant returns to its topic with a SyncProducer, one
// message at a time, as a handler that writes its dead letters or retries
// itself does: key, value and headers as they came. Done, the topic must
// hold every message of the set, once.
func syncSend(meant func(bl *backlog) (ids map[string]bool, topic string)) rawStep {
	return func(_ context.Context, cfg *ConsumeConfig, bl *backlog) (func(*sarama.ConsumerMessage) error, func() error, error) {
		ids, topic := meant(bl)
		if topic == bl.retryTopic {
			if err := bl.admin.CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1}, false); err != nil {
				return nil, nil, fmt.Errorf("create topic %s: %w", topic, err)
			}
		}
		client, err := sarama.NewClient(bl.brokers, cfg.Sarama())
		if err != nil {
			return nil, nil, err
		}
		sp, err := sarama.NewSyncProducerFromClient(client)
		if err != nil {
			return nil, nil, errors.Join(err, client.Close())
		}
		send := func(msg *sarama.ConsumerMessage) error {
			if !ids[ceID(msg)] {
				return nil
			}
			headers := make([]sarama.RecordHeader, len(msg.Headers))
			for i, h := range msg.Headers {
				headers[i] = *h
			}
			_, _, err := sp.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(msg.Key),
				Value: sarama.ByteEncoder(msg.Value), Headers: headers})
			return err
		}
		check := func() error {
			err := sp.Close()
			hwm, herr := client.GetOffset(topic, 0, sarama.OffsetNewest)
			if err = errors.Join(err, herr); herr == nil && hwm != int64(len(ids)) {
				err = errors.Join(err, fmt.Errorf("%s holds %d records, want the %d sent", topic, hwm, len(ids)))
			}
			return errors.Join(err, client.Close())
		}
		return send, check, nil
	}
}

// setNX is the step of a raw group that claims each message's ce_id in
// Redis, SET NX EX for the dedupe window, one round trip a message, under
// a prefix of the backlog's that it deletes afterwards. A message whose id
// is taken fails the run: every id of a backlog is new.
func setNX(client redis.UniversalClient) rawStep {
	return func(ctx context.Context, _ *ConsumeConfig, bl *backlog) (func(*sarama.ConsumerMessage) error, func() error, error) {
		prefix := "courier:bench:" + bl.group + ":setnx:"
		return func(msg *sarama.ConsumerMessage) error {
				id := ceID(msg)
				fresh, err := client.SetNX(ctx, prefix+id, "1", dedupeWindow).Result()
				if err == nil && !fresh {
					err = fmt.Errorf("bench: message %s was seen before", id)
				}
				return err
			}, func() error {
				_, err := rediskeys.Delete(context.WithoutCancel(ctx), client, prefix)
				return err
			}, nil
	}
}

// runner consumes with a runner configured as rc plus the backlog's
// brokers, group and topic. handle is given the backlog, whose fail and
// retry sets say which messages are meant to fail. Messages are counted as settled through a MessageHook
// (handled or dead-lettered). Afterwards the dead-letter topic must hold
// exactly the messages meant to fail when handle failed them, else none.
func runner(rc consumer.Config, handle func(ctx context.Context, m *consumer.Message, bl *backlog) error) consumeFunc {
	return func(ctx context.Context, cfg *ConsumeConfig, bl *backlog, s *settled) (time.Duration, error) {
		var failed atomic.Int64
		rc.Brokers, rc.Group, rc.Topics = bl.brokers, bl.group, []string{bl.topic}
		rc.Handler = consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
			err := handle(ctx, m, bl)
			if err != nil {
				failed.Add(1)
			}
			return err
		})
		rc.Hooks = []consumer.Hook{settledMetrics{s: s, topic: bl.topic}}
		rc.Logger = cfg.Logger
		c, err := consumer.New(rc)
		if err != nil {
			return 0, err
		}
		fetching := cfg.fetching(bl.topic)
		runCtx, cancel := context.WithCancel(ctx)
		runErr := make(chan error, 1)
		go func() { runErr <- c.Run(runCtx) }()
		took, err := s.measure(ctx, fetching)
		cancel()
		select {
		case rerr := <-runErr:
			err = errors.Join(err, rerr)
		case <-time.After(30 * time.Second):
			err = errors.Join(err, errors.New("Run did not return within 30s of its context ending"))
		}
		if err != nil {
			return 0, err
		}
		want := 0
		if failed.Load() > 0 && len(rc.RetryTopics.Delays) == 0 {
			want = len(bl.fail)
		}
		return took, bl.checkDeadLetters(want)
	}
}

// handleAll is the handler of the runs without failures.
func handleAll(context.Context, *consumer.Message, *backlog) error { return nil }

// memoryDedupeRunner consumes with dedupe on, in a store of the backlog's
// own, so that no round starts with the ids of the rounds before.
func memoryDedupeRunner(ctx context.Context, cfg *ConsumeConfig, bl *backlog, s *settled) (time.Duration, error) {
	return runner(consumer.Config{Dedupe: consumer.DedupeConfig{Store: &memoryStore{}}}, handleAll)(ctx, cfg, bl, s)
}

// dedupeRunner consumes with Redis dedupe on, under a key prefix of the
// backlog's that it deletes afterwards. With a single Redis (a
// *redis.Client) it records in loads what the server spent meanwhile.
func dedupeRunner(client redis.UniversalClient, loads *redisLoads) consumeFunc {
	return func(ctx context.Context, cfg *ConsumeConfig, bl *backlog, s *settled) (time.Duration, error) {
		prefix := "courier:bench:" + bl.group + ":"
		store, err := dedupe.NewRedis(client, dedupe.RedisConfig{Scope: "bench", Prefix: prefix, Window: dedupeWindow})
		if err != nil {
			return 0, err
		}
		// The server's load is read when INFO answers (an ACL may refuse
		// it, as @dangerous); without it the run goes on, with no figure.
		single, _ := client.(*redis.Client)
		var before redisCounters
		var infoErr error
		if single != nil {
			before, infoErr = readRedisCounters(ctx, single)
		}
		took, err := runner(consumer.Config{Dedupe: consumer.DedupeConfig{Store: store}}, handleAll)(ctx, cfg, bl, s)
		if err == nil && single != nil && infoErr == nil {
			if after, infoErr := readRedisCounters(ctx, single); infoErr == nil {
				loads.add(before, after, took, bl.n)
			}
		}
		_, delErr := rediskeys.Delete(ctx, client, prefix)
		return took, errors.Join(err, delErr)
	}
}

// settledMetrics counts the messages of the main topic that are settled:
// handled, dead-lettered, or on their way through the retry tiers.
type settledMetrics struct {
	s     *settled
	topic string
}

func (m settledMetrics) Message(topic string, o consumer.Outcome) {
	if topic != m.topic {
		return
	}
	switch o {
	case consumer.OutcomeHandled, consumer.OutcomeDeadLettered, consumer.OutcomeSentToRetry:
		m.s.add()
	}
}

// checkDeadLetters fails unless the dead-letter topic holds want records,
// each the envelope of a distinct message meant to fail.
func (bl *backlog) checkDeadLetters(want int) error {
	cfg := bl.sarama
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	client, err := sarama.NewClient(bl.brokers, cfg)
	if err != nil {
		return err
	}
	defer client.Close()
	hwm, err := client.GetOffset(bl.dlq, 0, sarama.OffsetNewest)
	if err != nil {
		return err
	}
	if hwm != int64(want) {
		return fmt.Errorf("the dead-letter topic holds %d records, want %d", hwm, want)
	}
	if want == 0 {
		return nil
	}
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return err
	}
	defer c.Close()
	pc, err := c.ConsumePartition(bl.dlq, 0, sarama.OffsetOldest)
	if err != nil {
		return err
	}
	defer pc.Close()
	seen := map[string]bool{}
	for rec := range pc.Messages() {
		headers := make([]dlq.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			headers[i] = dlq.Header{Key: h.Key, Value: h.Value}
		}
		env, err := dlq.Read(rec.Key, rec.Value, headers)
		if err != nil {
			return fmt.Errorf("dead letter at offset %d: %w", rec.Offset, err)
		}
		o, err := env.Original()
		if err != nil {
			return fmt.Errorf("dead letter at offset %d: %w", rec.Offset, err)
		}
		id := ""
		for _, h := range o.Headers {
			if string(h.Key) == producer.HeaderID {
				id = string(h.Value)
			}
		}
		if !bl.fail[id] || seen[id] {
			return fmt.Errorf("dead letter at offset %d is of message %q: not meant to fail, or twice", rec.Offset, id)
		}
		seen[id] = true
		if rec.Offset+1 >= hwm {
			break
		}
	}
	return nil
}

// KfakeFetching is a ConsumeConfig.Fetching for the in-process broker: the
// channel closes when the cluster receives the first fetch of topic.
func KfakeFetching(cluster *kfake.Cluster) func(topic string) <-chan struct{} {
	return func(topic string) <-chan struct{} {
		ch := make(chan struct{})
		var once sync.Once
		cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
			for _, t := range req.(*kmsg.FetchRequest).Topics {
				if t.Topic == topic {
					once.Do(func() { close(ch) })
					cluster.DropControl()
				}
			}
			return nil, nil, false // observe only: the broker handles it
		})
		return ch
	}
}

// memoryStore is a dedupe.Store in maps, for measuring what deduplication
// costs the consumer itself. Claims never expire; it is good for one run.
// The ids are spread over shards, each with its own lock, so that the
// partitions' claims and done marks do not wait on one another: a single
// lock over a map of a million ids made the store, not the consumer, the
// limit.
type memoryStore struct {
	shards [memoryShards]memoryShard
}

// memoryShards is how many shards a memoryStore has.
const memoryShards = 64

// memoryShard is one lock's share of a memoryStore's ids.
type memoryShard struct {
	mu  sync.Mutex
	ids map[string]string // id → owner, or "" once done
}

// update runs fn on the map of each id's shard, under its lock.
func (s *memoryStore) update(ids []string, fn func(i int, ids map[string]string)) {
	for i, id := range ids {
		sh := &s.shards[crc32.ChecksumIEEE([]byte(id))%memoryShards]
		sh.mu.Lock()
		if sh.ids == nil {
			sh.ids = map[string]string{}
		}
		fn(i, sh.ids)
		sh.mu.Unlock()
	}
}

func (s *memoryStore) Claim(_ context.Context, owner string, ids []string, _ time.Duration) ([]dedupe.Status, error) {
	out := make([]dedupe.Status, len(ids))
	s.update(ids, func(i int, m map[string]string) {
		switch held, ok := m[ids[i]]; {
		case !ok:
			m[ids[i]] = owner
		case held == "":
			out[i] = dedupe.Processed
		default:
			out[i] = dedupe.Busy
		}
	})
	return out, nil
}

func (s *memoryStore) Done(_ context.Context, _ string, ids []string) error {
	s.update(ids, func(i int, m map[string]string) { m[ids[i]] = "" })
	return nil
}

func (s *memoryStore) Release(_ context.Context, owner string, ids []string) error {
	s.update(ids, func(i int, m map[string]string) {
		if m[ids[i]] == owner {
			delete(m, ids[i])
		}
	})
	return nil
}

func (s *memoryStore) Extend(context.Context, string, []string, time.Duration) error { return nil }
