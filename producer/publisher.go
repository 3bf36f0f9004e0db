package producer

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"
)

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

// failureClass says what a publish error means for the event.
type failureClass int

const (
	// failRetriable: a broker answered and refused this event for now (no
	// such topic yet, a partition without a leader or with too few in-sync
	// replicas, any other retriable error code), or the publish failed in a
	// way that does not say Kafka is unreachable. The refusal is the
	// event's, its topic's or its partition's, not Kafka's: count an
	// attempt, retry after a backoff, dead-letter after MaxAttempts; the
	// breaker does not hear of it, so other topics and keys go on.
	failRetriable failureClass = iota
	// failUnavailable: no broker answered (connection refused or reset, a
	// network error or timeout, no broker left to ask): count no attempt,
	// feed the breaker, try again soon.
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

// classify sorts a publish error. Every error code a broker sent back
// (a sarama.KError) about a produce request is a broker's answer about one
// topic, partition or record, so it is never failUnavailable: only errors
// that mean no broker answered are, and a cluster's refusal to start an
// idempotent producer session, which no event caused.
func classify(err error) failureClass {
	var perm permanentError
	if errors.As(err, &perm) {
		return failPermanent
	}
	if errors.As(err, new(sessionError)) {
		return failUnavailable // no producer id: nothing to do with the event
	}
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		switch kerr {
		case sarama.ErrMessageSizeTooLarge, sarama.ErrInvalidTopic, sarama.ErrMessageSetSizeTooLarge,
			sarama.ErrTopicAuthorizationFailed, sarama.ErrClusterAuthorizationFailed,
			sarama.ErrInvalidRecord, sarama.ErrPolicyViolation, sarama.ErrUnsupportedForMessageFormat:
			return failPermanent
		}
		return failRetriable
	}
	var configErr sarama.ConfigurationError
	var encodeErr sarama.PacketEncodingError
	if errors.As(err, &configErr) || errors.As(err, &encodeErr) {
		return failPermanent // e.g. larger than Producer.MaxMessageBytes; a record Sarama cannot encode
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
