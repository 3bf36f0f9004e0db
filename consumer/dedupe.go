package consumer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/dlq"
)

// dedupeFeature is a partition's dedupe (Config.Dedupe): it claims the ids
// of the messages taken, skips those processed already, waits for those
// claimed elsewhere, marks the handled ones processed and releases the
// claims of the others. A message's claim is in its tracking.
type dedupeFeature struct {
	p   *partition
	cfg *DedupeConfig

	// owner tells this partition's claims from any other's; each claim
	// call adds its number (claims) to it. Keyed workers claim too (a
	// message claimed elsewhere is claimed again), hence the atomic.
	owner  string
	claims atomic.Uint64
	// marks sends the marks of handled messages.
	marks *doneMarks

	mu         sync.Mutex
	unreleased map[string][]string // claims to release when the partition is given up: ids by owner
}

func newDedupeFeature(p *partition) *dedupeFeature {
	f := &dedupeFeature{
		p:     p,
		cfg:   &p.c.cfg.Dedupe,
		owner: fmt.Sprintf("%s/%d/%s", p.topic, p.partition, uuid.NewString()),
	}
	f.marks = newDoneMarks(f)
	return f
}

// dedupeClaim is what Dedupe said of a message, and its claim.
type dedupeClaim struct {
	// claim is what Dedupe said of the message when it was taken.
	claim   dedupe.Status
	claimed bool   // the consumer holds its claim: Done or Release owed
	refused error  // the store refuses the id: dead-lettered unhandled
	owner   string // the claim's owner
	// claimedAt is when the claim was taken or extended (on the
	// partition's clock).
	claimedAt time.Duration
}

// admitBatch claims the ids of the messages that need handling.
func (f *dedupeFeature) admitBatch(batch []taken) bool {
	var (
		ids []string
		of  []*delivery
	)
	for _, t := range batch {
		if d := t.d; !d.foreign() && d.corrupt == nil && d.place <= 0 {
			ids = append(ids, d.id)
			of = append(of, d)
		}
	}
	if len(ids) == 0 {
		return true
	}
	c, ok := f.claim(ids)
	if !ok {
		return false
	}
	if c.refused != nil && len(of) > 1 {
		// One id of the batch or more is refused: ask for each alone.
		for i, d := range of {
			if c, ok = f.claim([]string{d.id}); !ok {
				// The session ended: the claims taken so far are
				// released when the partition is given up.
				for _, held := range of[:i] {
					f.abandoned(held)
				}
				return false
			}
			d.setClaim(c, 0)
		}
		return true
	}
	for i, d := range of {
		d.setClaim(c, i)
	}
	return true
}

// admit waits while the message is claimed elsewhere, dead-letters one
// whose id the store refuses, and skips one processed already.
func (f *dedupeFeature) admit(ctx context.Context, d *delivery) (fate, bool) {
	p := f.p
	for d.claim == dedupe.Busy {
		d.log().Info("message claimed elsewhere; waiting", "dedupe_id", d.id, "retry_in", f.cfg.BusyWait)
		p.pause()
		ok := sleep(p.claimCtx, f.cfg.BusyWait)
		p.resume()
		if !ok {
			return fateAbandoned, true
		}
		c, ok := f.claim([]string{d.id})
		if !ok {
			return fateAbandoned, true
		}
		d.setClaim(c, 0)
	}
	if d.refused != nil {
		d.log().Error("dedupe store refuses the message's id; dead-lettering it unhandled", "error", d.refused)
		return d.move(ctx, d.deadLetterRoute(Permanent(d.refused))), true
	}
	if d.claim == dedupe.Processed {
		p.c.dedupeHooks.Hits(1)
		p.c.metrics.Message(d.m, OutcomeDeduplicated)
		d.log().Info("message processed already; skipped", "dedupe_id", d.id)
		return fateProcessed, true
	}
	return 0, false
}

// attempt extends the message's claim when it runs low (see extendClaim).
func (f *dedupeFeature) attempt(d *delivery) { f.extendClaim(d) }

// moving does nothing: the claim is kept through the write.
func (f *dedupeFeature) moving(*delivery, route) bool { return true }

// close sends the marks still queued, then marks processed the handled
// messages whose marks could not be stored in time (and settles them), and
// releases the claims of the abandoned messages, each in one round trip
// within releaseTimeout. What fails runs out with its lease.
func (f *dedupeFeature) close() {
	f.marks.close()
	p := f.p
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.claimCtx), releaseTimeout)
	defer cancel()
	store := f.cfg.Store
	if late := f.marks.unsent; len(late) > 0 {
		if err := f.call(ctx, dedupe.OpDone, len(late), func(ctx context.Context) error { return markDone(ctx, store, late) }); err != nil {
			p.log.Warn("cannot mark the handled messages processed; they will be handled again when redelivered", "error", err, "messages", len(late))
		} else {
			f.marks.settle(late)
		}
	}
	f.mu.Lock()
	abandoned := f.unreleased
	f.unreleased = nil
	f.mu.Unlock()
	for owner, ids := range abandoned {
		if err := f.call(ctx, dedupe.OpRelease, len(ids), func(ctx context.Context) error {
			return store.Release(ctx, owner, ids)
		}); err != nil {
			p.log.Warn("cannot release the claims of the messages left unhandled; the next owner of the partition waits for their lease (Dedupe.Lease)",
				"error", err, "messages", len(ids))
		}
	}
}

