package dlq

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/topicname"
	"github.com/courierkit/courier/record"
)

// ErrTooLarge is matched by the error of Write when even the raw record
// is larger than the producer or the dead-letter topic accepts: the
// original was within a few hundred bytes of the limit, and the dlq_*
// headers push it over. No retry helps; raise the dead-letter topic's
// max.message.bytes (and Producer.MaxMessageBytes) above the original
// topic's.
var ErrTooLarge = errors.New("dlq: the dead letter is larger than the dead-letter topic accepts; " +
	"raise the topic's max.message.bytes and the producer's Producer.MaxMessageBytes above the original topic's")

// ErrInvalidTopic is matched by the error of Record and Write when the
// dead-letter topic of a record's topic is no valid Kafka topic name (its
// topic is too long for the suffix). No retry helps.
var ErrInvalidTopic = errors.New("dlq: invalid dead-letter topic")

// WriterConfig configures a Writer. The zero value writes envelope mode to
// <topic>.dlq.
type WriterConfig struct {
	// Suffix makes the dead-letter topic of a topic (see Topic). Defaults
	// to DefaultSuffix, ".dlq".
	Suffix string
	// Raw writes raw-mode records (the original value untouched, the
	// context in headers) instead of envelopes. Defaults to false.
	Raw bool
}

// WithDefaults returns c as NewWriter runs it: Suffix DefaultSuffix when
// empty.
func (c WriterConfig) WithDefaults() WriterConfig {
	if c.Suffix == "" {
		c.Suffix = DefaultSuffix
	}
	return c
}

// Validate reports whether NewWriter would accept c, for a caller that
// takes a Suffix of its own and checks it before it writes (as the
// consumer and the relay do): it checks c.WithDefaults() as NewWriter
// does. Its errors match ErrInvalidWriterConfig (and so ErrInvalidConfig).
func (c WriterConfig) Validate() error { return c.WithDefaults().validate() }

// validate refuses what c, its defaults applied, cannot run with: the
// dead-letter topics Suffix makes must be valid Kafka topic names.
func (c WriterConfig) validate() error {
	if err := topicname.Validate(Topic("t", c.Suffix)); err != nil {
		return fmt.Errorf("%w: Suffix %q: the dead-letter topic %w", ErrInvalidWriterConfig, c.Suffix, err)
	}
	return nil
}

// Writer renders dead letters as the records of their dead-letter topics
// (Record), and writes them through a record.Publisher (Write). The
// consumer writes its dead letters with one; the relay renders its own
// with one (Record) and publishes them among the events of its batches.
type Writer struct {
	pub record.Publisher
	cfg WriterConfig
}

// NewWriter returns a Writer that writes through pub, which it does not
// own: close pub after the last Write returned. Over a Sarama producer,
// pass record.NewSyncPublisher(producer).
func NewWriter(pub record.Publisher, cfg WriterConfig) (*Writer, error) {
	if pub == nil {
		return nil, fmt.Errorf("%w: the publisher is nil; pass one, e.g. record.NewSyncPublisher of a sarama.SyncProducer", ErrInvalidWriterConfig)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Writer{pub: pub, cfg: cfg}, nil
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

// Record returns the dead letter of e in format (FormatEnvelope: see
// Envelope.Record; FormatRaw: see Envelope.RawRecord) as the record to
// write to Topic(e.OriginalTopic, Suffix), for a caller that publishes it
// itself, e.g. among other records of a batch. A dead-letter topic that is
// no valid Kafka topic name, e.g. of an original topic of 249 characters,
// is refused with ErrInvalidTopic.
func (w *Writer) Record(e Envelope, format string) (*record.Record, error) {
	topic := Topic(e.OriginalTopic, w.cfg.Suffix)
	if err := topicname.Validate(topic); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidTopic, err)
	}
	var rec *record.Record
	var err error
	switch format {
	case FormatEnvelope:
		rec, err = e.Record()
	case FormatRaw:
		rec, err = e.RawRecord()
	default:
		return nil, fmt.Errorf("dlq: format %q: want %q (FormatEnvelope) or %q (FormatRaw)", format, FormatEnvelope, FormatRaw)
	}
	if err != nil {
		return nil, err
	}
	rec.Topic = topic
	return rec, nil
}

// Write writes the dead letter of e to Topic(e.OriginalTopic, Suffix) and
// returns once the broker acknowledged it. In envelope mode, an envelope the
// broker or the producer refuses as too large (the original is near the
// size limit, and the envelope adds to it) is written in raw mode instead,
// which is no larger than the original the broker once accepted; Written
// says which format went out. ctx is checked before sending and passed to
// the publisher (NewSyncPublisher's send in progress is bounded by the
// producer's Producer.Timeout and Retry settings, not by ctx). An error
// means nothing was acknowledged: write again (the broker may hold a copy,
// so a dead letter can be duplicated, never lost).
func (w *Writer) Write(ctx context.Context, e Envelope) (Written, error) {
	format := FormatEnvelope
	if w.cfg.Raw {
		format = FormatRaw
	}
	written, err := w.send(ctx, e, format)
	if err != nil && format == FormatEnvelope && TooLarge(err) {
		written, err = w.send(ctx, e, FormatRaw)
	}
	if err != nil && TooLarge(err) {
		err = fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return written, err
}

func (w *Writer) send(ctx context.Context, e Envelope, format string) (Written, error) {
	if err := ctx.Err(); err != nil {
		return Written{}, err
	}
	rec, err := w.Record(e, format)
	if err != nil {
		return Written{}, err
	}
	errs := w.pub.Publish(ctx, []*record.Record{rec})
	if len(errs) != 1 {
		return Written{}, fmt.Errorf("dlq: write to %s: the publisher returned %d results for one record", rec.Topic, len(errs))
	}
	if errs[0] != nil {
		return Written{}, fmt.Errorf("dlq: write to %s: %w", rec.Topic, errs[0])
	}
	return Written{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Format: format}, nil
}

// TooLarge reports whether err is Kafka or Sarama refusing a record for its
// size: the broker's message.max.bytes or the topic's max.message.bytes, or
// the producer's Producer.MaxMessageBytes.
func TooLarge(err error) bool {
	var configErr sarama.ConfigurationError
	return errors.Is(err, sarama.ErrMessageSizeTooLarge) || errors.Is(err, sarama.ErrMessageSetSizeTooLarge) ||
		errors.As(err, &configErr) // Sarama refuses records over Producer.MaxMessageBytes this way
}
