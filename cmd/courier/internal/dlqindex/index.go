package dlqindex

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/dlq"
)

// Index is the in-memory index of one dead-letter topic. Its methods are
// safe for concurrent use.
type Index struct {
	client sarama.Client
	topic  string
	snap   atomic.Pointer[snapshot]

	mu     sync.Mutex
	flight *flight // the Refresh under way, nil when none is

	// Owned by the Refresh that reads (one at a time, see Refresh).
	parts map[int32]*part
	tabs  [numColumns]table
}

// part is what the index holds of one partition of the topic.
type part struct {
	next  int64 // the offset the next Refresh reads from
	first int64 // the lowest offset indexed, when n > 0
	n     int   // how many records of the partition are indexed
}

// snapshot is what Summary, List and Len read: never changed once stored.
type snapshot struct {
	recs []rec // ascending by (timestamp, partition, offset)
	vals [numColumns][]string
	at   time.Time // RefreshedAt
}

// New returns an empty index of the dead-letter topic, read through
// client (which the caller closes, after the last Refresh). Refresh fills
// it.
func New(client sarama.Client, topic string) *Index {
	x := &Index{client: client, topic: topic, parts: map[int32]*part{}}
	for c := range x.tabs {
		x.tabs[c] = newTable()
	}
	x.snap.Store(&snapshot{vals: x.values()})
	return x
}

// Len returns how many records the index holds, corrupt ones included.
func (x *Index) Len() int { return len(x.snap.Load().recs) }

// RefreshedAt returns when the last Refresh that succeeded began: the
// index holds every record the topic held then. Zero before the first.
func (x *Index) RefreshedAt() time.Time { return x.snap.Load().at }

// flight is one Refresh under way, which the Refresh calls made meanwhile
// wait for.
type flight struct {
	done chan struct{}
	err  error
	// abandoned: the context of the call that read ended, so its error is
	// no answer for the others.
	abandoned bool
}

// Refresh reads what the topic appended since the last Refresh (the first
// reads it from its oldest record), forgets the records retention deleted
// since and those of partitions gone (a topic deleted and created again
// starts over), and makes the result visible to Summary, List and Len at
// once. It returns when ctx ends, with its error; what it read until then
// is kept, and the next Refresh goes on from there. An unknown topic gives
// an error matching dlq.ErrNoTopic.
//
// A Refresh called while another is reading waits for that one and returns
// its result, so a burst of calls reads the topic once; it waits no longer
// than its own ctx, and when the context of the one reading ends first, a
// waiting call reads in its place.
func (x *Index) Refresh(ctx context.Context) error {
	for {
		x.mu.Lock()
		f := x.flight
		if f == nil {
			f = &flight{done: make(chan struct{})}
			x.flight = f
			x.mu.Unlock()
			return x.lead(ctx, f)
		}
		x.mu.Unlock()
		select {
		case <-f.done:
			if f.abandoned && ctx.Err() == nil {
				continue
			}
			return f.err
		case <-ctx.Done():
			return fmt.Errorf("dlqindex: refresh of %q: %w", x.topic, ctx.Err())
		}
	}
}

// lead runs the read of flight f and tells those waiting for it.
func (x *Index) lead(ctx context.Context, f *flight) error {
	defer func() {
		f.abandoned = ctx.Err() != nil
		x.mu.Lock()
		x.flight = nil
		x.mu.Unlock()
		close(f.done)
	}()
	f.err = x.read(ctx)
	return f.err
}

// read reads the topic from where the last read ended and stores the new
// snapshot.
func (x *Index) read(ctx context.Context) error {
	began := time.Now()
	from := make(map[int32]int64, len(x.parts))
	for p, st := range x.parts {
		from[p] = st.next
	}
	var fresh []rec
	extents, err := dlq.ScanFrom(ctx, x.client, x.topic, from, func(e dlq.Entry) error {
		fresh = append(fresh, x.rec(e))
		return nil
	})
	x.apply(extents, fresh, err == nil, began)
	if err != nil {
		return fmt.Errorf("dlqindex: refresh of %q: %w", x.topic, err)
	}
	return nil
}

// apply stores the snapshot holding fresh, the records read in extents,
// without the records retention deleted. complete says the extents cover
// every partition of the topic, so a partition missing from them is gone;
// a complete read began at began.
func (x *Index) apply(extents []dlq.Extent, fresh []rec, complete bool, began time.Time) {
	old := x.snap.Load()
	// cut[p]: the records of partition p below this offset are gone.
	cut := map[int32]int64{}
	seen := make(map[int32]bool, len(extents))
	for _, ex := range extents {
		seen[ex.Partition] = true
		st := x.parts[ex.Partition]
		switch {
		case st == nil:
			st = &part{}
			x.parts[ex.Partition] = st
		case st.n > 0 && ex.From < st.next: // its offsets started over
			cut[ex.Partition] = math.MaxInt64
		case st.n > 0 && ex.Oldest > st.first:
			cut[ex.Partition] = ex.Oldest
		}
		st.next = ex.End
	}
	if complete {
		for p, st := range x.parts {
			if !seen[p] {
				if st.n > 0 {
					cut[p] = math.MaxInt64
				}
				delete(x.parts, p)
			}
		}
	}

	slices.SortFunc(fresh, compareRecs)
	var recs []rec
	if len(cut) == 0 {
		recs = appendSorted(old.recs, fresh)
		for i := range fresh {
			x.count(&fresh[i])
		}
	} else {
		kept := make([]rec, 0, len(old.recs)+len(fresh))
		for _, r := range old.recs {
			if c, ok := cut[r.partition]; !ok || r.offset >= c {
				kept = append(kept, r)
			}
		}
		recs = appendSorted(kept, fresh)
		for _, st := range x.parts {
			st.n = 0
		}
		for i := range recs {
			x.count(&recs[i])
		}
		x.compact(recs) // recs is this snapshot's own: no reader has it yet
	}
	s := &snapshot{recs: recs, vals: x.values(), at: old.at}
	if complete {
		s.at = began
	}
	x.snap.Store(s)
}

// count adds r to the counts of its partition.
func (x *Index) count(r *rec) {
	st := x.parts[r.partition] // dlq.ScanFrom returns the extent of every record it gave
	if st.n == 0 || r.offset < st.first {
		st.first = r.offset
	}
	st.n++
}

// appendSorted returns recs and fresh, both sorted, merged in order. When
// fresh sorts after recs it appends in place: a snapshot holding recs
// reads only up to its length, so what goes after is not shared.
func appendSorted(recs, fresh []rec) []rec {
	if len(fresh) == 0 {
		return recs
	}
	if len(recs) == 0 || compareRecs(recs[len(recs)-1], fresh[0]) < 0 {
		return append(recs, fresh...)
	}
	out := make([]rec, 0, len(recs)+len(fresh))
	i, j := 0, 0
	for i < len(recs) && j < len(fresh) {
		if compareRecs(recs[i], fresh[j]) <= 0 {
			out = append(out, recs[i])
			i++
		} else {
			out = append(out, fresh[j])
			j++
		}
	}
	out = append(out, recs[i:]...)
	return append(out, fresh[j:]...)
}

// compareRecs orders records by timestamp, partition and offset: the
// order of List, newest last.
func compareRecs(a, b rec) int {
	if c := cmp.Compare(a.ts, b.ts); c != 0 {
		return c
	}
	if c := cmp.Compare(a.partition, b.partition); c != 0 {
		return c
	}
	return cmp.Compare(a.offset, b.offset)
}
