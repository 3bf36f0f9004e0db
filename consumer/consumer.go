package consumer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/record"
	"github.com/courierkit/courier/retrytopics"
)

// ErrRunning is returned by Run when the Consumer is already running.
var ErrRunning = errors.New("consumer: Run is already running; call it once per Consumer")

// Consumer runs a Handler over the messages of a consumer group. Create it
// with New and start it with Run.
type Consumer struct {
	cfg         Config
	log         *slog.Logger
	metrics     *hooks       // Config.Hooks
	dedupeHooks *dedupeHooks // Dedupe.Hooks
	running     atomic.Bool
	health      health // what Liveness and Readiness read

	// topics are what the group subscribes to: Config.Topics and their
	// retry topics.
	topics []string
	// topologies holds the retry topology of each main topic and each
	// retry topic (the one it belongs to); empty without Config.RetryTopics.
	topologies map[string]*retrytopics.Topology
	// tracer makes the spans; nil without Config.TracerProvider.
	tracer trace.Tracer
	// cooperative: the group rebalances cooperatively, revoking
	// partitions one by one within a session (see revocationFeed).
	cooperative bool
}

// New validates cfg, applies its defaults and returns a Consumer. It does
// not connect to Kafka; Run does.
func New(cfg Config) (*Consumer, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	metrics, err := sortHooks("Hooks", cfg.Hooks)
	if err != nil {
		return nil, err
	}
	dedupeHooks, err := sortDedupeHooks(cfg.Dedupe.Hooks)
	if err != nil {
		return nil, err
	}
	topologies, topics, err := cfg.retryTopologies()
	if err != nil {
		return nil, err
	}
	return &Consumer{
		cfg:         cfg,
		log:         cfg.Logger.With("group", cfg.Group),
		metrics:     metrics,
		dedupeHooks: dedupeHooks,
		topics:      topics,
		topologies:  topologies,
		tracer:      newTracer(cfg.TracerProvider),
		cooperative: cooperative(cfg.saramaConfig()),
	}, nil
}

// Topologies returns the retry topology of each topic in Config.Topics, in
// order; none without Config.RetryTopics. Pass them to retrytopics.Ensure to
// create the topics ahead of time.
func (c *Consumer) Topologies() []retrytopics.Topology {
	var out []retrytopics.Topology
	for _, topic := range c.cfg.Topics {
		if t, ok := c.topologies[topic]; ok {
			out = append(out, *t)
		}
	}
	return out
}

// Run joins the consumer group and handles messages until ctx ends. It
// rejoins after every rebalance, and keeps trying while Kafka is
// unreachable (logging each failure). When ctx ends it stops taking new
// messages, lets the handlers and dead-letter writes in flight finish
// within ShutdownTimeout, commits the offsets of the messages settled, leaves
// the group and returns nil. It returns an error only when it cannot start
// (a Sarama configuration Kafka clients refuse, or a cluster that refuses
// idempotent writes: see Config.WithoutIdempotentWrites) or when already
// running. Liveness answers 200 while it runs, and Readiness while it is in
// its group or briefly out of it.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	c.health.start(ctx)
	defer c.health.stop()
	k, err := c.open(ctx)
	if k == nil {
		return err // nil when ctx ended
	}
	defer k.close(c)
	h := &groupHandler{c: c, group: k.group, deadLetters: deadLetters{writer: k.publisher, suffix: c.cfg.DeadLetterSuffix}, producer: k.producer,
		highWater: k.dlqClient}
	for failures := 0; ctx.Err() == nil; {
		err := k.group.Consume(ctx, c.topics, h)
		if err == nil || ctx.Err() != nil {
			failures = 0
			continue // a rebalance ended the session, or Run is done
		}
		failures++
		delay := c.cfg.Backoff.Delay(failures, rand.Float64)
		c.log.Warn("consumer group session failed; joining again", "error", err, "failures", failures, "retry_in", delay)
		sleep(ctx, delay)
	}
	return nil
}

// kafka is what a running Consumer holds open.
type kafka struct {
	client    sarama.Client // nil when Config.Client was given
	dlqClient sarama.Client
	// groupClient reaches the group coordinator (see coordinatedBy).
	groupClient sarama.Client
	group       sarama.ConsumerGroup
	producer    sarama.SyncProducer
	publisher   *dlq.Writer
	drained     chan struct{} // closed when the group's errors are drained
}

