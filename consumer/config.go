package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/kafkaaddr"
	"github.com/courierkit/courier/internal/kafkafloor"
	"github.com/courierkit/courier/internal/topicname"
	"github.com/courierkit/courier/retrytopics"
)

// Consumer defaults.
const (
	// DefaultMaxAttempts equals DefaultBreakerFailures, so that with both
	// defaults an outage opens a Breaker before a message runs out of
	// attempts (see Config.Breakers).
	DefaultMaxAttempts      = 5
	DefaultBackoffBase      = 200 * time.Millisecond
	DefaultBackoffFactor    = 2.0
	DefaultBackoffMax       = 10 * time.Second
	DefaultBackoffJitter    = 0.2
	DefaultAttemptTimeout   = 30 * time.Second
	DefaultBreakerWait      = time.Second
	DefaultWorkers          = 1
	DefaultDeadLetterSuffix = dlq.DefaultSuffix
	DefaultShutdownTimeout  = 10 * time.Second
	DefaultProgressInterval = 15 * time.Second

	DefaultMaxWritesInFlight = 64
	DefaultTakeBatch         = 256

	DefaultDedupeLease    = 2 * time.Minute
	DefaultDedupeBusyWait = 250 * time.Millisecond
)

// Bounds of the Config fields: New refuses a value above them, which could
// only be a mistake (or exhaust memory: the bounds on counts size
// channels and batches).
const (
	MaxMaxAttempts       = 1000
	MaxWorkers           = 1024
	MaxMaxWritesInFlight = 10_000
	MaxTakeBatch         = 10_000
	// MaxBackoff bounds Backoff.Base, Backoff.Max and BreakerWait (a
	// longer wait holds a partition), and ProgressInterval (a longer one
	// leaves a stuck partition unseen).
	MaxBackoff = time.Hour
	// MaxTimeout bounds AttemptTimeout, ShutdownTimeout, Dedupe.Lease and
	// Dedupe.BusyWait.
	MaxTimeout = 24 * time.Hour
	// MaxSaramaChannelBuffer bounds Sarama.ChannelBufferSize, which Sarama
	// does not bound, and which sizes channels it makes per partition.
	MaxSaramaChannelBuffer = 1 << 20
	// MaxGroupBytes bounds Group (see retrytopics.ValidGroup).
	MaxGroupBytes = retrytopics.MaxGroupBytes
)

