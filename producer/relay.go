package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/breakerdefault"
	"github.com/courierkit/courier/internal/kafkaaddr"
	"github.com/courierkit/courier/internal/pgname"
	"github.com/courierkit/courier/record"
)

// Relay defaults.
const (
	DefaultSource    = "courier"
	DefaultBatchSize = 1000
	// DefaultWorkers is 4 because a worker spends most of a batch waiting
	// when PostgreSQL and Kafka are a hop away: a millisecond a statement,
	// and 5 ms or more for a produce with acks=all. Four workers keep the
	// waits overlapped (BENCHMARKS.md, the network profile); on loopback,
	// where the CPU is the limit, two drain about as fast.
	DefaultWorkers = 4
	// MaxWorkers bounds RelayConfig.Workers: the keys of a table are
	// split into this many shares.
	MaxWorkers           = shareCount
	DefaultPollInterval  = time.Second
	DefaultProbeInterval = 100 * time.Millisecond
	// DefaultMaxAttempts with the default Backoff dead-letters an event that
	// keeps failing after 10 attempts over about 2.5 minutes (1+2+4+8+16 s,
	// then 30 s four times: 151 s of backoff), longer than a leader
	// election or one broker's restart in a rolling restart takes, and
	// longer than the Java producer's delivery.timeout.ms (2 minutes).
	DefaultMaxAttempts      = 10
	DefaultBackoffBase      = time.Second
	DefaultBackoffFactor    = 2.0
	DefaultBackoffMax       = 30 * time.Second
	DefaultDeadLetterSuffix = dlq.DefaultSuffix
	DefaultBreakerFailures  = breakerdefault.Failures // 5, as the consumer's
	DefaultBreakerOpenFor   = breakerdefault.OpenFor  // 30s, as the consumer's
	DefaultBreakerProbes    = breakerdefault.Probes   // 1, as the consumer's
	DefaultPublishTimeout   = 30 * time.Second
	DefaultShutdownTimeout  = 10 * time.Second
	DefaultRetention        = 7 * 24 * time.Hour
	DefaultCleanupInterval  = time.Minute
	DefaultCleanupBatch     = 1000
	DefaultStatsInterval    = 15 * time.Second
	// DefaultMissingTopicGrace is how long a topic may be missing before
	// its events count attempts: long enough for a deploy that creates
	// topics after the service starts.
	DefaultMissingTopicGrace = 5 * time.Minute
)

// Relay bounds: NewRelay refuses values outside them, which could only
// overflow, spin or stall the relay later.
const (
	// MaxBatchSize bounds RelayConfig.BatchSize: one claim locks and holds
	// in memory at most this many events.
	MaxBatchSize = 100_000
	// MaxCleanupBatch bounds RelayConfig.CleanupBatch.
	MaxCleanupBatch = 1_000_000
	// MaxMaxAttempts bounds RelayConfig.MaxAttempts, as it bounds
	// Event.MaxAttempts: the table's retry_count is a 32-bit integer.
	MaxMaxAttempts = math.MaxInt32
	// MaxBreakerCount bounds BreakerConfig.ConsecutiveFailures and
	// BreakerConfig.HalfOpenProbes, as consumer.MaxBreakerCount does.
	MaxBreakerCount = breakerdefault.MaxCount
	// MinInterval is the shortest PollInterval, ProbeInterval,
	// CleanupInterval, StatsInterval and Backoff.Base: shorter ones would
	// make the relay loop on the database.
	MinInterval = time.Millisecond
	// MaxInterval bounds PollInterval, ProbeInterval and Backoff.Base and
	// Backoff.Max: an idle relay looks for new events at least hourly.
	MaxInterval = time.Hour
	// MinPublishTimeout is the shortest PublishTimeout: a shorter one would
	// cut every batch short, so that no event is ever published.
	MinPublishTimeout = 100 * time.Millisecond
	// MaxTimeout bounds PublishTimeout, ShutdownTimeout, BreakerConfig.OpenFor,
	// CleanupInterval and StatsInterval.
	MaxTimeout = 24 * time.Hour
	// MaxRetention bounds a positive RelayConfig.Retention (10 years); a
	// negative one keeps the history forever.
	MaxRetention = 10 * 365 * 24 * time.Hour
)

// BreakerConfig configures the circuit breaker around Kafka. While it is open the
// relay claims nothing and counts no attempts. It hears only of Kafka being
// unreachable: a batch none of whose records any broker answered (a refused
// connection, a network error or timeout, no broker left to ask). A broker
// that answers with an error for a topic, a partition or a record (an
// unknown topic, no leader, too few in-sync replicas, a record too large)
// fails those events alone, which retry and dead-letter on their own, and
// counts as Kafka reachable. Zero fields take defaults.
type BreakerConfig struct {
	// ConsecutiveFailures of Kafka being unreachable open the breaker.
	// At most MaxBreakerCount (10,000). Defaults to 5.
	ConsecutiveFailures int
	// OpenFor is how long the breaker stays open before it lets probes
	// through (half-open). At most MaxTimeout (24h). Defaults to 30s.
	OpenFor time.Duration
	// HalfOpenProbes is how many publish calls a half-open breaker lets
	// through; all must succeed to close it. At most MaxBreakerCount
	// (10,000). Defaults to 1.
	HalfOpenProbes int
}

