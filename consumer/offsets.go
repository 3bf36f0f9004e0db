package consumer

import (
	"slices"
	"sync"
)

// settle records the message at offset as settled, and marks the offset
// after the last message settled with every one before it.
func (p *partition) settle(offset int64) {
	p.pending.finish(offset, p.mark)
}

// mark marks next as the partition's next offset and reports the lag.
func (p *partition) mark(next int64) {
	p.sess.MarkOffset(p.topic, p.partition, next, "")
	p.c.metrics.Lag(p.topic, p.partition, max(p.claim.HighWaterMarkOffset()-next, 0))
}

// offsets tracks the messages of a partition from when they are taken to
// when they settle.
type offsets struct {
	mu      sync.Mutex
	started []int64 // in offset order, unfinished or waiting for an earlier one
	done    []bool  // done[i] for started[i]
}

func (o *offsets) start(offset int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.started = append(o.started, offset)
	o.done = append(o.done, false)
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
	o.done = slices.Delete(o.done, 0, n)
	mark(next)
}
