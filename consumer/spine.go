// The spine of a partition: take → process → settle.
//
// take (with admitBatch) takes a batch of messages, process runs each
// through handle (admit, attempts, then a move to a retry tier or the
// dead-letter topic when they fail), and done, moved and abandon settle
// it. Each feature owns its state, and the methods that change it, in its
// own file; the spine calls it at fixed points:
//
//   - key order (keyorder.go) and dedupe (dedupe.go), which a partition
//     has only when configured (see newPartition), are features: the spine
//     calls them only through the feature interface below, when a batch is
//     taken (admitBatch), before a message's attempts (admit), before each
//     attempt (attempt), before a write starts (moving), when a message is
//     settled (done, moved) or abandoned (abandoned), and when the
//     partition is given up (close). Their per-partition state lives in
//     their own types (keyOrderFeature, dedupeFeature); a message's share
//     of it lives in its tracking (keyPlace, dedupeClaim).
//   - retry tiers (retrytier.go: retryTiers, and retryState in a
//     message's tracking) read the retry headers of a record when it is
//     taken, hold it until it is due, and pick the next tier.
//   - attempts (attempts.go: failures, in each delivery) run the handler,
//     with its retries and breaker waits, and count the failed attempts.
//   - dead letters (deadletter.go: deadLetters, the consumer's writer and
//     its topics) and the writes that move a message on (moves.go: moves,
//     the partition's writes in flight) run beside the spine, and settle
//     the message once written.
//   - offsets (offsets.go: offsets, the partition's messages not yet
//     settled) mark an offset once every message before it is settled.
//
// Attempts, retry tiers, dead letters and offsets are always there, and the
// spine calls them directly.
package consumer

import (
	"context"
	"hash/crc32"
	"sync"
)

// taken is a message taken from the partition, not yet handed to a worker.
type taken struct {
	d      *delivery
	traced bool
}

// take blocks for the partition's next message and returns it with the
// messages that are already waiting behind it, up to TakeBatch (one
// message when neither Dedupe nor KeyOrder is on), each recorded as
// pending. A record of a retry topic is taken only once it is due: the
// partition pauses until then. It returns nil when the session ends.
func (p *partition) take() []taken {
	batch := p.batch[:0]
	first := p.carry
	p.carry = nil
	if first == nil {
		select {
		case <-p.claimCtx.Done():
			return nil
		case msg, ok := <-p.messages:
			if !ok {
				return nil
			}
			d, traced := p.newDelivery(msg)
			p.pending.start(msg.Offset, p.takenAt(d))
			first = &taken{d, traced}
		}
	}
	if !p.waitMoves() || !p.waitDue(first.d) {
		return nil
	}
	batch = append(batch, *first)
	for len(batch) < p.maxBatch {
		select {
		case msg, ok := <-p.messages:
			if !ok {
				return p.admitBatch(batch)
			}
			d, traced := p.newDelivery(msg)
			p.pending.start(msg.Offset, p.takenAt(d))
			if !d.due() {
				p.carry = &taken{d, traced}
				return p.admitBatch(batch)
			}
			batch = append(batch, taken{d, traced})
		default:
			return p.admitBatch(batch)
		}
	}
	return p.admitBatch(batch)
}

// admitBatch gives each message of batch its identity and hands the batch
// to the features (KeyOrder looks up where the keyed messages stand, Dedupe
// claims their ids), one round trip each for the whole batch. It returns
// nil when the session ends first.
func (p *partition) admitBatch(batch []taken) []taken {
	p.batch = batch
	if len(p.features) == 0 {
		return batch
	}
	for _, t := range batch {
		t.d.id = p.c.identity(t.d)
	}
	for _, f := range p.features {
		if !f.admitBatch(batch) {
			return nil
		}
	}
	return batch
}