// RelayConfig configures a Relay. Only Brokers (or Publisher) is required.
type RelayConfig struct {
	// Schema and Table name the outbox table. Default to "public" and
	// "courier_outbox".
	Schema, Table string

	// Brokers are the Kafka bootstrap addresses. Required unless Publisher
	// is set.
	Brokers []string
	// Sarama configures the Kafka producer (TLS, SASL, versions, …).
	// Defaults to NewSaramaConfig().
	Sarama *sarama.Config
	// DisableIdempotence makes the relay's produce requests plain ones. By
	// default they are idempotent, as Kafka's own producer's are: a
	// request the relay sends again because its answer was lost (a
	// dropped connection, a timeout after the leader appended) is dropped
	// by the broker instead of writing its events twice. Turn it off only
	// for a cluster that refuses it (before Kafka 2.8, idempotent writes
	// need the IdempotentWrite permission on the cluster; see
	// ErrIdempotenceRefused). Ignored when Publisher is set.
	DisableIdempotence bool
	// Publisher replaces the Sarama publisher built from Brokers and Sarama
	// (NewSaramaPublisher), e.g. to share one or to test. The relay does not
	// close it. It is the relay's only view of the broker: the relay passes
	// a batch's records (several of a key among them, in the order they
	// must reach Kafka, its dead letters among them) in one Publish call, so
	// it relies on the order record.Publisher promises; and its workers call
	// it at once.
	Publisher record.Publisher

	// Source is the CloudEvents source attribute (ce_source), usually the
	// service name: UTF-8 text of at most 256 bytes (MaxSourceBytes), which
	// Enqueue counts in the record it checks. Defaults to "courier".
	Source string
	// Structured publishes each event as a JSON CloudEvent (structured mode)
	// instead of the payload with ce_ headers (binary mode, the default).
	Structured bool

	// BatchSize is the most events one claim locks: 1 to MaxBatchSize
	// (100,000). Defaults to 1000.
	BatchSize int
	// Workers is how many batches the relay publishes at once, each over its
	// own part of the keys: the keys are divided among the workers of every
	// relay running against the table (see PollOnly), and the events of one
	// key go through one worker at a time, so workers never wait on each
	// other. Each holds a connection of the pool while it publishes, and
	// has connections of its own to the brokers. At most 64. Defaults to 4
	// (DefaultWorkers).
	Workers int
	// ProbeInterval is the longest an idle relay goes between two looks for
	// new events. A look is one small query (the queue's sequence, the
	// transactions in progress); while events come the relay looks every
	// millisecond, and each look that finds nothing doubles the gap up to
	// ProbeInterval. So an event waits about a millisecond while events
	// flow, and at most ProbeInterval after a quiet spell. From MinInterval
	// (1ms) to MaxInterval (1h). Defaults to 100ms.
	ProbeInterval time.Duration
	// PollInterval is how often a worker claims even though no look found
	// new events: the safety net. From MinInterval (1ms) to MaxInterval
	// (1h). Defaults to 1s.
	PollInterval time.Duration
	// PollOnly keeps the relay to what PgBouncer in transaction pooling
	// mode supports: it then holds no connection of its own besides the
	// pool's, and its workers divide the keys among themselves without
	// knowing of other relays (which still never claim a key at the same
	// time, but may wait for each other's keys). Defaults to false: the
	// relay keeps one connection on which each worker holds a session lock
	// naming it, and the workers of every relay divide the keys among them.
	PollOnly bool

	// MaxAttempts is how many failed attempts dead-letter an event that does
	// not set Event.MaxAttempts. An attempt fails only when a broker refuses
	// the record itself in a way a retry may get past (CORRUPT_MESSAGE), when
	// its topic has been missing for longer than MissingTopicGrace, or when
	// a RelayConfig.Publisher fails it with an error courier does not know.
	// The cluster's condition counts no attempt and never dead-letters an
	// event: no leader, a leader that moved, too few in-sync replicas, a
	// timeout, throttling, a refused access, a fate unknown, Kafka
	// unreachable; the event's partition is held instead, and its events
	// wait with Backoff until Kafka takes them. A record Kafka can never
	// take (too large, invalid, against the topic's policy) is dead-lettered
	// at once. At most MaxMaxAttempts (the 32-bit retry_count column's
	// largest value). Defaults to 10.
	MaxAttempts int
	// MissingTopicGrace is how long the cluster may answer that an event's
	// topic does not exist (UNKNOWN_TOPIC_OR_PARTITION) before its failures
	// count attempts; until then its events are held like any partition's.
	// The relay measures it from the first such answer it got, and starts
	// again when it restarts. Negative: never count them. At most
	// MaxTimeout (24h). Defaults to 5m.
	MissingTopicGrace time.Duration
	// Backoff schedules the retries. Zero fields take their defaults:
	// Base 1s, Factor 2, Max 30s, no jitter (so 1, 2, 4, 8, 16, 30, 30 s
	// …). Base and Max run from MinInterval (1ms) to MaxInterval (1h).
	Backoff backoff.Backoff
	// HoldKeyOnDeadLetter keeps the later events of a key waiting while an
	// earlier one is dead-lettered, until it is requeued or purged. By
	// default (false) the key moves on.
	HoldKeyOnDeadLetter bool
	// PublishDeadLetters also writes each dead-lettered event to
	// <topic><DeadLetterSuffix> as a dlq envelope. Dead-lettered events
	// always stay in the table until purged. Defaults to false.
	PublishDeadLetters bool

	// TracerProvider, when set, makes OpenTelemetry spans of what the
	// relay publishes: a "send" span per batch, and a "create <topic>" span
	// per event, a child of the span that enqueued it (the traceparent
	// Enqueue stored) and linked from its batch's span. The event is
	// published with its own span's traceparent, so that the consumer's
	// spans continue the same trace. nil (the default) makes no span and
	// costs nothing.
	TracerProvider trace.TracerProvider
	// DeadLetterSuffix names the dead-letter topic. Defaults to
	// DefaultDeadLetterSuffix, dlq.DefaultSuffix (".dlq").
	DeadLetterSuffix string
	// OnDeadLetter is called once for each dead-lettered event, after it is
	// recorded, e.g. to page the on-call. It runs on the relay's goroutine:
	// return quickly.
	OnDeadLetter func(context.Context, DeadLetter)

	// Breaker configures the circuit breaker around Kafka.
	Breaker BreakerConfig
	// PublishTimeout bounds the publishing of one batch; events it cuts
	// short count no attempt and are published again. From
	// MinPublishTimeout (100ms) to MaxTimeout (24h). Defaults to 30s.
	PublishTimeout time.Duration
	// ShutdownTimeout is how long Run lets the batch in flight finish after
	// its context ends. At most MaxTimeout (24h). Defaults to 10s.
	ShutdownTimeout time.Duration
	// ReadinessGrace is how long each worker of Run may go without a batch
	// that made progress (see Relay.Readiness) and the relay still be
	// ready. It must exceed PollInterval, the wait of an idle worker
	// between two batches. At most MaxTimeout (24h). Defaults to twice
	// the sum of PollInterval and PublishTimeout, at most 24h (62s with
	// their defaults): an idle worker runs a batch every PollInterval, and
	// a busy one takes up to PublishTimeout to publish it.
	ReadinessGrace time.Duration

	// Retention is how long published events stay in the history (the
	// table <table>_published) before the relay drops them; negative keeps
	// them forever. The history is partitioned by UTC day of publication
	// and drops whole days, so an event goes once its whole day is past
	// Retention: up to a day later. Dead-lettered events stay until purged.
	// At most MaxRetention (10 years). Defaults to 7 days.
	Retention time.Duration
	// DiscardPublished deletes each event once it is published instead of
	// keeping it in the history: a published event then costs PostgreSQL a
	// delete and no write, and Admin finds no published events. Defaults to
	// false.
	DiscardPublished bool
	// CleanupInterval is how often the relay makes the history's day
	// partitions ahead and drops those past Retention. From MinInterval
	// (1ms) to MaxTimeout (24h). Defaults to 1m.
	CleanupInterval time.Duration
	// CleanupBatch is the most rows one delete statement removes, where
	// retention deletes rows rather than partitions (the history's default
	// partition, idempotency keys). At most MaxCleanupBatch (1,000,000).
	// Defaults to 1000.
	CleanupBatch int

	// Logger receives the relay's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks receive the relay's measurements, each those of the hook
	// interfaces it implements (see Hook; package prom has one for
	// Prometheus). NewRelay refuses a hook that implements none. Defaults
	// to none.
	Hooks []Hook
	// StatsInterval is how often the relay measures the backlog for the
	// BacklogHook hooks.
	// From MinInterval (1ms) to MaxTimeout (24h). Defaults to 15s.
	StatsInterval time.Duration

	// Now is the relay's clock, for tests. When nil, the relay compares due
	// times with the database clock (which writes them) and stamps attempts
	// with time.Now.
	Now func() time.Time
}

