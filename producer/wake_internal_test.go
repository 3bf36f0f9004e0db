package producer

import (
	"testing"
	"time"
)

// TestCommitWatchSeesEveryEnqueueCommit drives the prober's commit watch with
// snapshots as PostgreSQL would take them, for each place the transaction
// of an enqueue (xid 105) can be in when the probe sees the sequence move.
func TestCommitWatchSeesEveryEnqueueCommit(t *testing.T) {
	start := time.Unix(0, 0)
	const window = 100 * time.Millisecond
	type probe struct {
		snap  string
		at    time.Duration // since start
		moved bool
		ended bool // want
	}
	for name, probes := range map[string][]probe{
		"listed in progress at the move": {
			{snap: "100:110:100,105", moved: true},
			{snap: "100:110:100,105", at: 5 * time.Millisecond},
			{snap: "100:111:100", at: 2 * time.Second, ended: true},
		},
		"above the move's xmax, on a quiet database": {
			{snap: "100:101:100", moved: true},
			{snap: "100:101:100", at: time.Second},
			{snap: "100:106:100", at: 5 * time.Second, ended: true}, // 105 ended: xmax passed it, not in progress
		},
		"above the move's xmax, listed once others end": {
			{snap: "100:101:100", moved: true},
			{snap: "100:108:100,105", at: 10 * time.Millisecond, ended: true}, // 101..107 but 105 ended
			{snap: "100:108:100,105", at: time.Second},
			{snap: "100:108:100", at: 3 * time.Second, ended: true},
		},
		"unrelated transactions end after the window": {
			{snap: "100:101:", moved: true},
			{snap: "100:103:", at: 200 * time.Millisecond, ended: true}, // 101, 102 ended: either may be the enqueue
			{snap: "100:104:103", at: 300 * time.Millisecond},           // the window closed: 103 is not watched
			{snap: "100:105:", at: 400 * time.Millisecond},
		},
	} {
		t.Run(name, func(t *testing.T) {
			var w commitWatch
			for i, p := range probes {
				if got := w.observe(parseSnapshot(p.snap), p.moved, start.Add(p.at), window); got != p.ended {
					t.Fatalf("probe %d (%s at %v): ended = %v, want %v", i, p.snap, p.at, got, p.ended)
				}
			}
		})
	}
}

func TestParseSnapshot(t *testing.T) {
	s := parseSnapshot("761826:761830:761826,761828")
	if s.xmin != 761826 || s.xmax != 761830 || len(s.xip) != 2 || s.xip[1] != 761828 {
		t.Fatalf("parseSnapshot = %+v", s)
	}
	if !s.ended(761827) || s.ended(761828) || s.ended(761830) {
		t.Fatalf("ended of %+v is wrong", s)
	}
	if z := parseSnapshot("garbage"); z.xmax != 0 || z.ended(1) {
		t.Fatalf("a malformed snapshot reads as %+v", z)
	}
}