// feature is a consumer feature that takes part in a message's handling
// at fixed points of the spine: key order, dedupe. The spine calls the
// partition's features (see newPartition: key order, then dedupe) in order
// at every point but moved, which runs them in reverse; the order is what
// makes each point right:
//
//   - admitBatch and admit run key order first: dedupe claims only the
//     messages that key order does not send behind their key's parked
//     messages.
//   - done runs key order first: a handled message leaves its key's
//     parked messages before dedupe queues its mark, and the mark settles
//     it only if it did.
//   - moved runs dedupe first: a message whose claim cannot be released
//     is abandoned, and so keeps its key parked, as any message not
//     settled must (its redelivery would be overtaken otherwise).
type feature interface {
	// admitBatch looks up (in one round trip for the batch) what the
	// feature needs to know of each message of a batch just taken, and
	// reports whether it could (false: the session ended first).
	admitBatch(batch []taken) bool
	// admit runs just before d's attempts. done reports that d needs no
	// attempt, and f what became of it.
	admit(ctx context.Context, d *delivery) (f fate, done bool)
	// attempt runs before each attempt of d.
	attempt(d *delivery)
	// moving runs before the write of d to r starts, and reports whether
	// it may start (false: the session ended first).
	moving(d *delivery, r route) bool
	// done runs when d needs no more handling: handled, or processed
	// already. settle says whether the features before it let d be
	// settled; it returns whether d may be settled now, and whether the
	// feature took the settling over (then it settles d later, if settle).
	done(d *delivery, settle bool) (settleNow, takenOver bool)
	// moved runs once d is written to r, and reports whether d may be
	// settled (false: d is abandoned).
	moved(d *delivery, r route) bool
	// abandoned runs when d will not be settled by this partition.
	abandoned(d *delivery)
	// close runs when the partition is given up, once its writes in
	// flight have ended.
	close()
}

// serial handles the messages one at a time, in offset order. Writes to
// retry and dead-letter topics run beside it (see forward), so offsets are
// marked up to the lowest message not yet settled. With a feature on, the
// next batch is taken while this one is handled (see takeAhead).
func (p *partition) serial() {
	next := p.take
	if len(p.features) > 0 {
		var stop func()
		next, stop = p.takeAhead()
		defer stop()
	}
	for {
		batch := next()
		for i, t := range batch {
			if !p.process(t.d, t.traced) {
				for _, left := range batch[i+1:] {
					left.d.abandon()
				}
				return
			}
		}
		if batch == nil {
			return
		}
	}
}

// takeAhead takes batches in a goroutine of its own, one batch ahead of
// their handling, so that the features' round trip for the next batch
// (Dedupe's claim, KeyOrder's lookup) runs while the whole of this one is
// handled. (Beside keyed workers the partition's goroutine takes the next
// batch once the last messages of this one are queued to the workers.)
// next returns the next batch, nil once the
// session ended; the batch is the caller's until its next call. stop ends
// the goroutine, abandoning the batch it took and could not hand over,
// and waits for it; it must be called once the session ended (take
// returns only then when no message comes).
func (p *partition) takeAhead() (next func() []taken, stop func()) {
	batches := make(chan []taken) // unbuffered: a batch handed over is the caller's alone
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		defer close(batches)
		// take fills p.batch: two buffers take turns, the one handed over
		// last being the caller's until it asks for the next.
		spare := make([]taken, 0, p.maxBatch)
		for {
			batch := p.take()
			if batch == nil {
				return
			}
			select {
			case batches <- batch:
				p.batch, spare = spare, batch
			case <-quit:
				for _, t := range batch {
					t.d.abandon()
				}
				return
			}
		}
	}()
	next = func() []taken { return <-batches }
	stop = func() {
		close(quit)
		<-done
	}
	return next, stop
}

// workerQueue is how many messages wait for each keyed worker.
const workerQueue = 4

// keyed handles the messages with n workers, each owning a share of the
// keys, and marks offsets up to the lowest message not yet settled.
func (p *partition) keyed(n int) {
	var (
		wg     sync.WaitGroup
		queues = make([]chan taken, n)
	)
	for i := range queues {
		queue := make(chan taken, workerQueue)
		queues[i] = queue
		wg.Go(func() {
			for t := range queue {
				// After a message is abandoned (the session ended) the
				// rest of the queue is abandoned by process.
				p.process(t.d, t.traced)
			}
		})
	}
	defer func() {
		for _, q := range queues {
			close(q)
		}
		wg.Wait()
	}()
	for {
		batch := p.take()
		if batch == nil {
			return
		}
		for i, t := range batch {
			worker := int(t.d.m.Offset % int64(n)) // keyless: no order to keep
			if t.d.m.Key != nil {
				worker = int(crc32.ChecksumIEEE(t.d.m.Key) % uint32(n))
			}
			select {
			case <-p.claimCtx.Done():
				for _, left := range batch[i:] {
					left.d.abandon()
				}
				return
			case queues[worker] <- t:
			}
		}
	}
}