// DeadLetter describes an event the relay gave up on.
type DeadLetter struct {
	EventID       uuid.UUID
	Topic         string
	Key           string
	Type          string
	TenantID      string
	CorrelationID string
	// Error is the last publish error, with the broker's reason.
	Error string
	// Permanent is true when no retry could have helped (e.g. the record is
	// larger than the broker accepts) and false when retries ran out.
	Permanent bool
	// Attempts is how many publish attempts failed (column retry_count;
	// retry_count in the dlq envelope).
	Attempts      int
	FirstFailedAt time.Time
	FailedAt      time.Time
}

// BatchResult counts what one RunOnce did.
type BatchResult struct {
	// Claimed events were locked by the claim.
	Claimed int
	// Published events were acknowledged by the broker.
	Published int
	// Failed events will be retried after their backoff.
	Failed int
	// DeadLettered events were given up on.
	DeadLettered int
	// Deferred events met an unreachable Kafka: no attempt is counted and
	// they are tried again after Backoff.Base.
	Deferred int
	// KafkaHeld events met the cluster's condition (no leader, too few
	// in-sync replicas, a timeout, a fate unknown, a partition already
	// held): no attempt is counted, and they wait until their partition's
	// hold is up.
	KafkaHeld int
	// Released events were claimed but not attempted and stay due: an older
	// event of their key failed in this batch, or the breaker opened.
	Released int
	// Held events were new and moved to wait, unattempted: their NotBefore
	// is ahead, or an earlier event of their key waits.
	Held int
	// BreakerOpen is true when the breaker was open, so nothing was claimed.
	BreakerOpen bool
}

// Relay moves committed outbox events to Kafka. Any number of relays, in
// any number of processes, may run against one table: each event is
// published by one of them at a time, and the events of one (topic, key)
// reach Kafka in the order they were enqueued.
type Relay struct {
	cfg       RelayConfig
	pool      *pgxpool.Pool
	table     pgname.Table
	store     *store
	publisher record.Publisher
	ownsPub   bool
	dlq       *dlq.Writer // renders the dead letters the relay writes
	breaker   *gobreaker.TwoStepCircuitBreaker[struct{}]
	backoff   backoff.Backoff
	log       *slog.Logger
	metrics   hooks
	tracer    trace.Tracer // nil without RelayConfig.TracerProvider

	dbClock bool // Now was not injected: due checks use the database clock

	presence *presence // divides the keys among the workers of every relay
	holds    *holds    // the partitions the cluster's condition holds

	vacuumFailed atomic.Bool // the failure to vacuum the queue was logged
	// unreachable is set while no broker answers, so that the outage is
	// logged once when it starts and once when it ends.
	unreachable atomic.Bool

	// stuck are the ids of events whose outcome PostgreSQL refused, left
	// where they were: this relay claims them no more (see isolate).
	// anyStuck spares the claims of a relay with none a lookup per event.
	stuck    sync.Map
	anyStuck atomic.Bool

	health relayHealth // what Liveness and Readiness read

	mu       sync.Mutex
	openedAt time.Time       // when the breaker last opened
	wake     []chan struct{} // one per worker
}

// errUnavailable is what the breaker is told when Kafka was unreachable.
var errUnavailable = errors.New("kafka unreachable")

// errNotTried is what the breaker is told of a batch that sent nothing to
// Kafka (every record failed to build): it counts neither way.
var errNotTried = errors.New("nothing sent to kafka")

// NewRelay applies cfg's defaults (see RelayConfig.WithDefaults), validates
// it and returns a Relay on pool. Call Run to start it. Every error of a bad
// config or a nil pool matches ErrInvalidConfig and names the field.
func NewRelay(pool *pgxpool.Pool, cfg RelayConfig) (*Relay, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: the pgxpool.Pool is nil", ErrInvalidConfig)
	}
	table, err := pgname.NewTable(cfg.Schema, cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	dbClock := cfg.Now == nil
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	metrics, err := newHooks(cfg.Hooks)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	r := &Relay{
		dbClock: dbClock,
		cfg:     cfg,
		pool:    pool,
		table:   table,
		store:   newStore(table, cfg.HoldKeyOnDeadLetter, cfg.DiscardPublished),
		backoff: cfg.Backoff,
		log:     cfg.Logger.With("table", table.String()),
		metrics: metrics,
	}
	for range cfg.Workers {
		r.wake = append(r.wake, make(chan struct{}, 1))
	}
	r.presence = &presence{r: r}
	r.holds = newHolds(cfg.Now, cfg.Backoff, r.log, &r.metrics)
	if cfg.TracerProvider != nil {
		r.tracer = cfg.TracerProvider.Tracer(tracerName)
	}
	r.publisher = cfg.Publisher
	if r.publisher == nil {
		opts := []PublisherOption{withHolds(r.holds)}
		if cfg.DisableIdempotence {
			opts = append(opts, WithoutIdempotence())
		}
		if r.publisher, err = NewSaramaPublisher(cfg.Brokers, cfg.Sarama, opts...); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
		}
		r.ownsPub = true
	}
	// The relay writes its dead letters itself, in its batches; the writer
	// renders them, as it does the consumer's.
	if r.dlq, err = dlq.NewWriter(r.publisher, dlq.WriterConfig{Suffix: cfg.DeadLetterSuffix}); err != nil {
		r.closePublisher()
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	r.breaker = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:        "kafka",
		MaxRequests: uint32(cfg.Breaker.HalfOpenProbes),
		Timeout:     cfg.Breaker.OpenFor,
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= uint32(cfg.Breaker.ConsecutiveFailures)
		},
		IsExcluded:    func(err error) bool { return errors.Is(err, errNotTried) },
		OnStateChange: r.breakerChanged,
	})
	return r, nil
}

// WithDefaults returns b with each zero field set to its default:
// DefaultBreakerFailures, DefaultBreakerOpenFor and DefaultBreakerProbes.
// RelayConfig.WithDefaults calls it for RelayConfig.Breaker.
func (b BreakerConfig) WithDefaults() BreakerConfig {
	durations, ints := b.bounds()
	for _, f := range durations {
		f.setDefault()
	}
	for _, f := range ints {
		f.setDefault()
	}
	return b
}

