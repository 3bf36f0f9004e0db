package dlq

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/ceheader"
	"github.com/courierkit/courier/internal/groupname"
)

// Entry is one record of a dead-letter topic as Scan reads it back.
type Entry struct {
	// Partition and Offset place the record in the dead-letter topic.
	Partition int32
	Offset    int64
	// Timestamp is the dead-letter record's own timestamp.
	Timestamp time.Time
	// Envelope is the record's envelope (Read); zero when Err is set.
	Envelope Envelope
	// Err is why the record is not a readable dead letter (a corrupt or
	// invalid envelope, or one of a newer version); it matches
	// ErrCorruptEnvelope, ErrInvalidEnvelope or ErrUnsupportedVersion.
	Err error
}

// entry reads a consumed record into an Entry.
func entry(m *sarama.ConsumerMessage) Entry {
	e := Entry{Partition: m.Partition, Offset: m.Offset, Timestamp: m.Timestamp}
	e.Envelope, e.Err = Read(m.Key, m.Value, recordHeaders(m))
	return e
}

// recordHeaders are the headers of m, in order.
func recordHeaders(m *sarama.ConsumerMessage) []Header {
	headers := make([]Header, 0, len(m.Headers))
	for _, h := range m.Headers {
		if h != nil {
			headers = append(headers, Header(*h))
		}
	}
	return headers
}

// Filter selects dead letters for Scan's callers and Replay. Empty fields
// match everything; set fields must all match.
type Filter struct {
	// OriginalTopic matches original_topic exactly.
	OriginalTopic string
	// Key matches the original key exactly (as text).
	Key string
	// ErrorContains matches a substring of the error, ignoring case.
	ErrorContains string
	// ErrorKind matches error_kind exactly: KindRetriesExhausted or
	// KindPermanent.
	ErrorKind ErrorKind
	// ConsumerGroup matches consumer_group exactly: the dead letters of
	// one consumer group (the relay's have none, so they never match).
	ConsumerGroup string
	// TenantID matches the tenant of the original record exactly: the
	// value of its ce_tenantid header (Envelope.TenantID). Dead letters
	// without one never match a tenant.
	TenantID string
	// Since and Until bound failed_at: Since <= failed_at < Until.
	Since, Until time.Time
	// Partitions selects these partitions of the dead-letter topic.
	Partitions []int32
	// FromOffset and UntilOffset bound the offset in the dead-letter topic:
	// FromOffset <= offset < UntilOffset; UntilOffset 0 sets no bound.
	FromOffset, UntilOffset int64
}

// Match reports whether f selects e. A corrupt entry matches when its place
// does and no field of the envelope is asked for, since its envelope
// cannot be read.
func (f Filter) Match(e Entry) bool {
	if !f.matchPlace(e.Partition, e.Offset) {
		return false
	}
	if e.Err != nil {
		return f.OriginalTopic == "" && f.Key == "" && f.ErrorContains == "" && f.ErrorKind == "" && f.ConsumerGroup == "" &&
			f.TenantID == "" && f.Since.IsZero() && f.Until.IsZero()
	}
	env := e.Envelope
	switch {
	case f.OriginalTopic != "" && env.OriginalTopic != f.OriginalTopic:
		return false
	case f.Key != "" && (env.OriginalKey == nil || *env.OriginalKey != f.Key):
		return false
	case f.ErrorContains != "" && !strings.Contains(strings.ToLower(env.Error), strings.ToLower(f.ErrorContains)):
		return false
	case f.ErrorKind != "" && env.ErrorKind != f.ErrorKind:
		return false
	case f.ConsumerGroup != "" && env.ConsumerGroup != f.ConsumerGroup:
		return false
	case f.TenantID != "" && env.TenantID() != f.TenantID:
		return false
	case !f.Since.IsZero() && env.FailedAt.Before(f.Since):
		return false
	case !f.Until.IsZero() && !env.FailedAt.Before(f.Until):
		return false
	}
	return true
}

func (f Filter) matchPlace(partition int32, offset int64) bool {
	if len(f.Partitions) > 0 && !slices.Contains(f.Partitions, partition) {
		return false
	}
	return offset >= f.FromOffset && (f.UntilOffset == 0 || offset < f.UntilOffset)
}