// Config configures a Consumer. Brokers (or Client), Group, Topics and
// Handler are required.
type Config struct {
	// Brokers are the Kafka bootstrap addresses, each host:port. Required
	// unless Client is set.
	Brokers []string
	// Sarama configures the Kafka client (TLS, SASL, version, …); the
	// consumer sets the fields it relies on (see NewSaramaConfig) on a
	// copy, so one config may serve several consumers (each gets a
	// cooperative sticky strategy of its own, since that strategy keeps
	// its group's state). Its ChannelBufferSize is at most 1<<20
	// (MaxSaramaChannelBuffer). Its Consumer.Group.Rebalance strategies
	// may be eager (Sarama's default, range) or cooperative
	// (sarama.NewBalanceStrategyCooperativeSticky, with Version 2.4 or
	// later): see "Rebalancing" in docs/consumer.md. Defaults to
	// NewSaramaConfig().
	Sarama *sarama.Config
	// Client replaces the client built from Brokers and Sarama, e.g. to
	// share one. Its config must have Producer.Return.Successes and
	// Consumer.Offsets.AutoCommit.Enable set. The consumer does not close
	// it.
	Client sarama.Client

	// Group is the consumer group id: valid UTF-8 without control
	// characters, at most 255 bytes (MaxGroupBytes). Required.
	Group string
	// Topics are the topics to consume, each a valid Kafka topic name
	// (ASCII letters, digits, '.', '_', '-'; not "." or ".."), listed once,
	// whose dead-letter topic (and retry topics) names are valid too, so at
	// most 249 characters. Required.
	Topics []string
	// Handler handles each message. Required.
	Handler Handler

	// MaxAttempts is how many times a message is tried before it is
	// dead-lettered (or moves to its next retry tier), from 1 to 1000
	// (MaxMaxAttempts). Defaults to 5.
	//
	// A handler calling a downstream through a Breaker needs at least its
	// ConsecutiveFailures attempts per message (counting the retry tiers:
	// MaxAttempts × (1 + len(RetryTopics.Delays))): then, when the downstream is
	// down, the breaker opens before the first message runs out of
	// attempts, and the messages wait for it instead of being
	// dead-lettered. List such breakers in Breakers and New refuses a
	// MaxAttempts that defeats them; the defaults (5 and
	// DefaultBreakerFailures, 5) agree.
	MaxAttempts int
	// Backoff spaces the attempts, and the retries of a retry-topic or
	// dead-letter write that failed. Zero fields take their defaults: Base
	// 200ms, Factor 2, Max 10s, Jitter 0.2 (backoff.NoJitter for none).
	// Base and Max are at most 1h (MaxBackoff).
	Backoff backoff.Backoff
	// AttemptTimeout bounds one attempt: its context ends then (with
	// ErrAttemptTimeout as its context.Cause), and the attempt fails with
	// ErrAttemptTimeout. At most 24h (MaxTimeout). Defaults to 30s.
	AttemptTimeout time.Duration
	// Retryable reports whether a failed attempt is worth another one; an
	// error it refuses is dead-lettered at once with error kind
	// "permanent". Permanent errors are never retried, whatever it says.
	// Defaults to every error.
	Retryable func(error) bool
	// BreakerWait is how long a partition pauses when the handler returns
	// an open-breaker error that does not say when the breaker half-opens
	// (gobreaker.ErrOpenState or gobreaker.ErrTooManyRequests of a breaker
	// of your own; a *BreakerOpenError says). At most 1h (MaxBackoff).
	// Defaults to 1s.
	BreakerWait time.Duration
	// Breakers are the breakers the handler calls its downstreams
	// through, for New to check MaxAttempts against (see MaxAttempts):
	// New refuses a Breaker whose ConsecutiveFailures exceed MaxAttempts ×
	// (1 + len(RetryTopics.Delays)). Listing them changes nothing else.
	// Defaults to none.
	Breakers []*Breaker

	// Workers is how many messages of one partition are handled at once.
	// Messages of one key always go to the same worker, so they never
	// overlap or reorder; keyless messages are spread by offset. Offsets
	// are committed up to the lowest unfinished message. A slow message
	// holds up the few queued behind it on its worker, and the whole
	// partition once that queue is full. At most 1024 (MaxWorkers).
	// Defaults to 1: one message at a time, in offset order.
	Workers int

	// DeadLetterSuffix names the dead-letter topic: <topic><suffix>.
	// Defaults to ".dlq".
	DeadLetterSuffix string
	// DeadLetterRaw writes raw-mode dead letters (original value untouched,
	// context in dlq_* headers) instead of envelopes. Defaults to false.
	DeadLetterRaw bool
	// OnDeadLetter is called once for each message written to its
	// dead-letter topic, after the write and before its offset is marked,
	// e.g. to page the on-call. It runs on the goroutine of the write, so
	// calls can overlap, also for one partition: return quickly. With
	// TracerProvider, its context carries the dead-letter write's span.
	OnDeadLetter func(context.Context, DeadLetter)
	// MaxWritesInFlight bounds the writes of one partition to its retry
	// topics and dead-letter topic in flight at once. A write runs beside the handling: the partition
	// goes on with the next messages, and no offset is marked past a
	// message whose write has not succeeded. At the bound, the partition
	// waits for a write to end; while a write is failing (and being
	// retried), it takes no new message. Writes in flight can reach the
	// dead-letter topic out of offset order. 1 writes one at a time, still
	// beside the handling. At most 10,000 (MaxMaxWritesInFlight).
	// Defaults to 64.
	MaxWritesInFlight int

	// TakeBatch is the most messages a partition takes at once: the
	// messages already fetched, up to TakeBatch, are looked up together in
	// KeyOrder and claimed together in Dedupe, one round trip each. It
	// matters only with Dedupe.Store or KeyOrder set (otherwise one message
	// is taken at a time). At most 10,000 (MaxTakeBatch). Defaults to 256.
	TakeBatch int

	// RetryTopics sends a message whose attempts ran out to retry topics
	// (<topic>.retry.<delay>, see package retrytopics) before the
	// dead-letter topic: it waits there, without holding up its partition,
	// and is handled again, by this consumer, with up to MaxAttempts more
	// attempts per tier. The consumer subscribes to the retry topics of
	// every topic in Topics itself. The dead-letter topic it ends with is
	// named by DeadLetterSuffix. Defaults to no retry topics.
	RetryTopics retrytopics.Config
	// KeyOrder keeps the messages of a key in order across the retry
	// tiers: while a message of a key waits in a retry tier, later
	// messages of the key follow it there instead of overtaking it. See
	// retrytopics.NewRedisKeyOrder. Needs RetryTopics.Delays. Defaults to none:
	// a later message of a key may be handled before an earlier one that
	// is waiting in a retry tier.
	KeyOrder retrytopics.KeyOrder

	// Dedupe skips messages already processed (see DedupeConfig). Defaults
	// to none.
	Dedupe DedupeConfig

	// ShutdownTimeout is how long handlers and dead-letter writes in flight
	// may run on after their partition's claim ends (Run's context ended,
	// or a rebalance took the partition); then their context ends. Retry
	// waits stop at once. At most 24h (MaxTimeout). Defaults to 10s.
	ShutdownTimeout time.Duration

	// WithoutIdempotentWrites turns off the idempotence of the consumer's
	// own writes, its dead letters and retry-tier moves. By default they
	// are written by an idempotent producer (Producer.Idempotent, acks from
	// all in-sync replicas, one request in flight per broker, and at least
	// 50 retries, on a copy of the Sarama config), so that a write the
	// broker appended but whose answer was lost, sent again, is kept once.
	// Set it only for a cluster that refuses idempotent writes (Run then
	// fails at start with an error naming this field: the principal lacks
	// IDEMPOTENT_WRITE on the cluster, which Kafka before 2.8 requires); a
	// lost answer may then leave a dead letter or a retry record twice.
	// Defaults to false.
	WithoutIdempotentWrites bool

	// ProgressInterval is how often the consumer reads the high-water mark
	// of each partition it holds from the partition's leader (waiting at
	// most 5s, or ProgressInterval when shorter, for the answer), and
	// reports the partition's lag from it (LagHook) and the age of its
	// oldest message in flight (OldestInFlightHook): so a partition whose
	// handler hangs shows its lag and that age rising. A read that fails
	// is logged once until one succeeds, and the lag keeps its last value.
	// Without such a hook there is no timer. At most 1h (MaxBackoff).
	// Defaults to 15s.
	ProgressInterval time.Duration

	// ReadinessGrace is how long the consumer may be out of its group (a
	// rebalance, Kafka unreachable, its coordinator moving) and still be
	// ready: Readiness answers 503 once it has been out for longer, until
	// it is back in. At most 24h (MaxTimeout). Defaults to twice the Sarama
	// config's Consumer.Group.Rebalance.Timeout (2m with Sarama's default
	// of 1m; Config.Client's config when set): a rebalance lasts up to that
	// timeout while the broker waits for the members to rejoin, and one
	// that waited out a member that died while joining can be followed by
	// another when it comes back.
	ReadinessGrace time.Duration

	// Logger receives the consumer's logs. Defaults to slog.Default().
	Logger *slog.Logger
	// Hooks receive measurements: each implements one or more of the
	// *Hook interfaces (see Hook and package prom), and is called in
	// order. Defaults to none.
	Hooks []Hook
	// TracerProvider makes the consumer's spans (OpenTelemetry, after the
	// messaging semantic conventions), with the tracer named
	// "github.com/courierkit/courier/consumer": a "process <topic>" span
	// per attempt, which the handler's context carries, and a "send
	// <topic>" span per write to a retry topic or the dead-letter topic,
	// whose trace context the record written carries. See "Tracing" in
	// docs/observability.md. Defaults to nil: no spans (the global provider is not
	// used), and a message's traceparent still continues its trace in the
	// handler's context.
	TracerProvider trace.TracerProvider
}