// bounds are b's fields, named as RelayConfig.Breaker's, with their
// defaults and ranges.
func (b *BreakerConfig) bounds() ([]bound[time.Duration], []bound[int]) {
	return []bound[time.Duration]{
			{"Breaker.OpenFor", &b.OpenFor, DefaultBreakerOpenFor, 1, MaxTimeout},
		}, []bound[int]{
			{"Breaker.ConsecutiveFailures", &b.ConsecutiveFailures, DefaultBreakerFailures, 1, MaxBreakerCount},
			{"Breaker.HalfOpenProbes", &b.HalfOpenProbes, DefaultBreakerProbes, 1, MaxBreakerCount},
		}
}

// validate refuses what b, its defaults applied, cannot run with, naming
// the field and its range.
func (b BreakerConfig) validate() error {
	durations, ints := b.bounds()
	if err := checkBounds(durations); err != nil {
		return err
	}
	return checkBounds(ints)
}

// WithDefaults returns c with every zero field that has a default set to
// it: Schema "public", Table "courier_outbox", the Default* constants,
// twice the sum of PollInterval and PublishTimeout for ReadinessGrace,
// slog.Default() for Logger, time.Now for Now. Sarama and Publisher stay as
// they are (NewRelay builds the producer), and a negative Retention stays
// negative (forever).
func (c RelayConfig) WithDefaults() RelayConfig {
	c.Schema, c.Table = defaultNames(c.Schema, c.Table)
	for _, f := range c.durationFields() {
		f.setDefault()
	}
	for _, f := range c.intFields() {
		f.setDefault()
	}
	c.Breaker = c.Breaker.WithDefaults()
	if c.ReadinessGrace == 0 {
		c.ReadinessGrace = min(2*(c.PollInterval+c.PublishTimeout), MaxTimeout)
	}
	c.Backoff = c.Backoff.WithDefaults(backoff.Backoff{Factor: DefaultBackoffFactor})
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.MissingTopicGrace == 0 {
		c.MissingTopicGrace = DefaultMissingTopicGrace
	}
	if c.Source == "" {
		c.Source = DefaultSource
	}
	if c.DeadLetterSuffix == "" {
		c.DeadLetterSuffix = DefaultDeadLetterSuffix
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// durationFields and intFields are c's bounded fields, with their defaults
// and ranges.
func (c *RelayConfig) durationFields() []bound[time.Duration] {
	return []bound[time.Duration]{
		{"PollInterval", &c.PollInterval, DefaultPollInterval, MinInterval, MaxInterval},
		{"ProbeInterval", &c.ProbeInterval, DefaultProbeInterval, MinInterval, MaxInterval},
		{"Backoff.Base", &c.Backoff.Base, DefaultBackoffBase, MinInterval, MaxInterval},
		{"Backoff.Max", &c.Backoff.Max, DefaultBackoffMax, MinInterval, MaxInterval},
		{"PublishTimeout", &c.PublishTimeout, DefaultPublishTimeout, MinPublishTimeout, MaxTimeout},
		{"ShutdownTimeout", &c.ShutdownTimeout, DefaultShutdownTimeout, 1, MaxTimeout},
		{"CleanupInterval", &c.CleanupInterval, DefaultCleanupInterval, MinInterval, MaxTimeout},
		{"StatsInterval", &c.StatsInterval, DefaultStatsInterval, MinInterval, MaxTimeout},
	}
}

func (c *RelayConfig) intFields() []bound[int] {
	return []bound[int]{
		{"BatchSize", &c.BatchSize, DefaultBatchSize, 1, MaxBatchSize},
		{"Workers", &c.Workers, DefaultWorkers, 1, MaxWorkers},
		{"MaxAttempts", &c.MaxAttempts, DefaultMaxAttempts, 1, MaxMaxAttempts},
		{"CleanupBatch", &c.CleanupBatch, DefaultCleanupBatch, 1, MaxCleanupBatch},
	}
}

// validate refuses what c, its defaults applied, cannot run with, naming
// the field and its range.
func (c RelayConfig) validate() error {
	if c.Publisher == nil && len(c.Brokers) == 0 {
		return errors.New("Brokers is empty; set the Kafka bootstrap addresses, e.g. []string{\"localhost:9092\"}")
	}
	if c.Publisher == nil {
		for i, b := range c.Brokers {
			if err := kafkaaddr.Validate(b); err != nil {
				return fmt.Errorf("Brokers[%d] %q %w", i, dlq.TruncateHeader(b), err)
			}
		}
	}
	if err := checkBounds(c.durationFields()); err != nil {
		return err
	}
	if err := checkBounds(c.intFields()); err != nil {
		return err
	}
	if err := c.Breaker.validate(); err != nil {
		return err
	}
	if err := c.Backoff.Validate(); err != nil {
		return fmt.Errorf("Backoff.%w", err)
	}
	if c.ReadinessGrace <= c.PollInterval || c.ReadinessGrace > MaxTimeout {
		return fmt.Errorf("ReadinessGrace is %v; use more than PollInterval (%v: an idle worker shows its progress once a PollInterval) and at most %v, "+
			"or 0 for the default of twice the sum of PollInterval and PublishTimeout", c.ReadinessGrace, c.PollInterval, MaxTimeout)
	}
	if c.MissingTopicGrace > MaxTimeout {
		return fmt.Errorf("MissingTopicGrace is %v; use at most %v, a negative duration to never count a missing topic's failures, or 0 for the default of %v",
			c.MissingTopicGrace, MaxTimeout, DefaultMissingTopicGrace)
	}
	if c.Retention > MaxRetention {
		return fmt.Errorf("Retention is %v; use at most %v, a negative duration to keep published events forever, or 0 for the default of %v", c.Retention, MaxRetention, DefaultRetention)
	}
	if err := checkText(c.Source, MaxSourceBytes); err != nil {
		return fmt.Errorf("Source: %w (Enqueue counts a ce_source of at most %d bytes in the records it accepts)", err, MaxSourceBytes)
	}
	if err := validTopic("t" + c.DeadLetterSuffix); err != nil {
		return fmt.Errorf("DeadLetterSuffix %q: %w", c.DeadLetterSuffix, err)
	}
	return nil
}

// bound is a config field that 0 sets to its default, with its range.
type bound[T int | time.Duration] struct {
	name          string
	value         *T
	def, min, max T
}

// setDefault sets a zero field to its default.
func (f bound[T]) setDefault() {
	if *f.value == 0 {
		*f.value = f.def
	}
}

// checkBounds refuses fields outside their range.
func checkBounds[T int | time.Duration](fields []bound[T]) error {
	for _, f := range fields {
		if *f.value < f.min || *f.value > f.max {
			return fmt.Errorf("%s is %v; use %v to %v, or 0 for the default of %v", f.name, *f.value, f.min, f.max, f.def)
		}
	}
	return nil
}

// queryNow is the time the relay's queries compare due times with: NULL,
// meaning the database clock, unless a clock was injected.
func (r *Relay) queryNow() pgtype.Timestamptz {
	if r.dbClock {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: r.cfg.Now(), Valid: true}
}

// Held returns the partitions the cluster's condition holds now, the
// longest held first; none while Kafka takes every write.
func (r *Relay) Held() []HeldPartition { return r.holds.list() }

// Breaker returns the state of the circuit breaker around Kafka.
func (r *Relay) Breaker() BreakerState { return breakerState(r.breaker.State()) }

func breakerState(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateOpen:
		return BreakerOpen
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	default:
		return BreakerClosed
	}
}

func (r *Relay) breakerChanged(_ string, from, to gobreaker.State) {
	if to == gobreaker.StateOpen {
		r.mu.Lock()
		r.openedAt = time.Now()
		r.mu.Unlock()
	}
	r.log.Warn("kafka circuit breaker changed", "from", breakerState(from).String(), "to", breakerState(to).String())
	r.metrics.BreakerChanged(breakerState(to))
}

// untilHalfOpen is how long an open breaker stays open from now.
func (r *Relay) untilHalfOpen() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(time.Until(r.openedAt.Add(r.cfg.Breaker.OpenFor)), time.Millisecond)
}