// Validate names what is wrong with f: a negative partition or offset, an
// empty offset or time range, an unknown ErrorKind, an invalid
// ConsumerGroup, a TenantID that is not a tenant (Envelope.TenantID never
// returns one that is not UTF-8, holds a control character or is longer
// than 2048 bytes). Scan, Get and Replay call it; a caller that builds a
// filter from a form calls it to refuse one before acting on it.
func (f Filter) Validate() error {
	switch {
	case slices.ContainsFunc(f.Partitions, func(p int32) bool { return p < 0 }):
		return fmt.Errorf("dlq: Partitions %v holds a negative partition; partitions are numbered from 0", f.Partitions)
	case f.FromOffset < 0 || f.UntilOffset < 0:
		return fmt.Errorf("dlq: the offset range %d..%d is negative; offsets start at 0", f.FromOffset, f.UntilOffset)
	case f.UntilOffset != 0 && f.UntilOffset <= f.FromOffset:
		return fmt.Errorf("dlq: UntilOffset %d is not after FromOffset %d, so no offset matches", f.UntilOffset, f.FromOffset)
	case !f.Since.IsZero() && !f.Until.IsZero() && !f.Until.After(f.Since):
		return fmt.Errorf("dlq: Until %s is not after Since %s, so no time matches", f.Until.Format(time.RFC3339), f.Since.Format(time.RFC3339))
	case f.ErrorKind != "" && f.ErrorKind != KindRetriesExhausted && f.ErrorKind != KindPermanent:
		return fmt.Errorf("dlq: ErrorKind %q is no error kind; use %q or %q (or leave it empty for both)",
			short(string(f.ErrorKind)), KindRetriesExhausted, KindPermanent)
	case f.TenantID != "" && !ceheader.ValidTenant(f.TenantID):
		return fmt.Errorf("dlq: TenantID %.64q is not a tenant (UTF-8, at most %d bytes, no control characters), so no dead letter matches it",
			f.TenantID, ceheader.MaxAttributeBytes)
	}
	if err := groupname.Validate(f.ConsumerGroup); err != nil {
		return fmt.Errorf("dlq: ConsumerGroup %q %w", short(f.ConsumerGroup), err)
	}
	return nil
}

// ErrNoTopic is matched by the error of Scan, Get and Replay for a
// dead-letter topic the cluster does not have.
var ErrNoTopic = errors.New("dlq: no such topic")

// span is the part of a partition a read covers: [from, end); oldest is
// the partition's first offset still kept.
type span struct {
	partition         int32
	from, end, oldest int64
}

// spans returns, for each partition of topic that f selects, the offsets
// from the oldest (or f.FromOffset) to the high-water mark now.
func spans(client sarama.Client, topic string, f Filter) ([]span, error) {
	partitions, err := client.Partitions(topic)
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		return nil, fmt.Errorf("%w: %q", ErrNoTopic, topic)
	}
	if err != nil {
		return nil, fmt.Errorf("dlq: partitions of %q: %w", topic, err)
	}
	var out []span
	for _, p := range partitions {
		if len(f.Partitions) > 0 && !slices.Contains(f.Partitions, p) {
			continue
		}
		oldest, err := client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return nil, fmt.Errorf("dlq: oldest offset of %s/%d: %w", topic, p, err)
		}
		end, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return nil, fmt.Errorf("dlq: high-water mark of %s/%d: %w", topic, p, err)
		}
		if f.UntilOffset > 0 {
			end = min(end, f.UntilOffset)
		}
		out = append(out, span{partition: p, from: max(oldest, f.FromOffset), end: end, oldest: oldest})
	}
	return out, nil
}

// reader reads spans of a topic's partitions, committing nothing.
type reader struct {
	client   sarama.Client // metadata, and the broker asked about gaps
	consumer sarama.Consumer
	topic    string
}

// idleCheck is how long read waits for a record before it asks the broker
// whether the offsets left in the span hold records at all: a partition may
// end on a transaction marker or on offsets compaction removed, which no
// consumer ever delivers.
const idleCheck = time.Second

// read calls record for each record of s in offset order, and gap (when
// not nil) for each run of offsets [from, to) of s that holds no record
// (transaction markers, records removed by compaction), until record
// returns an error or the span ends.
func (r reader) read(ctx context.Context, s span, record func(*sarama.ConsumerMessage) error, gap func(from, to int64)) error {
	if s.from >= s.end {
		return nil
	}
	pc, err := r.consumer.ConsumePartition(r.topic, s.partition, s.from)
	if err != nil {
		return fmt.Errorf("dlq: read %s/%d from offset %d: %w", r.topic, s.partition, s.from, err)
	}
	defer pc.AsyncClose()
	next := s.from // the offset after the last record read
	if gap == nil {
		gap = func(int64, int64) {}
	}
	idle := time.NewTimer(idleCheck)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-pc.Errors():
			if err != nil {
				return fmt.Errorf("dlq: read %s/%d: %w", r.topic, s.partition, err.Err)
			}
		case m := <-pc.Messages():
			if m == nil {
				return fmt.Errorf("dlq: reading %s/%d stopped before offset %d", r.topic, s.partition, s.end)
			}
			if m.Offset >= s.end { // only markers and removed records were left in the span
				gap(next, s.end)
				return nil
			}
			if m.Offset > next {
				gap(next, m.Offset)
			}
			next = m.Offset + 1
			if err := record(m); err != nil {
				return err
			}
			if next >= s.end {
				return nil
			}
			idle.Reset(idleCheck)
		case <-idle.C:
			left, known, err := r.recordsLeft(s.partition, next, s.end)
			if err == nil && known && !left {
				gap(next, s.end)
				return nil
			}
			idle.Reset(idleCheck) // records are on their way, or the broker could not tell: wait on
		}
	}
}

