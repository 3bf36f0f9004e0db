package producer

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"
)

// busyProbeInterval is how often the relay looks for new events while they
// come: often enough that an event waits about a millisecond for it.
const busyProbeInterval = time.Millisecond

// busyWindow is how long the relay keeps probing every busyProbeInterval
// after the last probe that found new events, before it backs off: events
// that come up to a few tens a second apart wait for a probe no longer
// than while they come faster.
const busyWindow = 20 * time.Millisecond

// maxTracked bounds the transactions the prober watches for their end.
const maxTracked = 4096

// watch wakes the relay's workers when there may be work, without a trigger
// in the transactions that enqueue (a NOTIFY would serialize their commits
// on PostgreSQL's notification queue lock). It probes the outbox (see
// probeSQL) and wakes the workers when
//   - the queue's sequence moved: an enqueue happened, whose transaction
//     may not have committed yet (see commitWatch);
//   - a transaction that may have been that enqueue's ended;
//   - a waiting event fell due since the last probe.
//
// Right after a move it probes every busyProbeInterval; each probe that
// finds nothing new doubles the gap, up to ProbeInterval, so an idle relay
// costs PostgreSQL one small query every ProbeInterval.
func (r *Relay) watch(ctx context.Context) {
	var (
		last     probeResult
		since    time.Time // the database time of the last probe
		commits  commitWatch
		gap      = busyProbeInterval
		lastMove time.Time // when the last probe that found work was
		failures int
	)
	for ctx.Err() == nil {
		p, err := r.store.probeNow(ctx, r.pool, r.queryNow(), since)
		switch {
		case err != nil && ctx.Err() == nil:
			if failures++; failures == 1 || failures%100 == 0 {
				r.log.Warn("looking for new events failed; polling every PollInterval until it works", "error", err, "failures", failures)
			}
			gap = r.cfg.ProbeInterval
		case err == nil:
			failures = 0
			moved := since.IsZero() || p.seq != last.seq || p.called != last.called
			snap := parseSnapshot(p.snapshot)
			ended := commits.observe(snap, moved, time.Now(), r.cfg.ProbeInterval)
			if moved || p.due || ended {
				r.Wake()
			}
			switch {
			case moved || p.due:
				gap, lastMove = busyProbeInterval, time.Now()
			case time.Since(lastMove) >= busyWindow:
				gap = min(2*gap, r.cfg.ProbeInterval)
			}
			last, since = p, p.at
		}
		sleep(ctx, gap, nil)
	}
}

// snapshot is a pg_current_snapshot(): every transaction id below xmin has
// ended, none from xmax on had ended when it was taken, and of those in
// between the ones in xip were in progress.
type snapshot struct {
	xmin, xmax uint64
	xip        []uint64
}

// parseSnapshot reads a snapshot's text form, xmin:xmax:xip1,xip2,…; a
// malformed one reads as the zero snapshot.
func parseSnapshot(text string) snapshot {
	parts := strings.SplitN(text, ":", 3)
	if len(parts) < 3 {
		return snapshot{}
	}
	var s snapshot
	s.xmin, _ = strconv.ParseUint(parts[0], 10, 64)
	s.xmax, _ = strconv.ParseUint(parts[1], 10, 64)
	if parts[2] != "" {
		for f := range strings.SplitSeq(parts[2], ",") {
			if xid, err := strconv.ParseUint(f, 10, 64); err == nil {
				s.xip = append(s.xip, xid)
			}
		}
	}
	return s
}

// ended reports whether transaction xid had ended when s was taken.
func (s snapshot) ended(xid uint64) bool {
	return xid < s.xmax && !slices.Contains(s.xip, xid)
}

// commitWatch follows the transactions that may hold an enqueue the
// sequence showed but a claim could not see yet: the sequence moves when a
// row is inserted, and the row becomes visible when its transaction
// commits. Those transactions are the ones in progress at the probe that saw
// the move: the snapshot lists those below its xmax; one at or above it (it
// took its id after the last commit the snapshot knew of) shows up in a
// later snapshot once a transaction at or above it ends. So for a window
// after a move, every probe adds the transactions of the new range
// [floor, xmax) still in progress, and reports an end when one of that range
// already ended; the window stays open at least until a transaction beyond
// the move's xmax ended, so a quiet database's only transaction is never
// missed. Each tracked transaction reports its end once.
type commitWatch struct {
	tracked []uint64
	floor   uint64    // the range of transaction ids seen so far ends here
	open    bool      // a window is open
	until   time.Time // the window stays open until then, at least
	moveMax uint64    // the xmax of the snapshot that saw the move
}

// observe takes the snapshot of a probe, whether that probe saw the
// sequence move, and the time, and reports whether a transaction that may
// hold an enqueue ended.
func (w *commitWatch) observe(s snapshot, moved bool, now time.Time, window time.Duration) bool {
	ended := false
	w.tracked = slices.DeleteFunc(w.tracked, func(xid uint64) bool {
		if s.ended(xid) {
			ended = true
			return true
		}
		return false
	})
	if moved {
		if !w.open {
			w.floor = s.xmax
		}
		w.open, w.until, w.moveMax = true, now.Add(window), s.xmax
		w.track(s.xip...)
	}
	if w.open && s.xmax > w.floor {
		inRange := 0
		for _, xid := range s.xip {
			if xid >= w.floor {
				inRange++
				w.track(xid)
			}
		}
		if uint64(inRange) < s.xmax-w.floor {
			ended = true
		}
		w.floor = s.xmax
	}
	if w.open && !now.Before(w.until) && s.xmax > w.moveMax {
		w.open = false
	}
	return ended
}

func (w *commitWatch) track(xids ...uint64) {
	for _, xid := range xids {
		if !slices.Contains(w.tracked, xid) {
			w.tracked = append(w.tracked, xid)
		}
	}
	w.tracked = w.tracked[max(len(w.tracked)-maxTracked, 0):]
}