// Wake makes an idle Run look for due events now: call it after a commit
// that enqueued events, in a process that runs its relay, to publish them
// without waiting for the relay to notice.
func (r *Relay) Wake() {
	for _, w := range r.wake {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// RunOnce claims one batch of due events, publishes it and records the
// outcome, in one transaction. Run calls it in a loop, one per worker; call
// it yourself to drive a relay by hand (e.g. from a scheduler or a test).
func (r *Relay) RunOnce(ctx context.Context) (BatchResult, error) {
	return r.runOnce(ctx, homeShares(0, 1))
}

// homeShares are the shares worker index of workers claims from: every
// workers-th one. Together a relay's workers cover every share.
func homeShares(index, workers int) []int32 {
	var shares []int32
	for s := index; s < shareCount; s += workers {
		shares = append(shares, int32(s))
	}
	return shares
}

func (r *Relay) runOnce(ctx context.Context, shares []int32) (BatchResult, error) {
	if r.breaker.State() == gobreaker.StateOpen {
		return BatchResult{BreakerOpen: true}, nil
	}
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return BatchResult{}, fmt.Errorf("producer: claim from %s: %w", r.table, err)
	}
	defer conn.Release()
	start := time.Now()
	c, err := r.store.claim(ctx, conn.Conn(), r.queryNow(), r.cfg.BatchSize, shares, r.cfg.PublishTimeout+r.cfg.ShutdownTimeout)
	if err != nil {
		return BatchResult{}, r.store.undefinedObject(err)
	}
	var stages BatchStages
	stages.Claim = time.Since(start)
	r.holds.sweep(r.holdQuiet())
	send, held := r.admit(c)
	res := BatchResult{Claimed: len(send) + len(held), Held: len(held)}
	r.metrics.Claimed(res.Claimed)
	out := batchOutcome{settlements: held}
	if len(send) > 0 {
		published := time.Now()
		sent := r.publishBatch(ctx, send, c.sleeping, &res)
		out.settlements = append(out.settlements, sent.settlements...)
		out.dead, out.acks, out.took = sent.dead, sent.acks, sent.took
		stages.Publish = time.Since(published)
	}
	settled := time.Now()
	isolated, err := r.store.settle(ctx, c, r.queryNow(), out.settlements, out.answered())
	if err != nil {
		return res, err
	}
	stages.Settle = time.Since(settled)
	if res.Claimed > 0 {
		r.metrics.Batch(res.Claimed, stages)
	}
	out.dead = r.isolate(ctx, isolated, out.dead)
	// Only now, with the outcome committed, is it true.
	for _, a := range out.acks {
		r.metrics.Published(a.topic, a.tenant, a.latency)
	}
	for _, d := range out.dead {
		r.metrics.DeadLettered(d.Topic, d.TenantID)
		if r.cfg.OnDeadLetter != nil {
			r.cfg.OnDeadLetter(ctx, d)
		}
	}
	return res, nil
}

// holdQuiet is how long a hold lasts with no event failing on it: longer
// than any of its events waits (Backoff.Max), is claimed (PollInterval)
// and published (PublishTimeout), twice over.
func (r *Relay) holdQuiet() time.Duration {
	return 2 * (r.cfg.Backoff.Max + r.cfg.PollInterval + r.cfg.PublishTimeout)
}

// isolate logs the events whose outcome PostgreSQL refused for their data
// (see store.settle) and what became of them instead, and remembers those
// left where they were so that this relay leaves them alone from now on.
// It returns dead, the batch's dead letters, with those of events that
// could not be dead-lettered taken out and those of events dead-lettered
// instead of waiting added.
func (r *Relay) isolate(ctx context.Context, isolated []isolatedRow, dead []DeadLetter) []DeadLetter {
	var more []DeadLetter
	notDead := map[uuid.UUID]bool{}
	for _, row := range isolated {
		notDead[row.e.ID] = row.then != fateDead
		e := row.e
		switch row.then {
		case fateDiscarded:
			r.logFailure(ctx, slog.LevelError, "event published, but PostgreSQL refused to keep it in the history; it was deleted from the outbox",
				e, row.err, "seq", e.seq)
		case fateDead:
			r.logFailure(ctx, slog.LevelError, "PostgreSQL refused to keep the event waiting; it was dead-lettered instead",
				e, row.err, "seq", e.seq)
			if !slices.ContainsFunc(dead, func(d DeadLetter) bool { return d.EventID == e.ID }) {
				more = append(more, e.deadLetter(fmt.Errorf("PostgreSQL refused to keep it waiting: %w", row.err), false, r.cfg.Now()))
			}
		case fateStuck:
			r.logFailure(ctx, slog.LevelError, "PostgreSQL refused to dead-letter the event; it waits in the outbox table, never due, "+
				"until an operator requeues or purges it", e, row.err, "seq", e.seq)
		case fateStays:
			r.stuck.Store(e.ID, struct{}{})
			r.anyStuck.Store(true)
			r.logFailure(ctx, slog.LevelError, "PostgreSQL refused to record the event's outcome; it stays where it is, and this relay "+
				"leaves it alone until it restarts: fix the row or purge the event", e, row.err, "seq", e.seq)
		}
	}
	dead = slices.DeleteFunc(dead, func(d DeadLetter) bool { return notDead[d.EventID] })
	return append(dead, more...)
}

// isStuck reports whether the event is one this relay leaves alone, its
// outcome refused by PostgreSQL (see isolate).
func (r *Relay) isStuck(id uuid.UUID) bool {
	if !r.anyStuck.Load() {
		return false
	}
	_, ok := r.stuck.Load(id)
	return ok
}

// admit picks what a claim publishes: every due waiting event it read, then
// new events up to BatchSize in all. A new event that must not go yet moves
// to waiting instead (the settlements it returns): one whose NotBefore is
// ahead, one whose key has events waiting, and those behind either of these
// in their key, so that none overtakes an earlier event of its key.
func (r *Relay) admit(c *claim) (send []*claimedEvent, held []settlement) {
	for i := range c.waiting {
		if !r.isStuck(c.waiting[i].ID) {
			send = append(send, &c.waiting[i])
		}
	}
	queued := c.queued[:min(len(c.queued), max(r.cfg.BatchSize-len(c.waiting), 0))]
	behind := map[topicKey]bool{}
	for i := range queued {
		e := &queued[i]
		if r.isStuck(e.ID) {
			continue
		}
		k, keyed := keyOf(e)
		if !e.blocked && !e.scheduled && !(keyed && behind[k]) {
			send = append(send, e)
			continue
		}
		if keyed {
			behind[k] = true
		}
		held = append(held, settlement{e: e, fate: fateWait, status: StatusPending})
	}
	return send, held
}

// batchOutcome is what a batch did, to record and then to report.
type batchOutcome struct {
	settlements []settlement
	dead        []DeadLetter
	acks        []ack
	// took are the partitions whose holds the batch saw end: it published
	// an event held on one, the broker answered for such an event's record
	// itself, an acknowledgement ended this relay's hold of one, or, while
	// events sleep, the broker took a write on one or answered for a
	// record on it. Their sleepers wake (see wakeHeldSQL).
	took map[topicPartition]bool
}

// wake adds the partitions of topic to out.took.
func (out *batchOutcome) wake(topic string, partitions ...int32) {
	if out.took == nil {
		out.took = map[topicPartition]bool{}
	}
	for _, p := range partitions {
		out.took[topicPartition{topic, p}] = true
	}
}

// answered lists out.took.
func (out *batchOutcome) answered() []topicPartition {
	return slices.Collect(maps.Keys(out.took))
}

// ack is one acknowledged event, for the metrics.
type ack struct {
	topic, tenant string
	latency       time.Duration
}

type topicKey struct{ topic, key string }

// keyOf is the (topic, key) an event keeps its order within, and false for
// an event without a key, which keeps no order.
func keyOf(e *claimedEvent) (topicKey, bool) {
	if e.Key == nil {
		return topicKey{}, false
	}
	return topicKey{e.Topic, *e.Key}, true
}

// publishBatch publishes a batch in one Publish call, which keeps the order
// of each key's events and never acknowledges one after it failed an
// earlier one of its key (see record.Publisher). The first failure of a key
// decides that event's fate (a retry, a deferral or a dead letter); the
// events behind it are released to a later batch without counting an
// attempt.
// Events given up on in an earlier batch, whose dead-letter write failed,
// are written to the dead-letter topic first, and a write that fails again
// holds back the later events of their key.
// Each partition of sleeping (its events sleep through a hold, see
// sleepingSQL) that the broker takes a write on or answers for a record on
// wakes its sleepers: whatever held it is over, however this relay learnt
// it.
func (r *Relay) publishBatch(ctx context.Context, events []*claimedEvent, sleeping partitionSet, res *BatchResult) batchOutcome {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PublishTimeout)
	defer cancel()

	var out batchOutcome
	stopped := map[topicKey]bool{}       // keys whose later events wait for the next batch
	asleep := map[topicKey]pgtype.Int4{} // stopped keys whose stopper a hold keeps, and its partition
	probing := map[topicPartition]bool{} // held partitions with a probe in the batch
	stop := func(e *claimedEvent) {
		if k, ok := keyOf(e); ok {
			stopped[k] = true
		}
	}
	// released is an event held back behind a stopped event of its key: a
	// new one moves to waiting behind it, a waiting one stays; behind a
	// stopper a hold keeps, either sleeps, as the partition's other
	// events do, until the partition takes writes (see settleHeld).
	released := func(e *claimedEvent) bool {
		k, ok := keyOf(e)
		if !ok || !stopped[k] {
			return false
		}
		res.Released++
		heldOn, behindHeld := asleep[k]
		switch {
		case behindHeld:
			out.settlements = append(out.settlements, settlement{e: e, fate: fateWait, status: unattempted(e), delay: r.holdSleep(), heldOn: heldOn})
		case e.from == fromQueue:
			out.settlements = append(out.settlements, settlement{e: e, fate: fateWait, status: StatusPending})
		}
		return true
	}
	var send []*claimedEvent
	var redead []deadCandidate
	for _, e := range events {
		if e.Attempts >= r.maxAttempts(e) {
			redead = append(redead, deadCandidate{e: e, err: errors.New(lastError(e))})
		} else {
			send = append(send, e)
		}
	}
	if len(redead) > 0 {
		r.recordDead(ctx, redead, res, &out, stop)
		send = slices.DeleteFunc(send, released)
	}
	if len(send) == 0 {
		return out
	}
	done, err := r.breaker.Allow()
	if err != nil {
		res.Released += len(send)
		return out
	}
	// A refused event's dead letter is written after this send: when it
	// goes to a topic or holds its key, the key waits for it.
	hold := r.cfg.HoldKeyOnDeadLetter || r.cfg.PublishDeadLetters
	spans := r.startSpans(ctx, send)
	errs := r.sendRetriesApart(ctx, send, hold)
	spans.end(send, errs)
	// The breaker hears only whether Kafka answered: a record acknowledged
	// or refused by a broker says it did; one no broker answered says it
	// did not (see failUnavailable).
	// The acknowledgements' latencies are only measured for a hook that
	// hears them.
	acked := len(r.metrics.published)+len(r.metrics.tenantPublished) > 0
	answered := false
	var unreachableErr error // set when no broker answered some event
	now := r.cfg.Now()
	var dead []deadCandidate
	for i, e := range send {
		if errs[i] == nil {
			answered = true
			res.Published++
			out.settlements = append(out.settlements, settlement{e: e, fate: fatePublished})
			if e.endedHold || e.heldOn.Valid || sleeping.has(e.Topic, e.partition) {
				out.wake(e.Topic, e.partition, anyPartition)
			}
			if e.heldOn.Valid {
				out.wake(e.Topic, e.heldOn.Int32)
			}
			if acked {
				out.acks = append(out.acks, ack{topic: e.Topic, tenant: e.tenant(), latency: now.Sub(e.CreatedAt)})
			}
			continue
		}
		if released(e) {
			continue
		}
		stop(e)
		class := r.classify(e, errs[i], now)
		r.metrics.PublishFailed(e.Topic, e.tenant(), class.String())
		if e.heldOn.Valid && class != failHeld && class != failUnavailable {
			// The broker answered for the record itself: whatever held
			// its partition is over (a topic missing past its grace).
			out.wake(e.Topic, e.heldOn.Int32)
		}
		// A record refused before it was sent (it could not be built, its
		// partition is held) says nothing of Kafka.
		if class != failUnavailable && !errors.As(errs[i], new(permanentError)) && !errors.As(errs[i], new(heldError)) {
			answered = true
			if tp := placeOf(e, errs[i]); class != failHeld && sleeping.has(tp.topic, tp.partition) {
				out.wake(tp.topic, tp.partition, anyPartition)
			}
		}
		switch {
		case class == failHeld:
			// The cluster's condition: no attempt is counted; the event
			// waits until its partition's hold is up.
			res.KafkaHeld++
			st := r.settleHeld(e, errs[i], now, probing)
			if k, keyed := keyOf(e); keyed && st.heldOn.Valid {
				asleep[k] = st.heldOn
			}
			out.settlements = append(out.settlements, st)
		case class == failUnavailable:
			// Kafka could not take it: no attempt is counted; the event
			// waits a moment so that others get their turn.
			unreachableErr = errs[i]
			res.Deferred++
			out.settlements = append(out.settlements, settlement{e: e, fate: fateWait, status: unattempted(e),
				err: dlq.TruncateError(errs[i].Error()), delay: r.backoff.Delay(1, rand.Float64)})
		case class == failPermanent || e.Attempts+1 >= r.maxAttempts(e):
			dead = append(dead, deadCandidate{e: e, err: errs[i], attempted: true})
		default:
			res.Failed++
			delay := r.backoff.Delay(e.Attempts+1, rand.Float64)
			out.settlements = append(out.settlements, settlement{e: e, fate: fateWait, status: StatusFailed, attempted: true,
				err: dlq.TruncateError(errs[i].Error()), delay: delay})
			r.logFailure(ctx, slog.LevelWarn, "publish failed; will retry", e, errs[i], "retry_count", e.Attempts+1, "retry_in", delay)
		}
	}
	switch {
	case answered:
		done(nil)
	case unreachableErr != nil:
		done(errUnavailable)
	default:
		done(errNotTried)
	}
	r.noteReachable(answered, unreachableErr)
	if len(dead) > 0 {
		r.recordDead(ctx, dead, res, &out, stop)
	}
	return out
}