// open connects to Kafka, retrying while it is unreachable. It returns nil
// when ctx ends first (and a nil error) or when Sarama refuses the config.
func (c *Consumer) open(ctx context.Context) (*kafka, error) {
	k := &kafka{drained: make(chan struct{})}
	client := c.cfg.Client
	brokers := c.cfg.Brokers
	if client == nil {
		if k.client = c.connect(ctx, func() (sarama.Client, error) { return sarama.NewClient(brokers, c.cfg.Sarama) }); k.client == nil {
			return nil, nil
		}
		client = k.client
	} else {
		if cfg := client.Config(); cfg.Net.ReadTimeout < minReadTimeout(cfg) {
			c.log.Warn("Config.Client's Net.ReadTimeout is shorter than its rebalance timeout plus 5s: a rebalance that waits "+
				"for a member longer than it makes the members drop their connections and join again, possibly for ever; raise it",
				"read_timeout", cfg.Net.ReadTimeout, "rebalance_timeout", cfg.Consumer.Group.Rebalance.Timeout, "want_at_least", minReadTimeout(cfg))
		}
		brokers = nil
		for _, b := range client.Brokers() {
			brokers = append(brokers, b.Addr())
		}
	}
	// Dead letters get a client of their own: on the consumer's, each
	// write would queue behind the fetch long-polls on the same connection.
	writes := writerConfig(client.Config(), !c.cfg.WithoutIdempotentWrites)
	if k.dlqClient = c.connect(ctx, func() (sarama.Client, error) { return sarama.NewClient(brokers, writes) }); k.dlqClient == nil {
		k.close(c)
		return nil, nil
	}
	// So does the group's traffic with its coordinator (see coordinatedBy).
	if k.groupClient = c.connect(ctx, func() (sarama.Client, error) { return sarama.NewClient(brokers, client.Config()) }); k.groupClient == nil {
		k.close(c)
		return nil, nil
	}
	var err error
	if k.group, err = sarama.NewConsumerGroupFromClient(c.cfg.Group, coordinatedBy{client, k.groupClient}); err != nil {
		k.close(c)
		return nil, fmt.Errorf("consumer: join group %s: %w", c.cfg.Group, err)
	}
	if k.producer, err = c.newWriter(ctx, k.dlqClient); k.producer == nil {
		k.close(c)
		return nil, err // nil when ctx ended
	}
	pub := record.NewSyncPublisher(k.producer)
	if c.tracer != nil {
		pub = tracedPublisher{pub} // dead letters carry the trace context of their write
	}
	// The suffix was validated by New.
	k.publisher, _ = dlq.NewWriter(pub, dlq.WriterConfig{Suffix: c.cfg.DeadLetterSuffix, Raw: c.cfg.DeadLetterRaw})
	go func() {
		defer close(k.drained)
		for err := range k.group.Errors() {
			c.log.Warn("kafka consumer group error", "error", err)
		}
	}()
	if !c.ensureTopics(ctx, brokers, client.Config()) {
		k.close(c)
		return nil, nil
	}
	return k, nil
}

// writerRetries is the least Producer.Retry.Max of the idempotent writer:
// its retries resend a batch with the same sequence numbers, which the
// broker keeps once, while a write the consumer starts again after Sarama
// gave up is a new batch, which a lost answer can leave twice.
const writerRetries = 50

// writerConfig returns the Sarama config of the client that writes dead
// letters and retry-tier moves: a copy of cfg (the caller's, or
// Config.Client's, is left as it is), whose producer, when idempotent, has
// an id and numbers its batches, so that a batch the broker appended but
// whose answer was lost is kept once when Sarama sends it again. Its
// Version is at least Kafka 2.1 (New checks kafkafloor), which idempotence
// needs (0.11).
func writerConfig(cfg *sarama.Config, idempotent bool) *sarama.Config {
	w := *cfg
	if idempotent {
		w.Producer.Idempotent = true
		w.Producer.RequiredAcks = sarama.WaitForAll
		w.Net.MaxOpenRequests = 1
		w.Producer.Retry.Max = max(w.Producer.Retry.Max, writerRetries)
	}
	return &w
}

// newWriter creates the producer of dead letters and retry-tier moves on
// client; an idempotent one first asks the cluster for a producer id, and
// waits (logging each failure) while it cannot answer. It returns nil when
// ctx ends first (and a nil error), and an error, logged, when Sarama
// refuses the config or the cluster refuses idempotent writes
// (CLUSTER_AUTHORIZATION_FAILED: the principal lacks IDEMPOTENT_WRITE on
// a Kafka before 2.8), naming Config.WithoutIdempotentWrites.
func (c *Consumer) newWriter(ctx context.Context, client sarama.Client) (sarama.SyncProducer, error) {
	for failures := 1; ; failures++ {
		producer, err := sarama.NewSyncProducerFromClient(client)
		var cfgErr sarama.ConfigurationError
		switch {
		case err == nil:
			return producer, nil
		case errors.Is(err, sarama.ErrClusterAuthorizationFailed):
			err = fmt.Errorf("consumer: the cluster refuses the idempotent producer that writes dead letters and retry-tier moves (%w): "+
				"grant the consumer's principal IDEMPOTENT_WRITE on the cluster, or set Config.WithoutIdempotentWrites to write without "+
				"idempotence (a write whose answer is lost may then be written twice)", err)
			c.log.Error("cannot start: " + err.Error())
			return nil, err
		case errors.As(err, &cfgErr):
			return nil, fmt.Errorf("consumer: dead-letter producer: %w", err)
		}
		delay := c.cfg.Backoff.Delay(failures, rand.Float64)
		c.log.Warn("cannot create the producer of dead letters and retry-tier moves; is Kafka up? retrying", "error", err, "failures", failures, "retry_in", delay)
		if !sleep(ctx, delay) {
			return nil, nil
		}
	}
}

