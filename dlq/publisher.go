package dlq

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/topicname"
)

// ErrInvalidPublisherConfig is matched by every error NewPublisher returns.
var ErrInvalidPublisherConfig = errors.New("dlq: invalid publisher config")

// ErrTooLarge is matched by the error of Publish when even the raw record
// is larger than the producer or the dead-letter topic accepts: the
// original was within a few hundred bytes of the limit, and the dlq_*
// headers push it over. No retry helps; raise the dead-letter topic's
// max.message.bytes (and Producer.MaxMessageBytes) above the original
// topic's.
var ErrTooLarge = errors.New("dlq: the dead letter is larger than the dead-letter topic accepts; " +
	"raise the topic's max.message.bytes and the producer's Producer.MaxMessageBytes above the original topic's")

// Message returns the Sarama message that writes r to topic: key and value
// kept nil when nil (no key, a tombstone), headers in order.
func (r Record) Message(topic string) *sarama.ProducerMessage {
	msg := &sarama.ProducerMessage{Topic: topic}
	if r.Value != nil {
		msg.Value = sarama.ByteEncoder(r.Value)
	}
	if r.Key != nil {
		msg.Key = sarama.ByteEncoder(r.Key)
	}
	msg.Headers = make([]sarama.RecordHeader, len(r.Headers))
	for i, h := range r.Headers {
		msg.Headers[i] = sarama.RecordHeader{Key: h.Key, Value: h.Value}
	}
	return msg
}

// PublisherConfig configures a Publisher. The zero value writes envelope
// mode to <topic>.dlq.
type PublisherConfig struct {
	// Suffix makes the dead-letter topic of a topic (see Topic). Defaults
	// to DefaultSuffix, ".dlq".
	Suffix string
	// Raw writes raw-mode records (the original value untouched, the
	// context in headers) instead of envelopes. Defaults to false.
	Raw bool
}

// Publisher writes dead letters to their dead-letter topics through a
// Sarama SyncProducer, which it does not own: close the producer after the
// last Publish returned.
type Publisher struct {
	producer sarama.SyncProducer
	cfg      PublisherConfig
}

// NewPublisher returns a Publisher that sends through producer.
func NewPublisher(producer sarama.SyncProducer, cfg PublisherConfig) (*Publisher, error) {
	if producer == nil {
		return nil, fmt.Errorf("%w: the producer is nil; pass one from sarama.NewSyncProducer", ErrInvalidPublisherConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Suffix == "" {
		cfg.Suffix = DefaultSuffix
	}
	return &Publisher{producer: producer, cfg: cfg}, nil
}

// Validate reports whether NewPublisher would accept c: the dead-letter
// topics Suffix makes must be valid Kafka topic names.
func (c PublisherConfig) Validate() error {
	if err := topicname.Validate(Topic("t", c.Suffix)); err != nil {
		return fmt.Errorf("%w: Suffix %q: the dead-letter topic %w", ErrInvalidPublisherConfig, c.Suffix, err)
	}
	return nil
}

// Written says where a dead letter went.
type Written struct {
	// Topic, Partition and Offset locate the dead-letter record.
	Topic     string
	Partition int32
	Offset    int64
	// Format is FormatEnvelope or FormatRaw: what the record holds.
	Format string
}

// Publish writes the dead letter of e to Topic(e.OriginalTopic, Suffix) and
// returns once the broker acknowledged it. In envelope mode, an envelope the
// broker or the producer refuses as too large (the original is near the
// size limit, and the envelope adds to it) is written in raw mode instead,
// which is no larger than the original the broker once accepted; Written
// says which format went out. ctx is checked before sending; a send in
// progress is bounded by the producer's Producer.Timeout and Retry
// settings, not by ctx. An error means nothing was acknowledged: publish
// again (the broker may hold a copy, so a dead letter can be duplicated,
// never lost).
func (p *Publisher) Publish(ctx context.Context, e Envelope) (Written, error) {
	format := FormatEnvelope
	if p.cfg.Raw {
		format = FormatRaw
	}
	w, err := p.send(ctx, e, format)
	if err != nil && format == FormatEnvelope && TooLarge(err) {
		w, err = p.send(ctx, e, FormatRaw)
	}
	if err != nil && TooLarge(err) {
		err = fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return w, err
}

func (p *Publisher) send(ctx context.Context, e Envelope, format string) (Written, error) {
	if err := ctx.Err(); err != nil {
		return Written{}, err
	}
	rec, err := e.Record()
	if format == FormatRaw {
		rec, err = e.RawRecord()
	}
	if err != nil {
		return Written{}, err
	}
	w := Written{Topic: Topic(e.OriginalTopic, p.cfg.Suffix), Format: format}
	msg := rec.Message(w.Topic)
	if w.Partition, w.Offset, err = p.producer.SendMessage(msg); err != nil {
		return Written{}, fmt.Errorf("dlq: write to %s: %w", w.Topic, err)
	}
	return w, nil
}

// TooLarge reports whether err is Kafka or Sarama refusing a record for its
// size: the broker's message.max.bytes or the topic's max.message.bytes, or
// the producer's Producer.MaxMessageBytes.
func TooLarge(err error) bool {
	var configErr sarama.ConfigurationError
	return errors.Is(err, sarama.ErrMessageSizeTooLarge) || errors.Is(err, sarama.ErrMessageSetSizeTooLarge) ||
		errors.As(err, &configErr) // Sarama refuses records over Producer.MaxMessageBytes this way
}