// settleHeld is the outcome of e, whose partition the cluster's condition
// holds (err): it waits, with no attempt counted, as the hold says (see
// holds.fail). The probe of a step is due when the hold is up; every other
// event of the partition, those behind the probe in its key too, sleeps
// until a batch publishes to the partition (see wakeHeldSQL), or for
// holdSleep at most, so that neither the claims nor the broker see them
// while the hold lasts. Both record the partition they wait for. A waiting
// event so kept puts to sleep the events of its key behind it that would
// otherwise be due before it (sleepBehindHeldSQL): those a batch could
// not claim with it, and those whose sleep ran out first.
//
// Each relay keeps holds of its own, and the probe of one may be claimed
// by another whose hold is not up (or woken with others by holdSleep): so
// the first waiting event of a partition in a batch that this relay's
// hold kept unsent stays a probe, until this relay's hold is up. probing
// notes the partitions with a probe in the batch.
func (r *Relay) settleHeld(e *claimedEvent, err error, now time.Time, probing map[topicPartition]bool) settlement {
	tp := placeOf(e, err)
	st := settlement{e: e, fate: fateWait, status: unattempted(e), err: dlq.TruncateError(err.Error())}
	wait, role := r.holds.fail(tp, now, err)
	if role == heldAsleep && e.from == fromWaiting && !probing[tp] && errors.As(err, new(heldError)) {
		role = heldProbe
	}
	switch role {
	case heldProbe:
		probing[tp] = true
		st.delay = wait
	case heldAsleep:
		st.delay = r.holdSleep()
	default:
		return st // its hold ended meanwhile: due at once
	}
	st.heldOn = pgtype.Int4{Int32: tp.partition, Valid: true}
	if e.from == fromWaiting {
		st.sleepBehind = r.holdSleep()
	}
	return st
}

