package consumer

import (
	"slices"
	"sync"
	"time"
)

// settle records the message at offset as settled, and marks the offset
// after the last message settled with every one before it.
func (p *partition) settle(offset int64) {
	p.pending.finish(offset, p.mark)
}

// mark marks next as the partition's next offset and reports the lag,
// from the higher of the last fetch's high-water mark and the last one
// the progress timer read (see watchProgress).
func (p *partition) mark(next int64) {
	p.sess.MarkOffset(p.topic, p.partition, next, "")
	p.marked.Store(next)
	p.c.metrics.Lag(p.topic, p.partition, max(max(p.claim.HighWaterMarkOffset(), p.highWater.Load())-next, 0))
}

// notInFlight is the in-flight time of a message taken but not yet due (a
// retry record waiting for its tier's delay): it is not counted in the
// oldest in-flight age until it is due.
const notInFlight time.Duration = -1

// offsets tracks the messages of a partition from when they are taken to
// when they settle.
type offsets struct {
	mu      sync.Mutex
	started []int64         // in offset order, unfinished or waiting for an earlier one
	since   []time.Duration // since[i]: when started[i] went in flight, on the partition's clock, or notInFlight
	done    []bool          // done[i] for started[i]
}

// start records the message at offset as taken, in flight since at (or
// notInFlight until inFlight is called).
func (o *offsets) start(offset int64, at time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.started = append(o.started, offset)
	o.since = append(o.since, at)
	o.done = append(o.done, false)
}

// inFlight records that the message at offset, started notInFlight, went
// in flight at at.
func (o *offsets) inFlight(offset int64, at time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if i, found := slices.BinarySearch(o.started, offset); found {
		o.since[i] = at
	}
}

// oldest returns the offset of the first message not yet settled and
// when it went in flight (notInFlight: not yet due), or ok false when
// every message taken is settled. The messages go in flight in offset
// order, and only the last one taken can wait to be due, so the first is
// the oldest in flight.
func (o *offsets) oldest() (offset int64, since time.Duration, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.started) == 0 {
		return 0, 0, false
	}
	return o.started[0], o.since[0], true
}

// finish records offset as finished and, when every message before it has
// finished too, calls mark with the offset after the last finished one. It
// calls mark under its lock, so the offsets marked only ever go up.
func (o *offsets) finish(offset int64, mark func(next int64)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	i, found := slices.BinarySearch(o.started, offset)
	if !found {
		return
	}
	o.done[i] = true
	n := 0
	for n < len(o.done) && o.done[n] {
		n++
	}
	if n == 0 {
		return
	}
	next := o.started[n-1] + 1
	o.started = slices.Delete(o.started, 0, n)
	o.since = slices.Delete(o.since, 0, n)
	o.done = slices.Delete(o.done, 0, n)
	mark(next)
}