// DedupeConfig configures deduplication: before the handler sees a
// message, the consumer claims its id in Store; a message whose id was
// processed already is skipped (its offset is committed, the handler is
// not called), and one whose id is claimed elsewhere waits until that claim
// ends. After the handler succeeds the id is marked processed; when the
// message fails (it moves to a retry topic or the dead-letter topic) its
// claim is released.
type DedupeConfig struct {
	// Store remembers the processed ids: dedupe.NewRedis, or
	// dedupe.NewInbox for a handler that writes to PostgreSQL. nil turns
	// deduplication off. Defaults to nil.
	Store dedupe.Store
	// Key returns a message's id. Defaults to Message.ID (the ce_id
	// header), or, for a message without one, its original topic,
	// partition and offset ("orders/3/1842"), which still tells a
	// redelivery from a new message.
	Key func(*Message) string
	// Lease is how long a claim lasts before another consumer may take
	// the message: after a crash, a redelivered message waits this long.
	// The consumer extends the claim while the message is being handled.
	// Must exceed AttemptTimeout plus Backoff.Max, at most 24h
	// (MaxTimeout). Defaults to 2m.
	Lease time.Duration
	// BusyWait is how long a partition pauses before it asks again about
	// a message claimed elsewhere. At most 1h (MaxBackoff). Defaults to
	// 250ms.
	BusyWait time.Duration
	// FailOpen makes the consumer handle messages without deduplication
	// while Store fails, counting them in FailedOpenHook. Defaults to
	// false: while Store fails, the partition pauses and asks again (no
	// duplicates, no loss, but no progress).
	FailOpen bool
	// Hooks receive hits, errors and latencies: each implements one or
	// more of the dedupe package's *Hook interfaces (see dedupe.Hook and
	// package prom), and is called in order. Defaults to none.
	Hooks []dedupe.Hook
}