// holdSleep is the longest an event a held partition keeps sleeps without
// its probe published: ten of the longest backoff steps, and five minutes
// at least. It wakes the events of a probe that went some other way
// (purged by an operator); they find their partition still held, or
// published, and the former sleep again.
func (r *Relay) holdSleep() time.Duration {
	return max(10*r.cfg.Backoff.Max, 5*time.Minute)
}

// unattempted is the status of an event that waits without an attempt
// counted: a new one is pending; a waiting one keeps its status ("").
func unattempted(e *claimedEvent) string {
	if e.from == fromWaiting {
		return ""
	}
	return StatusPending
}

// classify sorts err, the failure of e's publish, as classify does, except
// that a topic missing for longer than MissingTopicGrace counts attempts.
func (r *Relay) classify(e *claimedEvent, err error, now time.Time) failureClass {
	class := classify(err)
	if class == failHeld && missingTopic(err) && !errors.As(err, new(heldError)) && !errors.As(err, new(fateUnknownError)) &&
		r.holds.missingFor(e.Topic, now) >= r.cfg.MissingTopicGrace && r.cfg.MissingTopicGrace >= 0 {
		return failRefused
	}
	return class
}

// placeOf is the partition err says e's record was for, or its whole topic.
func placeOf(e *claimedEvent, err error) topicPartition {
	var held heldError
	if errors.As(err, &held) {
		return held.topicPartition
	}
	var placed placedError
	if errors.As(err, &placed) {
		return placed.topicPartition
	}
	return topicPartition{e.Topic, anyPartition}
}

// noteReachable logs, once each, that no broker answers (with the brokers
// and what the first deferred record met) and that one answers again.
func (r *Relay) noteReachable(answered bool, unreachableErr error) {
	switch {
	case answered:
		if r.unreachable.CompareAndSwap(true, false) {
			r.log.Info("Kafka answers again; publishing the events that waited", "brokers", r.brokersText())
		}
	case unreachableErr != nil:
		switch {
		case !r.unreachable.CompareAndSwap(false, true):
		case errors.Is(unreachableErr, ErrIdempotenceRefused):
			r.log.Error("Kafka refuses the relay a producer id for idempotent writes; events wait in the outbox, none lost, and are published once it grants one",
				"brokers", r.brokersText(), "error", unreachableErr)
		default:
			r.log.Warn("cannot reach Kafka; events wait in the outbox, none lost, and are published once a broker answers",
				"brokers", r.brokersText(), "error", unreachableErr)
		}
	}
}

// brokersText names the brokers the relay publishes to, for a log line.
func (r *Relay) brokersText() string {
	if len(r.cfg.Brokers) == 0 {
		return "those of RelayConfig.Publisher"
	}
	return strings.Join(r.cfg.Brokers, ",")
}

// recordDead gives up on dead and adds the outcome to out; stop holds back
// the key of an event whose dead-letter write failed, and of every dead
// letter when keys hold on dead letters.
func (r *Relay) recordDead(ctx context.Context, dead []deadCandidate, res *BatchResult, out *batchOutcome, stop func(*claimedEvent)) {
	settlements, letters := r.deadLetter(ctx, dead, res)
	for i, st := range settlements {
		if st.fate != fateDead || r.cfg.HoldKeyOnDeadLetter {
			stop(dead[i].e)
		}
	}
	out.settlements = append(out.settlements, settlements...)
	out.dead = append(out.dead, letters...)
}