// done queues a handled message, whose claim the consumer holds, for its
// mark, and takes its settling over: it is settled once marked, if settle.
func (f *dedupeFeature) done(d *delivery, settle bool) (bool, bool) {
	if !d.holdsClaim() {
		return settle, false
	}
	f.marks.add(mark{d, settle})
	return false, true
}

// moved releases the claim of a message moved on, and reports whether it
// may be settled (see persist); when it may not, its claim is released
// when the partition is given up.
func (f *dedupeFeature) moved(d *delivery, _ route) bool {
	if !d.holdsClaim() {
		return true
	}
	store := f.cfg.Store
	if !f.persist("release the message id", dedupe.OpRelease, 1, func(ctx context.Context) error {
		return store.Release(ctx, d.owner, []string{d.id})
	}) {
		return false
	}
	d.claimed = false
	return true
}

// abandoned records the claim of a message this partition will not
// settle, to release when the partition is given up, so that the next
// owner need not wait for the lease to run out.
func (f *dedupeFeature) abandoned(d *delivery) {
	if !d.holdsClaim() {
		return
	}
	d.claimed = false
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.unreleased == nil {
		f.unreleased = map[string][]string{}
	}
	f.unreleased[d.owner] = append(f.unreleased[d.owner], d.id)
}

// claim claims ids, retrying while the store fails, and reports whether
// it got an answer (false: the session ended first). Each call claims for
// an owner of its own, so that a call that failed after some of its claims
// reached the store can release them before the next try, without touching
// the claims of other batches. When the store fails and Dedupe.FailOpen is
// set, every id counts as claimed.
func (f *dedupeFeature) claim(ids []string) (c claimed, ok bool) {
	p, cfg := f.p, f.cfg
	ok = p.persistIn(p.claimCtx, "claim the message ids", true, func(ctx context.Context) error {
		if c.owner != "" { // the last try failed: drop what it may have claimed
			_ = cfg.Store.Release(ctx, c.owner, ids)
		}
		c.owner = f.owner + "/" + strconv.FormatUint(f.claims.Add(1), 10)
		err := f.call(ctx, dedupe.OpClaim, len(ids), func(ctx context.Context) (err error) {
			c.statuses, err = cfg.Store.Claim(ctx, c.owner, ids, cfg.Lease)
			if err == nil && len(c.statuses) != len(ids) {
				err = fmt.Errorf("dedupe: the store answered %d statuses for %d ids", len(c.statuses), len(ids))
			}
			return err
		})
		if errors.Is(err, dedupe.ErrInvalidID) {
			// The store is up and refuses an id: no reason to wait. It
			// should have dropped what this call claimed; in case it
			// could not, drop it, or the ids asked for again alone would
			// wait for this call's lease.
			_ = cfg.Store.Release(ctx, c.owner, ids)
			c.refused, c.statuses = err, nil
			return nil
		}
		if err != nil && cfg.FailOpen {
			p.c.dedupeHooks.FailedOpen(len(ids))
			p.log.Warn("dedupe store failed; handling the messages without deduplication (Dedupe.FailOpen)", "error", err, "messages", len(ids))
			c.statuses = make([]dedupe.Status, len(ids)) // Claimed
			c.failedOpen = true
			return nil
		}
		return err
	})
	c.at = p.now()
	return c, ok
}

// call times one round trip to the store and counts its failure.
func (f *dedupeFeature) call(ctx context.Context, op dedupe.Op, n int, call func(context.Context) error) error {
	metrics := f.p.c.dedupeHooks
	start := time.Now()
	err := call(ctx)
	metrics.Latency(op, n, time.Since(start))
	if err != nil {
		metrics.Error(op)
	}
	return err
}

// persist calls the store until it succeeds or the partition's work ends,
// and reports whether the message may be settled: when it succeeded, or
// when the store failed and Dedupe.FailOpen is set.
func (f *dedupeFeature) persist(what string, op dedupe.Op, n int, call func(context.Context) error) bool {
	p := f.p
	if f.cfg.FailOpen {
		err := f.call(p.workCtx, op, n, call)
		if err != nil {
			p.log.Warn("cannot "+what+"; going on without it (Dedupe.FailOpen)", "error", err, "messages", n)
		}
		return true
	}
	return p.persistIn(p.workCtx, what, false, func(ctx context.Context) error { return f.call(ctx, op, n, call) })
}