// process handles d until it is handled (then it settles it), handed to a
// write (which settles it once written), or abandoned, and reports whether
// it was not abandoned. Abandoned means the session ended first: the
// message stays unsettled, for the next owner of the partition.
func (p *partition) process(d *delivery, traced bool) bool {
	if p.claimCtx.Err() != nil {
		d.abandon()
		return false
	}
	m := d.m
	p.c.metrics.InFlight(m.Topic, 1)
	ctx := p.workCtx
	if traced {
		ctx = traceContext.Extract(ctx, headerCarrier(m.Headers))
	}
	fate := d.handle(ctx)
	if fate != fateMoving { // a move counts it out of flight once written
		p.c.metrics.InFlight(m.Topic, -1)
	}
	switch fate {
	case fateHandled:
		p.c.metrics.Message(m, OutcomeHandled)
		d.done()
		return true
	case fateProcessed:
		if !d.done() {
			d.abandon()
			return false
		}
		return true
	case fateSkipped, fateMoving:
		return true // a move settles it once written
	default:
		d.abandon()
		return false
	}
}

// fate is where a message's handling leaves it.
type fate int

const (
	fateAbandoned fate = iota // the session ended first
	fateHandled               // the handler returned nil
	fateMoving                // its write to a retry or dead-letter topic started
	fateProcessed             // processed already (Dedupe): settled as a handled message is, unhandled
	fateSkipped               // settled without handling: another group's
)

// handle settles what needs no handling, defers a message whose key waits
// in a retry tier, runs the attempts, waits out open breakers, and starts
// the write to a retry tier or the dead-letter topic when the attempts
// fail.
func (d *delivery) handle(ctx context.Context) fate {
	switch {
	case d.foreign():
		d.p.settle(d.m.Offset)
		return fateSkipped
	case d.malformed() != nil:
		d.log().Error("malformed retry record; dead-lettering it unhandled", "error", d.corrupt)
		return d.move(ctx, d.deadLetterRoute(Permanent(d.corrupt)))
	}
	for _, feat := range d.p.features {
		if f, done := feat.admit(ctx, d); done {
			return f
		}
	}
	for {
		ok, err := d.attempts(ctx)
		switch {
		case ok:
			return fateHandled
		case d.p.claimCtx.Err() != nil:
			return fateAbandoned
		}
		if wait, open := d.p.c.breakerWait(err); open {
			if !d.waitBreaker(wait, err) {
				return fateAbandoned
			}
			continue
		}
		return d.move(ctx, d.failedRoute(err))
	}
}

// move starts the write of the message to r.
func (d *delivery) move(ctx context.Context, r route) fate {
	if !d.forward(ctx, r) {
		return fateAbandoned
	}
	return fateMoving
}

// done settles a message that needs no more handling (handled, or
// processed already) once the features let it, and reports whether they
// did (false: the partition's work ended first). Dedupe takes the settling
// of a message whose claim it holds over: its id is marked processed
// before its offset is (the marks of a partition go to the store in
// batches, beside the handling), even when its key stays parked.
func (d *delivery) done() bool {
	settle := true
	for _, f := range d.p.features {
		var takenOver bool
		if settle, takenOver = f.done(d, settle); takenOver {
			return true
		}
	}
	if settle {
		d.p.settle(d.m.Offset)
	}
	return settle
}

// moved settles a message once written to r, once the features let it (in
// reverse order, see feature): its claim is released, so that its next
// delivery (from the retry tier, or a replay of the dead letter) is
// handled; and, unless it went to a retry tier, it leaves its key's parked
// messages.
func (d *delivery) moved(r route) {
	fs := d.p.features
	for i := len(fs) - 1; i >= 0; i-- {
		if !fs[i].moved(d, r) {
			d.abandon()
			return
		}
	}
	d.p.settle(d.m.Offset)
}

// abandon records that the message will not be settled by this partition:
// its claim is released when the partition is given up, so that the next
// owner need not wait for the lease to run out.
func (d *delivery) abandon() {
	for _, f := range d.p.features {
		f.abandoned(d)
	}
}