// errHeldBack is the error of an event not sent because an earlier event of
// its key could not be.
var errHeldBack = errors.New("producer: not sent: an earlier event of its key could not be")

// lastError is the error an event was last given up with.
func lastError(e *claimedEvent) string {
	if e.LastError != nil {
		return *e.LastError
	}
	return "retries exhausted"
}

// isolatedKeys bounds how many keys of a batch sendRetriesApart sends in
// calls of their own; the others go together.
const isolatedKeys = 64

// isolatedCalls bounds how many of those calls run at once.
const isolatedCalls = 8

// sendRetriesApart sends events as send does, except the keys whose first
// event in the batch is a retry of a failed attempt (and each such event
// without a key): each goes in a Publish call of its own. A broker refuses a
// partition's record batch whole, so an event that keeps failing (a poison
// event, one for a partition that refuses it) would otherwise take the
// events of other keys sharing its partition down with it, on every retry,
// until they were dead-lettered beside it. Apart, the poison fails alone
// and the others, failed once with it, go through on their first retry.
func (r *Relay) sendRetriesApart(ctx context.Context, events []*claimedEvent, hold bool) []error {
	build := func(_ int, e *claimedEvent) (*record.Record, error) { return r.record(e) }
	if !slices.ContainsFunc(events, func(e *claimedEvent) bool { return e.status == StatusFailed }) {
		return r.send(ctx, events, hold, build) // no retry in the batch: one call, as always
	}
	group := map[topicKey]int{} // key → index in groups
	var groups [][]int          // indexes into events, one call each
	var rest []int
	seen := map[topicKey]bool{}
	for i, e := range events {
		k, keyed := keyOf(e)
		if !keyed {
			// An event without a key is its own group when it is a retry.
			if e.status == StatusFailed && len(groups) < isolatedKeys {
				groups = append(groups, []int{i})
			} else {
				rest = append(rest, i)
			}
			continue
		}
		g, grouped := group[k]
		switch {
		case grouped:
			groups[g] = append(groups[g], i)
		case !seen[k] && e.status == StatusFailed && len(groups) < isolatedKeys:
			group[k] = len(groups)
			groups = append(groups, []int{i})
		default:
			rest = append(rest, i)
		}
		seen[k] = true
	}
	if len(groups) == 0 {
		return r.send(ctx, events, hold, build)
	}
	errs := make([]error, len(events))
	sendPart := func(idx []int) {
		part := make([]*claimedEvent, len(idx))
		for j, i := range idx {
			part[j] = events[i]
		}
		for j, err := range r.send(ctx, part, hold, build) {
			errs[idx[j]] = err
		}
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, isolatedCalls)
	for _, idx := range append(groups, rest) {
		if len(idx) == 0 {
			continue
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			sendPart(idx)
		})
	}
	wg.Wait()
	return errs
}

// send publishes records built for events in one call. A record refused for
// good is sent once more on its own before it is believed: a broker refuses
// a whole record batch for one oversized record, and its neighbours must not
// pay for it. These resends go one at a time in event order. Once one fails
// for a reason other than the record itself, or for any reason when
// holdOnRefusal (the refused event's dead letter must be written before its
// key moves on), the later events of its key are not resent and fail with
// errHeldBack, so that none overtakes it. A record that cannot be built is
// refused for good, and the later events of its key are not sent either.
func (r *Relay) send(ctx context.Context, events []*claimedEvent, holdOnRefusal bool,
	build func(int, *claimedEvent) (*record.Record, error),
) []error {
	errs := make([]error, len(events))
	records := make([]*record.Record, 0, len(events))
	index := make([]int, 0, len(events))
	unbuilt := map[topicKey]bool{}
	for i, e := range events {
		k, keyed := keyOf(e)
		if keyed && unbuilt[k] {
			errs[i] = errHeldBack
			continue
		}
		rec, err := build(i, e)
		if err != nil {
			errs[i] = permanentError{err}
			unbuilt[k] = keyed
			continue
		}
		records = append(records, rec)
		index = append(index, i)
	}
	for j, err := range r.publisher.Publish(ctx, records) {
		errs[index[j]] = err
		if err == nil {
			e := events[index[j]]
			e.partition = records[j].Partition
			e.endedHold = r.holds.published(topicPartition{records[j].Topic, records[j].Partition})
		}
	}
	if len(records) > 1 {
		held := map[topicKey]bool{}
		for j, i := range index {
			k, keyed := keyOf(events[i])
			switch {
			case errs[i] == nil:
			case keyed && held[k]:
				errs[i] = errHeldBack
			case classify(errs[i]) == failPermanent:
				if errs[i] = r.publisher.Publish(ctx, records[j:j+1])[0]; errs[i] == nil {
					events[i].partition = records[j].Partition
					events[i].endedHold = r.holds.published(topicPartition{records[j].Topic, records[j].Partition})
				}
				if errs[i] != nil && keyed && (holdOnRefusal || classify(errs[i]) != failPermanent) {
					held[k] = true
				}
			}
		}
	}
	return errs
}

// record is the record the relay publishes for e, as RelayConfig.Structured
// says.
func (r *Relay) record(e *claimedEvent) (*record.Record, error) {
	if e.invalid != nil {
		return nil, e.invalid
	}
	if r.cfg.Structured {
		return e.structuredRecord(r.cfg.Source)
	}
	return e.binaryRecord(r.cfg.Source), nil
}

// maxAttempts is the event's own MaxAttempts, or the relay's: a row whose
// max_retries is not positive (Enqueue writes none such) takes the relay's,
// rather than being given up on untried.
func (r *Relay) maxAttempts(e *claimedEvent) int {
	if e.MaxAttempts != nil && *e.MaxAttempts > 0 {
		return *e.MaxAttempts
	}
	return r.cfg.MaxAttempts
}

func (r *Relay) logFailure(ctx context.Context, level slog.Level, msg string, e *claimedEvent, err error, attrs ...any) {
	attrs = append(attrs, "event_id", e.ID, "topic", clip(e.Topic), "error", err)
	for _, a := range []struct {
		key   string
		value *string
	}{{"partition_key", e.Key}, {"tenant_id", e.TenantID}, {"correlation_id", e.CorrelationID}} {
		if a.value != nil {
			attrs = append(attrs, a.key, clip(*a.value))
		}
	}
	r.log.Log(ctx, level, msg, attrs...)
}

// clipBytes is the most of a row's topic, key or id the relay logs: a row
// written around Enqueue may hold megabytes.
const clipBytes = 256

// clip cuts s to clipBytes for a log, saying how long it was.
func clip(s string) string {
	if len(s) <= clipBytes {
		return s
	}
	return strings.ToValidUTF8(s[:clipBytes], "") + fmt.Sprintf("... (%d bytes)", len(s))
}
