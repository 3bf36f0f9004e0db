package producer

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/IBM/sarama"
	"github.com/eapache/go-resiliency/breaker"

	"github.com/courierkit/courier/kafkaauth"
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
	// failRefused: a broker refused the record itself in a way a retry may
	// get past (a corrupt record, a topic missing past
	// RelayConfig.MissingTopicGrace), or the publish failed with an error
	// courier does not know (a RelayConfig.Publisher's own): count an
	// attempt, retry after a backoff, dead-letter after MaxAttempts.
	failRefused failureClass = iota
	// failHeld: the cluster's condition, not the record's: a broker
	// answered with an error Kafka classes as retriable (no leader, the
	// leader moved, too few in-sync replicas, a request timed out,
	// throttling, a topic not created yet), or one that says nothing of
	// the record (access refused, an unknown server error), or the
	// record's fate is unknown (it may have been appended). Count no
	// attempt, hold the partition's events with backoff, never dead-letter
	// them; the breaker does not hear of it, so other partitions go on.
	failHeld
	// failUnavailable: no broker answered (connection refused or reset, a
	// network error or timeout, no broker left to ask): count no attempt,
	// feed the breaker, try again soon.
	failUnavailable
	// failPermanent: the broker refused the record itself and no retry can
	// fix it (too large, invalid, against the topic's policy): dead-letter
	// at once.
	failPermanent
)

func (c failureClass) String() string {
	switch c {
	case failHeld:
		return "held"
	case failUnavailable:
		return "broker_unavailable"
	case failPermanent:
		return "permanent"
	default:
		return "refused"
	}
}

// permanentError marks an error no retry can fix that Kafka did not report,
// e.g. a record that cannot be built.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// recordRefusals are the produce error codes that refuse the record
// itself, the only ones that count an attempt: the permanent ones
// dead-letter at once, CORRUPT_MESSAGE (which Kafka classes as retriable:
// a record damaged on the way) is retried and dead-letters after
// MaxAttempts. Every other code a broker sends is the cluster's condition
// (failHeld), except UNKNOWN_TOPIC_OR_PARTITION past the missing-topic
// grace (see Relay.classify).
var recordRefusals = map[sarama.KError]failureClass{
	sarama.ErrMessageSizeTooLarge:         failPermanent, // MESSAGE_TOO_LARGE
	sarama.ErrMessageSetSizeTooLarge:      failPermanent, // RECORD_LIST_TOO_LARGE
	sarama.ErrInvalidTopic:                failPermanent, // INVALID_TOPIC_EXCEPTION
	sarama.ErrInvalidRecord:               failPermanent, // INVALID_RECORD
	sarama.ErrPolicyViolation:             failPermanent, // POLICY_VIOLATION
	sarama.ErrUnsupportedForMessageFormat: failPermanent, // UNSUPPORTED_FOR_MESSAGE_FORMAT
	sarama.ErrInvalidTimestamp:            failPermanent, // INVALID_TIMESTAMP
	sarama.ErrInvalidMessage:              failRefused,   // CORRUPT_MESSAGE
}

// classify sorts a publish error. A broker's error code (a sarama.KError)
// about a produce request is its answer about one topic, partition or
// record, so it is never failUnavailable: only errors that mean no broker
// answered are, and a cluster's refusal to start an idempotent producer
// session, which no event caused. Of the codes, only recordRefusals count
// an attempt; the rest are held (Kafka's own retriable classification,
// kerr.IsRetriable, is a subset of them). A write whose fate is unknown is
// held whatever refusal came last: it may have been appended, so it must be
// published again, never dead-lettered.
func classify(err error) failureClass {
	class := classifyCause(err)
	if (class == failRefused || class == failPermanent) && errors.As(err, new(fateUnknownError)) {
		return failHeld
	}
	return class
}

// classifyCause sorts err by what it says alone.
func classifyCause(err error) failureClass {
	var perm permanentError
	if errors.As(err, &perm) {
		return failPermanent
	}
	if errors.As(err, new(sessionError)) {
		return failUnavailable // no producer id: nothing to do with the event
	}
	if errors.As(err, new(*kafkaauth.TokenError)) {
		return failUnavailable // no token to sign in to the brokers with (re)authenticating
	}
	var kerr sarama.KError
	if errors.As(err, &kerr) {
		if class, ok := recordRefusals[kerr]; ok {
			return class
		}
		return failHeld
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
	return failRefused
}