// recordsLeft asks the partition's leader whether it holds a record at an
// offset in [from, end); known is false when its answer does not reach end.
func (r reader) recordsLeft(partition int32, from, end int64) (left, known bool, err error) {
	if !r.client.Config().Version.IsAtLeast(sarama.V0_11_0_0) {
		return false, false, nil // no transaction markers before 0.11; wait for the records
	}
	leader, err := r.client.Leader(r.topic, partition)
	if err != nil {
		return false, false, err
	}
	const maxBytes = 1 << 20
	req := &sarama.FetchRequest{Version: 4, MaxBytes: maxBytes, Isolation: sarama.ReadUncommitted}
	req.AddBlock(r.topic, partition, from, maxBytes, -1)
	resp, err := leader.Fetch(req)
	if err != nil {
		return false, false, err
	}
	block := resp.GetBlock(r.topic, partition)
	if block == nil || block.Err != sarama.ErrNoError {
		return false, false, nil
	}
	reached := from - 1 // the last offset the answer covers
	for _, set := range block.RecordsSet {
		switch {
		case set.RecordBatch != nil:
			b := set.RecordBatch
			if b.PartialTrailingRecord {
				return false, false, nil
			}
			for _, rec := range b.Records {
				if o := b.FirstOffset + rec.OffsetDelta; !b.Control && o >= from && o < end {
					return true, true, nil
				}
			}
			reached = max(reached, b.FirstOffset+int64(b.LastOffsetDelta))
		case set.MsgSet != nil:
			for _, m := range set.MsgSet.Messages {
				if m.Offset >= from && m.Offset < end {
					return true, true, nil
				}
				reached = max(reached, m.Offset)
			}
		}
	}
	// Nothing at all from `from` on means everything before end is gone.
	return false, reached >= end-1 || len(block.RecordsSet) == 0, nil
}

// Scan calls fn with every record of the dead-letter topic that f selects
// (Filter.Match), partition by partition in offset order, up to the
// high-water marks when Scan starts. It joins no consumer group and commits
// nothing, so inspecting never moves a replay's position. Corrupt records
// come with Entry.Err set. Scan stops at fn's first error and returns it.
func Scan(ctx context.Context, client sarama.Client, topic string, f Filter, fn func(Entry) error) error {
	if err := f.Validate(); err != nil {
		return err
	}
	list, err := spans(client, topic, f)
	if err != nil {
		return err
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return fmt.Errorf("dlq: %w", err)
	}
	defer consumer.Close()
	r := reader{client: client, consumer: consumer, topic: topic}
	for _, s := range list {
		err := r.read(ctx, s, func(m *sarama.ConsumerMessage) error {
			if e := entry(m); f.Match(e) {
				return fn(e)
			}
			return nil
		}, nil)
		if err != nil {
			return err
		}
	}
	return nil
}

// ErrNotFound is matched by the error of Get when the dead-letter topic
// has no record at that place.
var ErrNotFound = errors.New("dlq: no record at that place")

// Get reads the one record at partition and offset of the dead-letter
// topic, committing nothing.
func Get(ctx context.Context, client sarama.Client, topic string, partition int32, offset int64) (Entry, error) {
	if partition < 0 || offset < 0 || offset == math.MaxInt64 {
		return Entry{}, fmt.Errorf("%w: %s partition %d offset %d (partitions and offsets start at 0)", ErrNotFound, topic, partition, offset)
	}
	var found *Entry
	err := Scan(ctx, client, topic, Filter{Partitions: []int32{partition}, FromOffset: offset, UntilOffset: offset + 1}, func(e Entry) error {
		found = &e
		return nil
	})
	if err != nil {
		return Entry{}, err
	}
	if found == nil { // no record there: before the oldest, past the end, or a gap
		return Entry{}, fmt.Errorf("%w: %s partition %d offset %d (see `courier dlq list` for what is there)", ErrNotFound, topic, partition, offset)
	}
	return *found, nil
}
