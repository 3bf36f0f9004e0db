package consumer

import (
	"context"
	"strings"
	"time"
	"unsafe"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/ceheader"
	"github.com/courierkit/courier/record"
)

// Handler handles one message. Return nil when the message is handled: its
// offset is then committed. Return an error to have it retried (up to
// Config.MaxAttempts) and then dead-lettered; wrap it with Permanent to skip
// the retries, or with RetryAfter to pick the delay. A panic counts as a
// failed attempt (a *PanicError).
//
// Handle must honor ctx: it ends when the attempt times out
// (Config.AttemptTimeout) and when a stopping consumer's ShutdownTimeout
// runs out. A message can be delivered more than once (after a crash or a
// rebalance), so handling must be idempotent; Message.ID tells copies apart.
type Handler interface {
	Handle(ctx context.Context, m *Message) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, m *Message) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, m *Message) error { return f(ctx, m) }

// Message is a record read from Kafka, as the handler sees it.
type Message struct {
	Topic     string
	Partition int32
	Offset    int64
	// Key is the record key; nil when the record has none.
	Key []byte
	// Value is the record value; nil for a tombstone.
	Value []byte
	// Headers are the record headers, in order; names may repeat. They are
	// the record's own, as Kafka sent them, not copies.
	Headers Headers
	// Timestamp is the record's timestamp.
	Timestamp time.Time
	// ID is the ce_id header, the message's identity; "" when missing.
	ID string
	// CorrelationID is the ce_correlationid header; "" when missing.
	CorrelationID string
	// TenantID is the ce_tenantid header (producer.Event.TenantID); ""
	// when missing or invalid: a value that is not UTF-8, holds a control
	// character or has more than 2048 bytes counts as none (Headers still
	// hold it). Messages from a retry topic and dead letters keep it, as
	// they keep every original header.
	TenantID string
	// Attempt is 1 on the first attempt, 2 on the first retry, and so on,
	// counting on through the retry topics: a message that failed 3
	// attempts on its main topic has Attempt 4 in its first retry tier.
	Attempt int
	// OriginalTopic is the main topic the message was first read from:
	// Topic, unless the message comes from a retry topic.
	OriginalTopic string
	// RetryRound is 0 on the main topic and n in the nth retry tier (see
	// Config.RetryTopics).
	RetryRound int
}

// Header is one record header: Key and Value. A nil Value is a null value.
type Header = record.Header

// Headers are a record's headers in order. Handing the handler the headers
// Sarama decoded, rather than copies, saves a third of the runner's work
// per message.
type Headers []*Header

// record.Header and sarama.RecordHeader are the same struct (this
// conversion compiles only while they are), so a pointer to one points to
// what reads as the other, and a slice of such pointers can be read as a
// slice of the others.
var _ = sarama.RecordHeader(record.Header{})

// headersOf is Sarama's headers of a record read as Headers, without
// copying them.
func headersOf(hs []*sarama.RecordHeader) Headers {
	return unsafe.Slice((**Header)(unsafe.Pointer(unsafe.SliceData(hs))), len(hs))
}

// Lookup returns the value of the last header named name (names are
// case-sensitive, as in Kafka) and whether there is one.
func (hs Headers) Lookup(name string) ([]byte, bool) {
	for i := len(hs) - 1; i >= 0; i-- {
		if hs[i] != nil && string(hs[i].Key) == name {
			return hs[i].Value, true
		}
	}
	return nil, false
}

// setMessage fills m from a Sarama record and reports whether the record
// has a traceparent header. Missing or empty headers leave the fields they
// feed empty; of headers named alike, the last one counts (as in Lookup).
func setMessage(m *Message, msg *sarama.ConsumerMessage) (traced bool) {
	*m = Message{
		Topic:     msg.Topic,
		Partition: msg.Partition,
		Offset:    msg.Offset,
		Key:       msg.Key,
		Value:     msg.Value,
		Timestamp: msg.Timestamp,
		Headers:   headersOf(msg.Headers),

		OriginalTopic: msg.Topic,
	}
	var id, corr, tenant []byte
	for _, h := range msg.Headers {
		if h == nil {
			continue
		}
		switch string(h.Key) {
		case ceheader.ID:
			id = h.Value
		case ceheader.CorrelationID:
			corr = h.Value
		case ceheader.TenantID:
			tenant = h.Value
		case ceheader.TraceParent:
			traced = true
		}
	}
	if !ceheader.ValidTenantBytes(tenant) {
		tenant = nil
	}
	// One string for all: a message usually has several, and this is the
	// hot path.
	if len(id)+len(corr)+len(tenant) > 0 {
		var b strings.Builder
		b.Grow(len(id) + len(corr) + len(tenant))
		b.Write(id)
		b.Write(corr)
		b.Write(tenant)
		all := b.String()
		m.ID, m.CorrelationID, m.TenantID = all[:len(id)], all[len(id):len(id)+len(corr)], all[len(id)+len(corr):]
	}
	return traced
}
