// Package handled keeps a log of which member of a consumer group handled
// which record of a topic, and when, to tell from it the records lost, the
// records handled more than once, and how long each partition stalled
// across a change of the group (its rebalancing). Tests and courier bench
// rebalance read it.
package handled

import (
	"sync"
	"time"
)

// Log is the log of a topic's handlings. The zero Log is empty and ready;
// it is safe for concurrent use.
type Log struct {
	mu sync.Mutex
	// of holds each partition's handlings in the order they happened.
	of map[int32][]handling
}

type handling struct {
	member string
	offset int64
	at     time.Time
}

// Add records that member handled the record of partition at offset, now.
func (l *Log) Add(member string, partition int32, offset int64) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.of == nil {
		l.of = map[int32][]handling{}
	}
	l.of[partition] = append(l.of[partition], handling{member, offset, now})
}

// Total is the number of handlings, counting each copy of a record.
func (l *Log) Total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, hs := range l.of {
		n += len(hs)
	}
	return n
}

// HandledSince reports whether each of members handled a record at from
// or later.
func (l *Log) HandledSince(from time.Time, members ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	for _, hs := range l.of {
		for _, h := range hs {
			if !h.at.Before(from) {
				seen[h.member] = true
			}
		}
	}
	for _, m := range members {
		if !seen[m] {
			return false
		}
	}
	return true
}

// Counts are the records of a topic handled, lost and handled again.
type Counts struct {
	// Records is the number of records handled at least once.
	Records int
	// Lost is the number of records up to the last offsets given that
	// were never handled.
	Lost int
	// Duplicates is the number of handlings beyond the first of each
	// record.
	Duplicates int
}

// Count counts the records handled, and those lost among the offsets 0 to
// last[p] of each partition p.
func (l *Log) Count(last []int64) Counts {
	l.mu.Lock()
	defer l.mu.Unlock()
	var c Counts
	for p := range last {
		seen := map[int64]int{}
		for _, h := range l.of[int32(p)] {
			seen[h.offset]++
		}
		for o := int64(0); o <= last[p]; o++ {
			if seen[o] == 0 {
				c.Lost++
			}
		}
		for _, n := range seen {
			c.Records++
			c.Duplicates += n - 1
		}
	}
	return c
}

// Stall is the longest stall of the partitions across a change of the
// group: the longest gap between two handlings of a partition between
// the change and the end of its window. The gap from the last handling
// before the change counts, and so does the one from the last handling
// to the end of the window, so the window should end before the records
// stop coming. A partition not handled in the window counts as moved.
type Stall struct {
	// Kept is the longest stall of a partition whose owner before the
	// change is its owner at the end of the window; KeptPartitions is how
	// many such partitions there are.
	Kept           time.Duration
	KeptPartitions int
	// Moved is the longest stall of the other partitions, which moved to
	// another member; MovedPartitions is how many there are.
	Moved           time.Duration
	MovedPartitions int
}

// Stalls returns the stalls of the window [from, to).
func (l *Log) Stalls(from, to time.Time) Stall {
	l.mu.Lock()
	defer l.mu.Unlock()
	var s Stall
	for _, hs := range l.of {
		var (
			prev          time.Time
			before, after string
			longest       time.Duration
		)
		for _, h := range hs {
			switch {
			case h.at.Before(from):
				prev, before = h.at, h.member
				continue
			case !h.at.Before(to):
				continue
			}
			if !prev.IsZero() {
				longest = max(longest, h.at.Sub(prev))
			}
			prev, after = h.at, h.member
		}
		if !prev.IsZero() && prev.Before(to) {
			longest = max(longest, to.Sub(prev)) // a stall still running at the end
		}
		if before == after {
			s.Kept, s.KeptPartitions = max(s.Kept, longest), s.KeptPartitions+1
		} else {
			s.Moved, s.MovedPartitions = max(s.Moved, longest), s.MovedPartitions+1
		}
	}
	return s
}
