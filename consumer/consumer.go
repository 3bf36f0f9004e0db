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
	"github.com/failsafe-go/failsafe-go/timeout"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/backoff"
)

// ErrRunning is returned by Run when the Consumer is already running.
var ErrRunning = errors.New("consumer: Run is already running; call it once per Consumer")

// Consumer runs a Handler over the messages of a consumer group. Create it
// with New and start it with Run.
type Consumer struct {
	cfg     Config
	backoff backoff.Policy
	timeout timeout.Timeout[any]
	log     *slog.Logger
	metrics Metrics
	running atomic.Bool
}

// New validates cfg, applies its defaults and returns a Consumer. It does
// not connect to Kafka; Run does.
func New(cfg Config) (*Consumer, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Consumer{
		cfg:     cfg,
		backoff: backoff.Policy(cfg.Backoff),
		timeout: timeout.New[any](cfg.AttemptTimeout),
		log:     cfg.Logger.With("group", cfg.Group),
		metrics: cfg.Metrics,
	}, nil
}

// Run joins the consumer group and handles messages until ctx ends. It
// rejoins after every rebalance, and keeps trying while Kafka is
// unreachable (logging each failure). When ctx ends it stops taking new
// messages, lets the handlers and dead-letter writes in flight finish
// within ShutdownTimeout, commits the offsets of the messages settled, leaves
// the group and returns nil. It returns an error only when it cannot start
// (a Sarama configuration Kafka clients refuse) or when already running.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	client, owned := c.cfg.Client, false
	if client == nil {
		if client = c.connect(ctx); client == nil {
			return nil // ctx ended
		}
		owned = true
	}
	closeClient := func() {
		if owned {
			c.logClose("client", client.Close())
		}
	}
	group, err := sarama.NewConsumerGroupFromClient(c.cfg.Group, client)
	if err != nil {
		closeClient()
		return fmt.Errorf("consumer: join group %s: %w", c.cfg.Group, err)
	}
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		c.logClose("consumer group", group.Close())
		closeClient()
		return fmt.Errorf("consumer: dead-letter producer: %w", err)
	}
	// The suffix was validated by New.
	publisher, _ := dlq.NewPublisher(producer, dlq.PublisherConfig{Suffix: c.cfg.DeadLetterSuffix, Raw: c.cfg.DeadLetterRaw})

	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for err := range group.Errors() {
			c.log.Warn("kafka consumer group error", "err", err)
		}
	}()
	h := &groupHandler{c: c, group: group, dlq: publisher}
	for failures := 0; ctx.Err() == nil; {
		err := group.Consume(ctx, c.cfg.Topics, h)
		if err == nil || ctx.Err() != nil {
			failures = 0
			continue // a rebalance ended the session, or Run is done
		}
		failures++
		delay := c.backoff.Delay(failures, rand.Float64)
		c.log.Warn("consumer group session failed; joining again", "err", err, "failures", failures, "retry_in", delay)
		sleep(ctx, delay)
	}
	c.logClose("consumer group", group.Close())
	<-drained
	c.logClose("dead-letter producer", producer.Close())
	closeClient()
	return nil
}

// connect creates the Kafka client, retrying until it succeeds or ctx ends
// (then it returns nil).
func (c *Consumer) connect(ctx context.Context) sarama.Client {
	for failures := 1; ; failures++ {
		client, err := sarama.NewClient(c.cfg.Brokers, c.cfg.Sarama)
		if err == nil {
			return client
		}
		delay := c.backoff.Delay(failures, rand.Float64)
		c.log.Warn("cannot connect to Kafka; is it running? retrying", "brokers", c.cfg.Brokers, "err", err, "retry_in", delay)
		if !sleep(ctx, delay) {
			return nil
		}
	}
}

func (c *Consumer) logClose(what string, err error) {
	if err != nil {
		c.log.Warn("closing the "+what+" failed", "err", err)
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
	c     *Consumer
	group sarama.ConsumerGroup
	dlq   *dlq.Publisher
}

func (h *groupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

// ConsumeClaim handles the messages of one partition until the session
// ends. It marks an offset only once every message before it is handled
// or dead-lettered.
func (h *groupHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	p := newPartition(h, sess, claim)
	defer p.close()
	if h.c.cfg.Workers == 1 {
		p.serial()
	} else {
		p.keyed(h.c.cfg.Workers)
	}
	return nil
}
