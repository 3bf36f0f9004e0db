package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/courierkit/courier/dedupe"
)

// releaseTimeout bounds the release of the claims of abandoned messages
// when a partition is given up.
const releaseTimeout = 2 * time.Second

// handled settles a message the handler handled. It leaves its key's parked
// messages first, and with Dedupe its id is marked processed before its
// offset is (the marks of a partition go to the store in batches, beside
// the handling).
func (d *delivery) handled() {
	unparked := d.leaveParked()
	if d.holdsClaim() {
		d.p.marks.add(mark{d, unparked}) // marked processed even when it stays parked
		return
	}
	if unparked {
		d.p.settle(d.m.Offset)
	}
}

// moved settles a message once written to r: its claim is released, so
// that its next delivery (from the retry tier, or a replay of the dead
// letter) is handled; and, unless it went to a retry tier, it leaves its
// key's parked messages.
func (d *delivery) moved(r route) {
	p := d.p
	if d.holdsClaim() {
		store := p.c.cfg.Dedupe.Store
		if !p.persistDedupe("release the message id", dedupe.OpRelease, 1, func(ctx context.Context) error {
			return store.Release(ctx, d.owner, []string{d.id})
		}) {
			d.abandon() // released when the partition is given up
			return
		}
		d.claimed = false
	}
	if r.tier == nil && !d.leaveParked() {
		return
	}
	p.settle(d.m.Offset)
}

// leaveParked removes a parked message from its key's parked messages, and
// reports whether it did (false: the partition's work ended first).
func (d *delivery) leaveParked() bool {
	if !d.isParked() {
		return true
	}
	p := d.p
	ok := p.persistIn(p.workCtx, "unpark the key", false, func(ctx context.Context) error {
		return p.c.cfg.KeyOrder.Unpark(ctx, d.parkedAs())
	})
	if ok {
		d.parked = false
		p.unparkedHere(d.m.Key)
	}
	return ok
}

// abandon records that the message will not be settled by this partition:
// its claim is released when the partition is given up, so that the next
// owner need not wait for the lease to run out.
func (d *delivery) abandon() {
	if !d.holdsClaim() {
		return
	}
	d.claimed = false
	p := d.p
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.abandoned == nil {
		p.abandoned = map[string][]string{}
	}
	p.abandoned[d.owner] = append(p.abandoned[d.owner], d.id)
}

// finishDedupe, once the partition is given up, marks processed the
// handled messages whose marks could not be stored in time (and settles
// them), and releases the claims of the abandoned messages, each in one
// round trip within releaseTimeout. What fails runs out with its lease.
func (p *partition) finishDedupe() {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.sessCtx), releaseTimeout)
	defer cancel()
	store := p.c.cfg.Dedupe.Store
	if late := p.marks.unsent; len(late) > 0 {
		ids := markIDs(late)
		if err := p.dedupeCall(ctx, dedupe.OpDone, len(ids), func(ctx context.Context) error { return store.Done(ctx, ids) }); err != nil {
			p.log.Warn("cannot mark the handled messages processed; they will be handled again when redelivered", "error", err, "messages", len(ids))
		} else {
			p.marks.settle(late)
		}
	}
	p.mu.Lock()
	abandoned := p.abandoned
	p.abandoned = nil
	p.mu.Unlock()
	for owner, ids := range abandoned {
		if err := p.dedupeCall(ctx, dedupe.OpRelease, len(ids), func(ctx context.Context) error {
			return store.Release(ctx, owner, ids)
		}); err != nil {
			p.log.Warn("cannot release the claims of the messages left unhandled; the next owner of the partition waits for their lease (Dedupe.Lease)",
				"error", err, "messages", len(ids))
		}
	}
}

// persistDedupe calls the store until it succeeds or the partition's work
// ends, and reports whether the message may be settled: when it succeeded,
// or when the store failed and Dedupe.FailOpen is set.
func (p *partition) persistDedupe(what string, op dedupe.Op, n int, call func(context.Context) error) bool {
	if p.c.cfg.Dedupe.FailOpen {
		err := p.dedupeCall(p.workCtx, op, n, call)
		if err != nil {
			p.log.Warn("cannot "+what+"; going on without it (Dedupe.FailOpen)", "error", err, "messages", n)
		}
		return true
	}
	return p.persistIn(p.workCtx, what, false, func(ctx context.Context) error { return p.dedupeCall(ctx, op, n, call) })
}

// mark is a handled message waiting for its dedupe mark; settle says
// whether to settle it once marked (not while it stays parked).
type mark struct {
	d      *delivery
	settle bool
}

// doneMarks are the handled messages of a partition whose ids are being
// marked processed; each is settled once its mark is stored. One goroutine
// (flush) sends them, as many at a time as have gathered.
type doneMarks struct {
	p     *partition
	mu    sync.Mutex
	queue []mark
	wake  chan struct{} // a send means the queue has something
	stop  chan struct{} // closed when no more marks come
	done  chan struct{} // closed when flush returns
	// unsent are the marks the store did not take before the partition's
	// work ended; read after done is closed.
	unsent []mark
}

func newDoneMarks(p *partition) *doneMarks {
	m := &doneMarks{p: p, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go m.flush()
	return m
}

// add queues a handled message for its mark.
func (m *doneMarks) add(mk mark) {
	m.mu.Lock()
	m.queue = append(m.queue, mk)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// close sends the marks still queued and waits for them.
func (m *doneMarks) close() {
	close(m.stop)
	<-m.done
}

// flush sends the queued marks, as many at a time as have gathered, until
// close.
func (m *doneMarks) flush() {
	defer close(m.done)
	for {
		select {
		case <-m.wake:
			m.send()
		case <-m.stop:
			m.send()
			return
		}
	}
}

// send marks the queued messages processed in one round trip and settles
// them; when the partition's work ends first, they are kept in unsent.
func (m *doneMarks) send() {
	m.mu.Lock()
	batch := m.queue
	m.queue = nil
	m.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	p := m.p
	ids := markIDs(batch)
	store := p.c.cfg.Dedupe.Store
	if !p.persistDedupe("mark the message ids processed", dedupe.OpDone, len(ids), func(ctx context.Context) error {
		return store.Done(ctx, ids)
	}) {
		m.unsent = append(m.unsent, batch...)
		return
	}
	m.settle(batch)
}

// markIDs returns the ids of the messages of batch.
func markIDs(batch []mark) []string {
	ids := make([]string, len(batch))
	for i, mk := range batch {
		ids[i] = mk.d.id
	}
	return ids
}

// settle settles the marked messages that may be.
func (m *doneMarks) settle(batch []mark) {
	for _, mk := range batch {
		if mk.settle {
			m.p.settle(mk.d.m.Offset)
		}
	}
}
