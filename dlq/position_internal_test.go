package dlq

import (
	"slices"
	"testing"
)

func TestPositionSettlesAboveRecordsLeftBehind(t *testing.T) {
	t.Parallel()
	p := position{next: 10}
	for _, o := range []int64{12, 14, 13, 20} {
		p.settle(o)
	}
	if p.next != 10 || !slices.Equal(p.done, []offsetRange{{12, 14}, {20, 20}}) {
		t.Fatalf("after settling 12, 14, 13, 20 from 10: next %d, done %v; want 10, [12-14 20]", p.next, p.done)
	}
	for o, want := range map[int64]bool{9: true, 10: false, 11: false, 12: true, 14: true, 15: false, 20: true, 21: false} {
		if p.has(o) != want {
			t.Errorf("has(%d) = %v, want %v", o, !want, want)
		}
	}
	p.run = "r1"
	if got := p.metadata(); got != "courier-replay/1 run=r1 done=12-14,20" {
		t.Errorf("metadata = %q", got)
	}

	p.settle(11) // 10 is still left behind
	if p.next != 10 || !slices.Equal(p.done, []offsetRange{{11, 14}, {20, 20}}) {
		t.Fatalf("after settling 11: next %d, done %v; want 10, [11-14 20]", p.next, p.done)
	}
	p.settle(10) // the gap closes: next moves past the run
	if p.next != 15 || !slices.Equal(p.done, []offsetRange{{20, 20}}) {
		t.Fatalf("after settling 10: next %d, done %v; want 15, [20]", p.next, p.done)
	}
}

func TestPositionMetadataRoundTrip(t *testing.T) {
	t.Parallel()
	p := position{next: 3, run: "ab12"}
	for _, o := range []int64{5, 6, 7, 9, 100} {
		p.settle(o)
	}
	back, err := parsePosition(p.next, p.metadata())
	if err != nil || back.next != p.next || !slices.Equal(back.done, p.done) || back.run != p.run {
		t.Fatalf("parse(%q) = %+v, %v; want %+v", p.metadata(), back, err, p)
	}
	if plain, err := parsePosition(7, ""); err != nil || plain.next != 7 || plain.done != nil {
		t.Errorf("a plain offset parses as %+v, %v", plain, err)
	}
	if other, err := parsePosition(7, "written by another tool"); err != nil || other.done != nil {
		t.Errorf("another tool's metadata parses as %+v, %v; want it ignored", other, err)
	}
	if bare, err := parsePosition(7, "courier-replay/1 run=ab12"); err != nil || bare.run != "ab12" || bare.done != nil {
		t.Errorf("a position without ranges parses as %+v, %v", bare, err)
	}
	for _, bad := range []string{"courier-replay/1 x", "courier-replay/1 run=a done=x", "courier-replay/1 run=a done=9-8",
		"courier-replay/1 run=a done=9,9", "courier-replay/1 run=a done=5", "courier-replay/1 run=a what=9"} {
		if _, err := parsePosition(7, bad); err == nil {
			t.Errorf("parse(%q) accepted it", bad)
		}
	}
}

func TestPositionSkipToDropsWhatRetentionDeleted(t *testing.T) {
	t.Parallel()
	p := position{next: 0, done: []offsetRange{{3, 4}, {8, 9}}}
	p.skipTo(8)
	if p.next != 10 || len(p.done) != 0 {
		t.Fatalf("skipTo(8) = next %d, done %v; want 10, none", p.next, p.done)
	}
	p.skipTo(5) // behind: no change
	if p.next != 10 {
		t.Fatalf("skipTo behind the position moved it to %d", p.next)
	}
}
