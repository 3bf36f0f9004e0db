package handled

import (
	"testing"
	"time"
)

// at builds a log from handlings given as (member, partition, offset,
// milliseconds after t0).
func at(t0 time.Time, hs ...struct {
	member    string
	partition int32
	offset    int64
	ms        int
}) *Log {
	l := &Log{}
	for _, h := range hs {
		l.Add(h.member, h.partition, h.offset)
		last := &l.of[h.partition][len(l.of[h.partition])-1]
		last.at = t0.Add(time.Duration(h.ms) * time.Millisecond)
	}
	return l
}

func TestCountAndStalls(t *testing.T) {
	t0 := time.Now()
	type h = struct {
		member    string
		partition int32
		offset    int64
		ms        int
	}
	l := at(t0,
		// Partition 0 stays with a; it stalls 300ms across the change at 100ms.
		h{"a", 0, 0, 0}, h{"a", 0, 1, 90}, h{"a", 0, 2, 390}, h{"a", 0, 3, 450},
		// Partition 1 moves from a to b, which handles offset 1 again.
		h{"a", 1, 0, 50}, h{"a", 1, 1, 80}, h{"b", 1, 1, 600}, h{"b", 1, 2, 650},
	)
	c := l.Count([]int64{4, 2}) // offset 4 of partition 0 was never handled
	if c != (Counts{Records: 7, Lost: 1, Duplicates: 1}) {
		t.Errorf("Count = %+v, want 7 records, 1 lost, 1 duplicate", c)
	}
	s := l.Stalls(t0.Add(100*time.Millisecond), t0.Add(700*time.Millisecond))
	want := Stall{Kept: 300 * time.Millisecond, KeptPartitions: 1, Moved: 520 * time.Millisecond, MovedPartitions: 1}
	if s != want {
		t.Errorf("Stalls = %+v, want %+v", s, want)
	}
	if !l.HandledSince(t0.Add(500*time.Millisecond), "b") || l.HandledSince(t0.Add(500*time.Millisecond), "a", "b") {
		t.Error("HandledSince: b handled after 500ms and a did not")
	}
	if l.Total() != 8 {
		t.Errorf("Total = %d, want 8", l.Total())
	}
}