// ensureTopics checks that the retry and dead-letter topics exist, creating
// them with RetryTopics.CreateTopics, and waits while they are missing (logging
// which). It reports whether they exist (false: ctx ended first).
func (c *Consumer) ensureTopics(ctx context.Context, brokers []string, cfg *sarama.Config) bool {
	topologies := c.Topologies()
	if len(topologies) == 0 {
		return true
	}
	for failures := 1; ; failures++ {
		admin, err := sarama.NewClusterAdmin(brokers, cfg)
		if err == nil {
			var created []string
			created, err = retrytopics.Ensure(ctx, admin, c.cfg.RetryTopics.CreateTopics, topologies...)
			c.logClose("cluster admin", admin.Close())
			if len(created) > 0 {
				c.log.Info("created retry and dead-letter topics", "topics", created)
			}
		}
		if err == nil {
			return true
		}
		delay := c.cfg.Backoff.Delay(failures, rand.Float64)
		c.log.Error("the retry topics are not ready; waiting", "error", err, "retry_in", delay)
		if !sleep(ctx, delay) {
			return false
		}
	}
}

// coordinatedBy is a client that reaches the group coordinator through
// another client, coordination: the join, sync, heartbeat and offset
// commit requests of the group go over connections of their own. A broker
// answers the requests of one connection in order, and holds a JoinGroup
// until every member has joined (up to a heartbeat interval of theirs):
// on the connection the partitions are fetched through, that would stall
// every partition led by the coordinator's broker during each rebalance,
// also those a cooperative rebalance leaves where they are.
type coordinatedBy struct {
	sarama.Client
	coordination sarama.Client
}

func (c coordinatedBy) Coordinator(group string) (*sarama.Broker, error) {
	return c.coordination.Coordinator(group)
}

func (c coordinatedBy) RefreshCoordinator(group string) error {
	return c.coordination.RefreshCoordinator(group)
}

// close leaves the group and closes what open opened, logging failures.
func (k *kafka) close(c *Consumer) {
	if k.group != nil {
		c.logClose("consumer group", k.group.Close())
	}
	if k.producer != nil {
		<-k.drained
		c.logClose("dead-letter producer", k.producer.Close())
	}
	for _, client := range []sarama.Client{k.groupClient, k.dlqClient, k.client} {
		if client != nil {
			c.logClose("client", client.Close())
		}
	}
}

// connect creates a Kafka client with newClient, retrying until it
// succeeds or ctx ends (then it returns nil).
func (c *Consumer) connect(ctx context.Context, newClient func() (sarama.Client, error)) sarama.Client {
	for failures := 1; ; failures++ {
		client, err := newClient()
		if err == nil {
			return client
		}
		delay := c.cfg.Backoff.Delay(failures, rand.Float64)
		c.log.Warn("cannot connect to Kafka; is it running? retrying", "error", err, "retry_in", delay)
		if !sleep(ctx, delay) {
			return nil
		}
	}
}

func (c *Consumer) logClose(what string, err error) {
	if err != nil {
		c.log.Warn("closing the "+what+" failed", "error", err)
	}
}

// sleep waits for d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// groupHandler is the sarama.ConsumerGroupHandler of a running Consumer.
type groupHandler struct {
	c           *Consumer
	group       sarama.ConsumerGroup
	deadLetters deadLetters
	producer    sarama.SyncProducer // writes to retry topics
	// highWater reads the high-water marks of the partitions held, for
	// their progress timers: the dead-letter client, whose connections no
	// fetch long-polls hold.
	highWater highWaterReader
}

// Setup and Cleanup tell the probes that the consumer joined its group and
// left it. Under cooperative rebalancing a session lasts across
// rebalances, so the consumer stays in its group while partitions move.
func (h *groupHandler) Setup(sarama.ConsumerGroupSession) error {
	h.c.health.setup()
	return nil
}

func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error {
	h.c.health.cleanup()
	return nil
}

// ConsumeClaim handles the messages of one partition until the session
// ends or, under cooperative rebalancing, the partition is revoked. It marks an offset only once every message before it is handled
// or dead-lettered.
func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	h.c.health.claimed(1)
	defer h.c.health.claimed(-1)
	p := newPartition(h, sess, claim)
	p.stopProgress = p.watchProgress(h.highWater)
	defer p.close()
	if h.c.cfg.Workers == 1 {
		p.serial()
	} else {
		p.keyed(h.c.cfg.Workers)
	}
	return nil
}