// claimed is the answer of one claim of a batch of ids.
type claimed struct {
	statuses   []dedupe.Status
	owner      string        // the claims' owner
	failedOpen bool          // the store failed and Dedupe.FailOpen is set
	at         time.Duration // on the partition's clock
	// refused is the store's error for an id it cannot take (matching
	// dedupe.ErrInvalidID): the message's own failure, not an outage.
	// statuses is nil then.
	refused error
}

// setClaim records what claim c said of the message, the ith of its batch.
func (d *delivery) setClaim(c claimed, i int) {
	if c.refused != nil {
		d.refused = fmt.Errorf("the dedupe store refuses the message's id %q: %w", dlq.TruncateHeader(d.id), c.refused)
		d.claim, d.claimed = dedupe.Claimed, false
		return
	}
	d.claim = c.statuses[i]
	d.claimed = !c.failedOpen && d.claim == dedupe.Claimed
	d.owner, d.claimedAt = c.owner, c.at
}

// identity is the message's id for Dedupe and KeyOrder: Dedupe.Key's, or
// the ce_id, or else its place on its main topic.
func (c *Consumer) identity(d *delivery) string {
	if c.cfg.Dedupe.Key != nil {
		var id string
		c.guard("Dedupe.Key (the default key is used)", func() { id = c.cfg.Dedupe.Key(d.m) })
		if id != "" {
			return id
		}
	}
	if d.m.ID != "" {
		return d.m.ID
	}
	o := d.originPlace()
	return o.Topic + "/" + strconv.FormatInt(int64(o.Partition), 10) + "/" + strconv.FormatInt(o.Offset, 10)
}

// holdsClaim reports whether the consumer holds the message's dedupe
// claim.
func (d *delivery) holdsClaim() bool { return d.tracking != nil && d.claimed }

// extendClaim extends the message's dedupe claim once half its lease has
// passed, so that it lasts through the attempt (Dedupe.Lease exceeds
// AttemptTimeout plus Backoff.Max). A failure is logged: the claim may run
// out, and a duplicate delivery elsewhere could then be handled at the
// same time.
func (f *dedupeFeature) extendClaim(d *delivery) {
	if !d.holdsClaim() {
		return
	}
	p, cfg := f.p, f.cfg
	if p.since(d.claimedAt) < cfg.Lease/2 {
		return
	}
	err := f.call(p.workCtx, dedupe.OpExtend, 1, func(ctx context.Context) error {
		return cfg.Store.Extend(ctx, d.owner, []string{d.id}, cfg.Lease)
	})
	switch {
	case errors.Is(err, dedupe.ErrLeaseLost):
		// Asking again would not bring it back: go on, and mark the
		// message once handled (harmless if another took it over).
		d.log().Warn("the message's dedupe claim ran out before it was extended; another consumer may be handling it too (keep Dedupe.Lease above the waits between attempts)",
			"error", err, "dedupe_id", d.id)
	case err != nil:
		d.log().Warn("cannot extend the message's dedupe claim; it may run out during the attempt", "error", err, "dedupe_id", d.id)
		return
	}
	d.claimedAt = p.now()
}

// releaseTimeout bounds the release of the claims of abandoned messages
// when a partition is given up.
const releaseTimeout = 2 * time.Second

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
	f     *dedupeFeature
	mu    sync.Mutex
	queue []mark
	wake  chan struct{} // a send means the queue has something
	stop  chan struct{} // closed when no more marks come
	done  chan struct{} // closed when flush returns
	// unsent are the marks the store did not take before the partition's
	// work ended; read after done is closed.
	unsent []mark
}

func newDoneMarks(f *dedupeFeature) *doneMarks {
	m := &doneMarks{f: f, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
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

// send marks the queued messages processed (one round trip for each
// claim call's, see markDone) and settles them; when the partition's work
// ends first, they are kept in unsent.
func (m *doneMarks) send() {
	m.mu.Lock()
	batch := m.queue
	m.queue = nil
	m.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	store := m.f.cfg.Store
	if !m.f.persist("mark the message ids processed", dedupe.OpDone, len(batch), func(ctx context.Context) error {
		return markDone(ctx, store, batch)
	}) {
		m.unsent = append(m.unsent, batch...)
		return
	}
	m.settle(batch)
}

// markDone marks the messages of batch processed: one Done call for the
// ids of each owner (each claim call's; a batch of marks usually holds one
// or two), in the order the owners first come. A failed call does not
// stop the others: it returns their errors joined, and marking again is
// harmless.
func markDone(ctx context.Context, store dedupe.Store, batch []mark) error {
	var owners []string
	ids := map[string][]string{}
	for _, mk := range batch {
		o := mk.d.owner
		if _, ok := ids[o]; !ok {
			owners = append(owners, o)
		}
		ids[o] = append(ids[o], mk.d.id)
	}
	var errs []error
	for _, o := range owners {
		if err := store.Done(ctx, o, ids[o]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// settle settles the marked messages that may be.
func (m *doneMarks) settle(batch []mark) {
	for _, mk := range batch {
		if mk.settle {
			m.f.p.settle(mk.d.m.Offset)
		}
	}
}
