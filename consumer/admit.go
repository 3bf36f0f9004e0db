package consumer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/retrytopics"
)

// taken is a message taken from the partition, not yet handed to a worker.
type taken struct {
	d      *delivery
	traced bool
}

// take blocks for the partition's next message and returns it with the
// messages that are already waiting behind it, up to Dedupe.Batch (one
// message when neither Dedupe nor KeyOrder is on), each recorded as
// pending. A record of a retry topic is taken only once it is due: the
// partition pauses until then. It returns nil when the session ends.
func (p *partition) take() []taken {
	batch := p.batch[:0]
	first := p.carry
	p.carry = nil
	if first == nil {
		select {
		case <-p.sessCtx.Done():
			return nil
		case msg, ok := <-p.claim.Messages():
			if !ok {
				return nil
			}
			d, traced := p.newDelivery(msg)
			p.pending.start(msg.Offset)
			first = &taken{d, traced}
		}
	}
	if !p.waitMoves() || !p.waitDue(first.d) {
		return nil
	}
	batch = append(batch, *first)
	for len(batch) < p.maxBatch {
		select {
		case msg, ok := <-p.claim.Messages():
			if !ok {
				return p.admitBatch(batch)
			}
			d, traced := p.newDelivery(msg)
			p.pending.start(msg.Offset)
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

// dueAt is when the message may be handled: its retry_not_before, but no
// later than its tier's delay after the record was written, so that a
// record whose header points far ahead (a writer with a bad clock) cannot
// hold up its partition. Zero for a message to handle now: one of a main
// topic, or another group's record, which is skipped unhandled.
func (d *delivery) dueAt() time.Time {
	r := d.retried()
	if r == nil || d.foreign() {
		return time.Time{}
	}
	if limit := d.m.Timestamp.Add(d.p.tierDelay); !d.m.Timestamp.IsZero() && r.NotBefore.After(limit) {
		return limit
	}
	return r.NotBefore
}

// due reports whether the message may be handled now.
func (d *delivery) due() bool {
	at := d.dueAt()
	return at.IsZero() || !at.After(time.Now())
}

// waitDue waits until the message is due, and reports whether it is
// (false: the session ended first). A wait longer than Sarama's
// Consumer.MaxProcessingTime pauses the partition, so that nothing more is
// fetched meanwhile (Sarama heartbeats on its own); a shorter one does not
// need to, and spares the fetcher a pause and a resume.
func (p *partition) waitDue(d *delivery) bool {
	at := d.dueAt()
	if at.IsZero() {
		return true
	}
	wait := time.Until(at)
	if wait <= 0 {
		return true
	}
	if wait > p.c.cfg.saramaConfig().Consumer.MaxProcessingTime {
		p.pause()
		defer p.resume()
	}
	return sleep(p.sessCtx, wait)
}

// admitBatch asks KeyOrder where the keyed messages of batch stand and
// claims their ids in Dedupe, one round trip each for the whole batch. It
// returns nil when the session ends first.
func (p *partition) admitBatch(batch []taken) []taken {
	p.batch = batch
	c := p.c
	if c.cfg.KeyOrder == nil && c.cfg.Dedupe.Store == nil {
		return batch
	}
	for _, t := range batch {
		t.d.id = c.identity(t.d)
	}
	if p.topology != nil && c.cfg.KeyOrder != nil && !p.follow(batch) {
		return nil
	}
	if c.cfg.Dedupe.Store != nil && !p.claimAll(batch) {
		return nil
	}
	return batch
}

// follow asks KeyOrder where the keyed messages stand.
func (p *partition) follow(batch []taken) bool {
	var (
		msgs []retrytopics.Parked
		of   []*delivery
	)
	for _, t := range batch {
		if t.d.keyed() && !t.d.foreign() && t.d.corrupt == nil {
			msgs = append(msgs, t.d.parkedAs())
			of = append(of, t.d)
		}
	}
	if len(msgs) == 0 {
		return true
	}
	var places []retrytopics.Place
	if !p.persistIn(p.sessCtx, "look up the parked messages of the keys", true, func(ctx context.Context) (err error) {
		places, err = p.c.cfg.KeyOrder.Follow(ctx, msgs)
		return err
	}) {
		return false
	}
	for i, d := range of {
		d.place = places[i].Position
		if d.place >= 0 {
			d.markParked()
		}
		if due := places[i].FirstDue; !due.IsZero() {
			d.firstDue = due.UnixMilli()
		}
	}
	return true
}

// claimAll claims the ids of the messages that need handling.
func (p *partition) claimAll(batch []taken) bool {
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
	c, ok := p.claimIDs(ids)
	if !ok {
		return false
	}
	if c.refused != nil && len(of) > 1 {
		// One id of the batch or more is refused: ask for each alone.
		for _, d := range of {
			if c, ok = p.claimIDs([]string{d.id}); !ok {
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

// claimIDs claims ids, retrying while the store fails, and reports whether
// it got an answer (false: the session ended first). Each call claims for
// an owner of its own, so that a call that failed after some of its claims
// reached the store can release them before the next try, without touching
// the claims of other batches. When the store fails and Dedupe.FailOpen is
// set, every id counts as claimed.
func (p *partition) claimIDs(ids []string) (c claimed, ok bool) {
	d := &p.c.cfg.Dedupe
	ok = p.persistIn(p.sessCtx, "claim the message ids", true, func(ctx context.Context) error {
		if c.owner != "" { // the last try failed: drop what it may have claimed
			_ = d.Store.Release(ctx, c.owner, ids)
		}
		c.owner = p.owner + "/" + strconv.FormatUint(p.claims.Add(1), 10)
		err := p.dedupeCall(ctx, dedupe.OpClaim, len(ids), func(ctx context.Context) (err error) {
			c.statuses, err = d.Store.Claim(ctx, c.owner, ids, d.Lease)
			if err == nil && len(c.statuses) != len(ids) {
				err = fmt.Errorf("dedupe: the store answered %d statuses for %d ids", len(c.statuses), len(ids))
			}
			return err
		})
		if errors.Is(err, dedupe.ErrInvalidID) {
			// The store is up and refuses an id: no reason to wait.
			c.refused, c.statuses = err, nil
			return nil
		}
		if err != nil && d.FailOpen {
			d.Metrics.FailedOpen(len(ids))
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

// dedupeCall times one round trip to the store and counts its failure.
func (p *partition) dedupeCall(ctx context.Context, op dedupe.Op, n int, call func(context.Context) error) error {
	metrics := p.c.cfg.Dedupe.Metrics
	start := time.Now()
	err := call(ctx)
	metrics.Latency(op, n, time.Since(start))
	if err != nil {
		metrics.Error(op)
	}
	return err
}

// persistIn calls call until it succeeds, pausing the partition meanwhile
// when pause is set, and reports whether it did (false: ctx ended first).
// Each failure is logged with what was being done.
func (p *partition) persistIn(ctx context.Context, what string, pause bool, call func(context.Context) error) bool {
	err := call(ctx)
	if err == nil {
		return true
	}
	if pause {
		p.pause()
		defer p.resume()
	}
	for failures := 1; ; failures++ {
		if ctx.Err() != nil {
			return false
		}
		delay := p.c.backoff.Delay(failures, rand.Float64)
		p.log.Warn("cannot "+what+"; is the store up? the partition waits and tries again", "error", err, "failures", failures, "retry_in", delay)
		if !sleep(ctx, delay) {
			return false
		}
		if err = call(ctx); err == nil {
			return true
		}
	}
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

// keyed reports whether KeyOrder keeps the message in order: it has a key.
func (d *delivery) keyed() bool { return d.m.Key != nil }

// parkedAs names the message for KeyOrder.
func (d *delivery) parkedAs() retrytopics.Parked {
	return retrytopics.Parked{Topic: d.p.topology.Topic, Key: string(d.m.Key), ID: d.id}
}

// markParked records that the message is among its key's parked messages
// (once), which the partition then knows its key by.
func (d *delivery) markParked() {
	if !d.parked {
		d.parked = true
		d.p.parkHere(d.m.Key)
	}
}

// admit decides, just before the attempts, what needs no attempt: a
// message whose key has an earlier message parked in a retry tier follows
// it there, and one Dedupe found processed is skipped. It waits while the
// message is claimed elsewhere. done reports that the message needs no
// attempt, and f what became of it.
func (d *delivery) admit(ctx context.Context) (f fate, done bool) {
	p := d.p
	if p.topology != nil && p.c.cfg.KeyOrder != nil && d.keyed() {
		if d.place < 0 && p.parkedHere(d.m.Key) && !p.follow([]taken{{d: d}}) {
			// This partition parked the key after the batch was looked up:
			// look again.
			return fateAbandoned, true
		}
		if d.place > 0 {
			return d.move(ctx, d.deferRoute()), true
		}
	}
	if p.c.cfg.Dedupe.Store == nil {
		return 0, false
	}
	for d.claim == dedupe.Busy {
		d.log().Info("message claimed elsewhere; waiting", "dedupe_id", d.id, "retry_in", p.c.cfg.Dedupe.BusyWait)
		p.pause()
		ok := sleep(p.sessCtx, p.c.cfg.Dedupe.BusyWait)
		p.resume()
		if !ok {
			return fateAbandoned, true
		}
		c, ok := p.claimIDs([]string{d.id})
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
		p.c.cfg.Dedupe.Metrics.Hits(1)
		p.c.metrics.Message(d.m.Topic, OutcomeDeduplicated)
		d.log().Info("message processed already; skipped", "dedupe_id", d.id)
		if !d.leaveParked() {
			return fateAbandoned, true
		}
		p.settle(d.m.Offset)
		return fateSkipped, true
	}
	return 0, false
}

// deferRoute sends a message behind its key's first parked message: to the
// tier whose delay covers the first one's wait, keeping its own retry
// state.
func (d *delivery) deferRoute() route {
	t := d.p.topology
	tier, _ := t.Holding(time.Until(time.UnixMilli(d.firstDue)))
	return route{tier: &tier, info: d.retryInfo(d.m.RetryRound, tier, nil)}
}
