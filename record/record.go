// Package record is courier's own Kafka record and the seam that writes
// records, so that courier's public APIs name no Kafka client's types.
//
// A Record is what courier writes to or reads from a topic: key, value
// and headers as bytes (nil and empty kept distinct), and the place the
// broker gave it. A Publisher writes records and reports one outcome per
// record; the dead-letter Writer of package dlq writes through one, and the
// relay of package producer publishes through one (RelayConfig.Publisher).
//
// Sarama remains the implementation: NewSyncPublisher publishes through a
// sarama.SyncProducer (configured as usual, with TLS, SASL and tuning in
// its sarama.Config), and Message converts a Record to the Sarama message
// that writes it.
//
// The guide tells how to use it: [Wire format].
//
// [Wire format]: https://github.com/courierkit/courier/blob/main/docs/wire-format.md
package record

import (
	"context"
	"time"
)

// Header is one Kafka record header. A nil Value is a null header value,
// distinct from an empty one; a nil Key is the empty name (Kafka has no
// null header names). It has the shape of sarama.RecordHeader: convert
// with Header(h) or Header{Key: h.Key, Value: h.Value}.
type Header struct {
	Key, Value []byte
}

// Record is one Kafka record.
type Record struct {
	// Topic is the topic the record is written to or was read from.
	Topic string
	// Key is the record key; nil means no key, distinct from an empty key.
	Key []byte
	// Value is the record value; nil is a tombstone, distinct from an
	// empty value.
	Value []byte
	// Headers are the record headers, in order; names may repeat.
	Headers []Header
	// Timestamp is the record's timestamp; zero when writing means the
	// producer's clock.
	Timestamp time.Time
	// Partition and Offset locate the record in Topic. A Publisher sets
	// them when the broker acknowledged the record; on a record to write,
	// a Publisher picks the partition itself (by key), except one whose
	// producer uses sarama.NewManualPartitioner, which writes to Partition.
	Partition int32
	Offset    int64
}

// Publisher writes records to Kafka.
//
// Publish returns one error per record, in the order of records: nil for
// a record the broker acknowledged, whose Partition and Offset it then
// sets. Records of one topic and key are written in the order given, and a
// Publisher never acknowledges a record after an earlier one of the same
// topic and key failed: that later record fails too, unsent. An error
// means the record may or may not be in the topic: publishing it again can
// duplicate it, never lose it.
//
// Close releases what the Publisher holds; no Publish may follow it.
type Publisher interface {
	Publish(ctx context.Context, records []*Record) []error
	Close() error
}
