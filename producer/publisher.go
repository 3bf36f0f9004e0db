package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"
)

// Publisher sends records to Kafka; it is the relay's only view of the
// broker. Publish returns one error per record, nil for a record the broker
// acknowledged. The relay never passes two records of the same topic and key
// in one call, so a Publisher may send a call's records in any order.
type Publisher interface {
	Publish(ctx context.Context, records []*sarama.ProducerMessage) []error
	Close() error
}

// DefaultMaxMessageBytes is Kafka's default message.max.bytes.
const DefaultMaxMessageBytes = 1048588

// NewSaramaConfig returns the Sarama configuration the relay uses when
// RelayConfig.Sarama is nil: acknowledgement by all in-sync replicas, the
// Java client's murmur2 partitioner (so courier and Java producers put a key
// on the same partition), and Producer.MaxMessageBytes at Kafka's default
// message.max.bytes. Start from it to add TLS or SASL.
func NewSaramaConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "courier-relay"
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner
	cfg.Producer.MaxMessageBytes = DefaultMaxMessageBytes
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	return cfg
}

// saramaPublisher publishes through a Sarama SyncProducer, created on first
// use and again after a failure to connect, so a relay can start while Kafka
// is down.
type saramaPublisher struct {
	brokers []string
	cfg     *sarama.Config

	mu       sync.Mutex
	producer sarama.SyncProducer
	inflight sync.WaitGroup
}

// NewSaramaPublisher returns a Publisher for brokers. cfg nil means
// NewSaramaConfig(); Producer.Return.Successes is forced on.
func NewSaramaPublisher(brokers []string, cfg *sarama.Config) (Publisher, error) {
	if len(brokers) == 0 {
		return nil, errors.New("producer: no Kafka brokers given; set RelayConfig.Brokers, e.g. []string{\"localhost:9092\"}")
	}
	if cfg == nil {
		cfg = NewSaramaConfig()
	}
	cfg.Producer.Return.Successes = true
	cfg.Producer.Return.Errors = true
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("producer: Sarama config: %w", err)
	}
	return &saramaPublisher{brokers: brokers, cfg: cfg}, nil
}

func (p *saramaPublisher) syncProducer() (sarama.SyncProducer, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.producer == nil {
		producer, err := sarama.NewSyncProducer(p.brokers, p.cfg)
		if err != nil {
			return nil, fmt.Errorf("connect to Kafka at %v: %w", p.brokers, err)
		}
		p.producer = producer
	}
	return p.producer, nil
}

// Publish sends records and waits for every acknowledgement, or for ctx.
// When ctx ends first, the records not yet answered get ctx's error; the
// broker may still write them (a duplicate, never a loss, when retried).
func (p *saramaPublisher) Publish(ctx context.Context, records []*sarama.ProducerMessage) []error {
	errs := make([]error, len(records))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	producer, err := p.syncProducer()
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for i, r := range records {
		r.Metadata = i
	}
	done := make(chan error, 1)
	p.inflight.Go(func() { done <- producer.SendMessages(records) })
	select {
	case err = <-done:
	case <-ctx.Done():
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
	if err == nil {
		return errs
	}
	var perRecord sarama.ProducerErrors
	if !errors.As(err, &perRecord) {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	for _, pe := range perRecord {
		if i, ok := pe.Msg.Metadata.(int); ok && i >= 0 && i < len(errs) {
			errs[i] = pe.Err
		}
	}
	return errs
}

// closeWait bounds how long Close waits for sends a cancelled Publish left
// in flight before it closes the producer under them.
const closeWait = 10 * time.Second

// Close waits for sends in flight (at most closeWait) and closes the
// producer.
func (p *saramaPublisher) Close() error {
	drained := make(chan struct{})
	go func() { p.inflight.Wait(); close(drained) }()
	timer := time.NewTimer(closeWait)
	defer timer.Stop()
	select {
	case <-drained:
	case <-timer.C:
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.producer == nil {
		return nil
	}
	err := p.producer.Close()
	p.producer = nil
	return err
}

// failureClass says what a publish error means for the event.
type failureClass int

const (
	// failRetriable: count an attempt and retry after a backoff.
	failRetriable failureClass = iota
	// failUnavailable: Kafka could not be reached; count no attempt, feed
	// the breaker, try again soon.
	failUnavailable
	// failPermanent: no retry can fix it; dead-letter at once.
	failPermanent
)

func (c failureClass) String() string {
	switch c {
	case failUnavailable:
		return "broker_unavailable"
	case failPermanent:
		return "permanent"
	default:
		return "retriable"
	}
}

// permanentError marks an error no retry can fix that Kafka did not report,
// e.g. a record that cannot be built.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// classify sorts a publish error.
func classify(err error) failureClass {
	var perm permanentError
	if errors.As(err, &perm) {
		return failPermanent
	}
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrMessageSizeTooLarge, sarama.ErrInvalidTopic, sarama.ErrMessageSetSizeTooLarge,
			sarama.ErrTopicAuthorizationFailed, sarama.ErrClusterAuthorizationFailed,
			sarama.ErrInvalidRecord, sarama.ErrPolicyViolation, sarama.ErrUnsupportedForMessageFormat:
			return failPermanent
		case sarama.ErrBrokerNotAvailable, sarama.ErrLeaderNotAvailable, sarama.ErrNotLeaderForPartition,
			sarama.ErrRequestTimedOut, sarama.ErrNetworkException, sarama.ErrNotEnoughReplicas,
			sarama.ErrNotEnoughReplicasAfterAppend, sarama.ErrKafkaStorageError, sarama.ErrNotController:
			return failUnavailable
		}
		return failRetriable
	}
	var configErr sarama.ConfigurationError
	if errors.As(err, &configErr) {
		return failPermanent // e.g. larger than Producer.MaxMessageBytes
	}
	var netErr net.Error
	switch {
	case errors.Is(err, breaker.ErrBreakerOpen), // Sarama's own per-partition breaker
		errors.Is(err, sarama.ErrOutOfBrokers), errors.Is(err, sarama.ErrNotConnected),
		errors.Is(err, sarama.ErrClosedClient), errors.Is(err, sarama.ErrShuttingDown),
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.As(err, &netErr):
		return failUnavailable
	}
	return failRetriable
}