// DeadLetter describes a message written to its dead-letter topic.
type DeadLetter struct {
	// Message is the message given up on.
	Message *Message
	// Err is the last error.
	Err error
	// Envelope is what was written (in raw mode, its context went into
	// headers).
	Envelope dlq.Envelope
	// Written locates the dead-letter record.
	Written dlq.Written
}

// NewSaramaConfig returns the Sarama configuration the consumer uses when
// Config.Sarama is nil: a new group starts at the oldest offset (nothing is
// skipped), errors are returned to the consumer (which logs them), offsets
// are auto-committed every second, and dead letters are produced with acks
// from all in-sync replicas. Net.ReadTimeout is at least
// Consumer.Group.Rebalance.Timeout plus 5s, so that Sarama waits for a
// JoinGroup reply as long as the broker may hold it (the consumer raises it
// so in Config.Sarama's copy too). Start from it to add TLS or SASL.
func NewSaramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "courier-consumer"
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	requireSarama(cfg)
	return cfg
}

// requireSarama sets what the consumer relies on.
func requireSarama(cfg *sarama.Config) {
	cfg.Consumer.Return.Errors = true
	cfg.Consumer.Offsets.AutoCommit.Enable = true
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	fitReadTimeout(cfg)
}

// WithDefaults returns c with every zero field set to its default (the
// Default* constants; for ReadinessGrace, twice the rebalance timeout of
// the Sarama config), and Sarama set to a copy of itself (or of
// NewSaramaConfig()) with the fields the consumer relies on. New calls it;
// it changes nothing it need not, so calling it first does no harm.
func (c Config) WithDefaults() Config {
	durations, ints := c.bounded()
	for _, f := range durations {
		f.setDefault()
	}
	for _, f := range ints {
		f.setDefault()
	}
	c.Backoff = c.Backoff.WithDefaults(backoff.Backoff{Base: DefaultBackoffBase, Factor: DefaultBackoffFactor, Max: DefaultBackoffMax, Jitter: DefaultBackoffJitter})
	if c.DeadLetterSuffix == "" {
		c.DeadLetterSuffix = DefaultDeadLetterSuffix
	}
	c.RetryTopics = c.RetryTopics.WithDefaults()
	c.Dedupe = c.Dedupe.WithDefaults()
	if c.Client == nil {
		if c.Sarama == nil {
			c.Sarama = NewSaramaConfig()
		}
		// A copy: consumers sharing one Sarama config must not see each
		// other's changes, nor race on them while one already runs.
		sc := *c.Sarama
		requireSarama(&sc)
		ownStrategies(&sc)
		c.Sarama = &sc
	}
	if c.ReadinessGrace == 0 {
		c.ReadinessGrace = c.defaultReadinessGrace()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// readinessGraceRebalances is how many rebalance timeouts the consumer may
// be out of its group by default and still be ready (see ReadinessGrace).
const readinessGraceRebalances = 2

// defaultReadinessGrace is ReadinessGrace's default: twice the rebalance
// timeout of the Sarama config the consumer runs with.
func (c *Config) defaultReadinessGrace() time.Duration {
	return readinessGraceRebalances * c.saramaConfig().Consumer.Group.Rebalance.Timeout
}

// bounded lists the numeric fields of c with their defaults and bounds.
func (c *Config) bounded() ([]field[time.Duration], []field[int]) {
	return []field[time.Duration]{
			{"Backoff.Base", &c.Backoff.Base, DefaultBackoffBase, MaxBackoff},
			{"Backoff.Max", &c.Backoff.Max, DefaultBackoffMax, MaxBackoff},
			{"AttemptTimeout", &c.AttemptTimeout, DefaultAttemptTimeout, MaxTimeout},
			{"BreakerWait", &c.BreakerWait, DefaultBreakerWait, MaxBackoff},
			{"ShutdownTimeout", &c.ShutdownTimeout, DefaultShutdownTimeout, MaxTimeout},
			{"ProgressInterval", &c.ProgressInterval, DefaultProgressInterval, MaxBackoff},
		}, []field[int]{
			{"MaxAttempts", &c.MaxAttempts, DefaultMaxAttempts, MaxMaxAttempts},
			{"Workers", &c.Workers, DefaultWorkers, MaxWorkers},
			{"MaxWritesInFlight", &c.MaxWritesInFlight, DefaultMaxWritesInFlight, MaxMaxWritesInFlight},
			{"TakeBatch", &c.TakeBatch, DefaultTakeBatch, MaxTakeBatch},
		}
}

// validate checks c, with its defaults applied: every field, and the
// names derived from Topics.
func (c *Config) validate() error {
	switch {
	case c.Client == nil && len(c.Brokers) == 0:
		return fmt.Errorf("%w: Brokers is empty; set the Kafka bootstrap addresses, e.g. []string{\"localhost:9092\"}", ErrInvalidConfig)
	case c.Group == "":
		return fmt.Errorf("%w: Group is empty; set the consumer group id, e.g. \"payouts\"", ErrInvalidConfig)
	case len(c.Topics) == 0:
		return fmt.Errorf("%w: Topics is empty; name the topics to consume", ErrInvalidConfig)
	case c.Handler == nil:
		return fmt.Errorf("%w: Handler is nil; set it, e.g. consumer.HandlerFunc(handle)", ErrInvalidConfig)
	}
	if c.Client == nil {
		for i, b := range c.Brokers {
			if err := kafkaaddr.Validate(b); err != nil {
				return fmt.Errorf("%w: Brokers[%d] %q %w", ErrInvalidConfig, i, dlq.TruncateHeader(b), err)
			}
		}
	}
	if err := retrytopics.ValidGroup(c.Group); err != nil {
		return fmt.Errorf("%w: Group %q %w; use a plain name, e.g. \"payouts\"", ErrInvalidConfig, dlq.TruncateHeader(c.Group), err)
	}
	for i, t := range c.Topics {
		if t == "" {
			return fmt.Errorf("%w: Topics[%d] is empty; remove it or name a topic", ErrInvalidConfig, i)
		}
		if err := topicname.Validate(t); err != nil {
			return fmt.Errorf("%w: Topics[%d]: topic %w", ErrInvalidConfig, i, err)
		}
		if slices.Contains(c.Topics[:i], t) {
			return fmt.Errorf("%w: Topics[%d] %s is listed twice; list each topic once", ErrInvalidConfig, i, t)
		}
	}
	durations, ints := c.bounded()
	if err := checkBounds(durations...); err != nil {
		return err
	}
	if err := checkBounds(ints...); err != nil {
		return err
	}
	if c.ReadinessGrace < 0 || c.ReadinessGrace > MaxTimeout {
		return fmt.Errorf("%w: ReadinessGrace is %v; use a positive duration up to %v, how long the consumer may be out of its group and still be ready, "+
			"or 0 for the default of twice Sarama's Consumer.Group.Rebalance.Timeout (%v)", ErrInvalidConfig, c.ReadinessGrace, MaxTimeout, c.defaultReadinessGrace())
	}
	if err := c.Backoff.WithDefaults(backoff.Backoff{}).Validate(); err != nil {
		return fmt.Errorf("%w: Backoff.%w", ErrInvalidConfig, err)
	}
	if err := (dlq.WriterConfig{Suffix: c.DeadLetterSuffix}).Validate(); err != nil {
		return fmt.Errorf("%w: DeadLetterSuffix: %w", ErrInvalidConfig, err)
	}
	if c.Client != nil {
		if cc := c.Client.Config(); !cc.Producer.Return.Successes || !cc.Consumer.Offsets.AutoCommit.Enable {
			return fmt.Errorf("%w: Client's config lacks Producer.Return.Successes or Consumer.Offsets.AutoCommit.Enable; set both before creating the client", ErrInvalidConfig)
		}
	} else if err := c.Sarama.Validate(); err != nil {
		return fmt.Errorf("%w: Sarama: %w", ErrInvalidConfig, err)
	}
	if err := kafkafloor.Check(c.saramaConfig().Version); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	if n := c.saramaConfig().ChannelBufferSize; n > MaxSaramaChannelBuffer {
		return fmt.Errorf("%w: Sarama.ChannelBufferSize is %d; use at most %d (Sarama makes channels of that size per partition)", ErrInvalidConfig, n, MaxSaramaChannelBuffer)
	}
	if err := c.validateRetryTopics(); err != nil {
		return err
	}
	return c.validateDedupe()
}

// field is a config field that 0 sets to its default, with its bound.
type field[T int | time.Duration] struct {
	name     string
	value    *T
	def, max T
}

// setDefault sets a zero field to its default.
func (f field[T]) setDefault() {
	if *f.value == 0 {
		*f.value = f.def
	}
}

// checkBounds refuses negative fields and those above their bound.
func checkBounds[T int | time.Duration](fields ...field[T]) error {
	for _, f := range fields {
		if *f.value < 0 {
			return fmt.Errorf("%w: %s is %v; use a positive value, or 0 for the default of %v", ErrInvalidConfig, f.name, *f.value, f.def)
		}
		if *f.value > f.max {
			return fmt.Errorf("%w: %s is %v; use at most %v, or 0 for the default of %v", ErrInvalidConfig, f.name, *f.value, f.max, f.def)
		}
	}
	return nil
}

// saramaConfig is the Sarama configuration the consumer runs with.
func (c *Config) saramaConfig() *sarama.Config {
	if c.Client != nil {
		return c.Client.Config()
	}
	return c.Sarama
}

// cooperative reports whether cfg's group strategies make Sarama use the
// cooperative rebalance protocol: when every strategy supports it.
func cooperative(cfg *sarama.Config) bool {
	strategies := cfg.Consumer.Group.Rebalance.GroupStrategies
	if s := cfg.Consumer.Group.Rebalance.Strategy; s != nil {
		strategies = []sarama.BalanceStrategy{s}
	}
	for _, s := range strategies {
		p, ok := s.(sarama.RebalanceProtocolBalanceStrategy)
		if !ok || !slices.Contains(p.SupportedProtocols(), sarama.RebalanceProtocolCooperative) {
			return false
		}
	}
	return len(strategies) > 0
}

// ownStrategies replaces each cooperative sticky strategy of cfg's group
// with a new one: that strategy keeps the generation of the group it
// serves, so consumers sharing one Sarama config must not share it.
func ownStrategies(cfg *sarama.Config) {
	r := &cfg.Consumer.Group.Rebalance
	sticky := reflect.TypeOf(sarama.NewBalanceStrategyCooperativeSticky())
	own := func(s sarama.BalanceStrategy) sarama.BalanceStrategy {
		if reflect.TypeOf(s) == sticky {
			return sarama.NewBalanceStrategyCooperativeSticky()
		}
		return s
	}
	r.Strategy = own(r.Strategy)
	r.GroupStrategies = slices.Clone(r.GroupStrategies)
	for i, s := range r.GroupStrategies {
		r.GroupStrategies[i] = own(s)
	}
}

// validateRetryTopics checks RetryTopics and KeyOrder.
func (c *Config) validateRetryTopics() error {
	if c.KeyOrder != nil && len(c.RetryTopics.Delays) == 0 {
		return fmt.Errorf("%w: KeyOrder is set but RetryTopics.Delays is empty; KeyOrder keeps keys in order across retry topics, so configure some", ErrInvalidConfig)
	}
	for _, t := range c.Topics {
		// Also without retry tiers: the dead-letter topic's name.
		if _, err := retrytopics.New(t, c.RetryTopics, c.DeadLetterSuffix); err != nil {
			return fmt.Errorf("%w: Topics %s with RetryTopics: %w", ErrInvalidConfig, t, err)
		}
	}
	return c.checkBreakers()
}

// checkBreakers refuses a Breaker that an outage would not open before a
// message runs out of attempts.
func (c *Config) checkBreakers() error {
	attempts := c.MaxAttempts * (1 + len(c.RetryTopics.Delays))
	for i, b := range c.Breakers {
		switch {
		case b == nil:
			return fmt.Errorf("%w: Breakers[%d] is nil; list the breakers built with NewBreaker", ErrInvalidConfig, i)
		case b.cfg.ConsecutiveFailures > attempts:
			return fmt.Errorf("%w: MaxAttempts %d (× %d with the retry tiers) is below the %d ConsecutiveFailures of Breakers[%d] %q: "+
				"in an outage messages would be dead-lettered before the breaker opens; raise MaxAttempts to %d, or lower its ConsecutiveFailures",
				ErrInvalidConfig, c.MaxAttempts, 1+len(c.RetryTopics.Delays), b.cfg.ConsecutiveFailures, i, b.name,
				(b.cfg.ConsecutiveFailures+len(c.RetryTopics.Delays))/(1+len(c.RetryTopics.Delays)))
		}
	}
	return nil
}

// retryTopologies returns the retry topology of each main topic and each
// of their retry topics (the one it belongs to), and the topics to
// subscribe to: Topics and their retry topics. It refuses a retry topic
// listed in Topics.
func (c *Config) retryTopologies() (map[string]*retrytopics.Topology, []string, error) {
	topologies := map[string]*retrytopics.Topology{}
	subscribed := slices.Clone(c.Topics)
	if len(c.RetryTopics.Delays) == 0 {
		return topologies, subscribed, nil
	}
	for _, topic := range c.Topics {
		t, err := retrytopics.New(topic, c.RetryTopics, c.DeadLetterSuffix)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: RetryTopics: %w", ErrInvalidConfig, err)
		}
		topologies[topic] = &t
		for _, retry := range t.Topics() {
			topologies[retry] = &t
			subscribed = append(subscribed, retry)
		}
	}
	for _, topic := range c.Topics {
		if slices.Contains(subscribed[len(c.Topics):], topic) {
			return nil, nil, fmt.Errorf("%w: Topics lists %s, a retry topic of another of its topics; list only the main topics, the consumer subscribes to their retry topics itself", ErrInvalidConfig, topic)
		}
	}
	return topologies, subscribed, nil
}

// WithDefaults returns d with every zero field set to its default (the
// DefaultDedupe* constants).
func (d DedupeConfig) WithDefaults() DedupeConfig {
	durations := d.bounded()
	for _, f := range durations {
		f.setDefault()
	}
	return d
}

// bounded lists the durations of d with their defaults and bounds.
func (d *DedupeConfig) bounded() []field[time.Duration] {
	return []field[time.Duration]{
		{"Dedupe.Lease", &d.Lease, DefaultDedupeLease, MaxTimeout},
		{"Dedupe.BusyWait", &d.BusyWait, DefaultDedupeBusyWait, MaxBackoff},
	}
}

// validate checks d, with its defaults applied, when it has a Store.
func (d *DedupeConfig) validate() error {
	if d.Store == nil {
		return nil
	}
	return checkBounds(d.bounded()...)
}

// validateDedupe checks Dedupe, and its Lease against the attempts.
func (c *Config) validateDedupe() error {
	d := &c.Dedupe
	if err := d.validate(); err != nil || d.Store == nil {
		return err
	}
	if floor := c.AttemptTimeout + c.Backoff.Max; d.Lease <= floor {
		return fmt.Errorf("%w: Dedupe.Lease (%v) must exceed AttemptTimeout plus Backoff.Max (%v), or a claim could run out during an attempt; raise it", ErrInvalidConfig, d.Lease, floor)
	}
	return nil
}
