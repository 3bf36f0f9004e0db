package dlq

import (
	"context"
	"fmt"
	"sync"

	"github.com/IBM/sarama"
)

// Extent is the part of one partition of a dead-letter topic that ScanFrom
// read: the offsets From <= offset < End.
type Extent struct {
	// Partition is the partition of the dead-letter topic.
	Partition int32
	// Oldest is the partition's first offset still kept when the read
	// began: retention deleted the records before it.
	Oldest int64
	// From is where the read began: the offset asked for, or Oldest when
	// none was asked for, when the one asked for is gone, or when it is past
	// the partition's end (the topic was deleted and created again, so its
	// offsets start over).
	From int64
	// End is where the next read starts: the high-water mark when the read
	// began or, for the partition an error stopped, the offset after the
	// last record fn took.
	End int64
}

// ScanFrom reads what was appended to a dead-letter topic since an earlier
// read, for a caller that keeps up with the topic (an index, a console).
// Of each partition p it reads the records from offset from[p] up to the
// high-water mark when ScanFrom begins, and calls fn with every one: no
// filter, corrupt records with Entry.Err set. A partition not in from (the
// first read, or a partition added since) is read from its oldest record,
// as is one whose offset is gone or past its end (see Extent.From). Like
// Scan it joins no consumer group and commits nothing.
//
// Unlike Scan, it reads the partitions at once, so a topic of many
// partitions costs about one fetch rather than one per partition. fn is
// called for one record at a time, each partition's records in offset
// order; the partitions interleave.
//
// It returns the extent of every partition, in partition order; passing
// each End in from to the next call reads only what was appended in
// between. It stops at the first error (ctx ending, fn's error, the
// broker's) and returns it with the extents, each ending after the last
// record fn took of its partition (at its From when fn took none), so a
// caller keeps what it got and the next call goes on from there. An error
// before the read began (ErrNoTopic, metadata) comes with no extents.
func ScanFrom(ctx context.Context, client sarama.Client, topic string, from map[int32]int64, fn func(Entry) error) ([]Extent, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	list, err := spans(client, topic, Filter{})
	if err != nil {
		return nil, err
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("dlq: %w", err)
	}
	defer consumer.Close()
	r := reader{client: client, consumer: consumer, topic: topic}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu     sync.Mutex // one fn at a time; guards failed and the ends
		failed error      // the first error, which stops every read
		wg     sync.WaitGroup
	)
	extents := make([]Extent, len(list))
	for i, s := range list {
		if at, ok := from[s.partition]; ok && at >= s.oldest && at <= s.end {
			s.from = at
		}
		extents[i] = Extent{Partition: s.partition, Oldest: s.oldest, From: s.from, End: s.from}
		wg.Go(func() {
			err := r.read(ctx, s, func(m *sarama.ConsumerMessage) error {
				e := entry(m) // decoded beside the other partitions
				mu.Lock()
				defer mu.Unlock()
				if failed != nil {
					return failed
				}
				if err := fn(e); err != nil {
					failed = err
					cancel()
					return err
				}
				extents[i].End = m.Offset + 1
				return nil
			}, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				extents[i].End = s.end
			case failed == nil:
				failed = err
				cancel()
			}
		})
	}
	wg.Wait()
	return extents, failed
}
