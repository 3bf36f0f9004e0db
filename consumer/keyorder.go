package consumer

import (
	"context"
	"sync"
	"time"

	"github.com/courierkit/courier/retrytopics"
)

// keyOrderFeature is a partition's key order (Config.KeyOrder): a message
// whose key has an earlier message parked in a retry tier follows it
// there, and a message moving to a retry tier parks its key first. Where a
// message stands among its key's parked messages is in its tracking.
type keyOrderFeature struct {
	p     *partition
	order retrytopics.KeyOrder

	// parked counts, by key, the messages this partition parked and has
	// not yet unparked.
	mu     sync.Mutex
	parked map[string]int
}

// keyPlace is where a message stands among its key's parked messages.
type keyPlace struct {
	// place is where KeyOrder put the message among its key's parked
	// messages (-1: free) when it was taken.
	place int
	// parked: the message is among its key's parked messages, and leaves
	// them once settled other than by a move to a retry tier.
	parked bool
	// firstDue is when the first parked message of its key is due (unix
	// ms, 0: unknown).
	firstDue int64
}

// admitBatch asks KeyOrder where the keyed messages stand.
func (f *keyOrderFeature) admitBatch(batch []taken) bool {
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
	p := f.p
	var places []retrytopics.Place
	if !p.persistIn(p.claimCtx, "look up the parked messages of the keys", true, func(ctx context.Context) (err error) {
		places, err = f.order.Follow(ctx, msgs)
		return err
	}) {
		return false
	}
	for i, d := range of {
		d.place = places[i].Position
		if d.place >= 0 {
			f.markParked(d)
		}
		if due := places[i].FirstDue; !due.IsZero() {
			d.firstDue = due.UnixMilli()
		}
	}
	return true
}

// admit sends a message whose key has an earlier message parked in a
// retry tier after it.
func (f *keyOrderFeature) admit(ctx context.Context, d *delivery) (fate, bool) {
	if !d.keyed() {
		return 0, false
	}
	if d.place < 0 && f.parkedHere(d.m.Key) && !f.admitBatch([]taken{{d: d}}) {
		// This partition parked the key after the batch was looked up:
		// look again.
		return fateAbandoned, true
	}
	if d.place > 0 {
		return d.move(ctx, d.deferRoute()), true
	}
	return 0, false
}

// attempt does nothing: a parked key waits for no attempt.
func (f *keyOrderFeature) attempt(*delivery) {}

// moving parks the key of a message about to move to a retry tier, due at
// the tier's time, before the write: a crash between the two leaves the
// key parked (its later messages wait for the TTL), never a message in a
// tier that its key's later messages overtake.
func (f *keyOrderFeature) moving(d *delivery, r route) bool {
	if r.tier == nil || !d.keyed() {
		return true
	}
	return f.park(d, r.info.NotBefore)
}

// done makes a message that needs no more handling leave its key's parked
// messages; it may be settled only once it did.
func (f *keyOrderFeature) done(d *delivery, settle bool) (bool, bool) {
	unparked := f.leaveParked(d)
	return settle && unparked, false
}

// moved makes a message written to the dead-letter topic leave its key's
// parked messages, and reports whether it did; one written to a retry tier
// stays parked there.
func (f *keyOrderFeature) moved(d *delivery, r route) bool {
	return r.tier != nil || f.leaveParked(d)
}

// abandoned does nothing: the key stays parked for the next owner.
func (f *keyOrderFeature) abandoned(*delivery) {}

// close does nothing: the keys stay parked for the next owner.
func (f *keyOrderFeature) close() {}

// park parks the key of a message about to move to a retry tier, due at
// notBefore, and reports whether it did (false: the session ended first).
func (f *keyOrderFeature) park(d *delivery, notBefore time.Time) bool {
	p := f.p
	if !p.persistIn(p.claimCtx, "park the key", true, func(ctx context.Context) error {
		return f.order.Park(ctx, d.parkedAs(), notBefore)
	}) {
		return false
	}
	f.markParked(d)
	return true
}

// keyed reports whether KeyOrder keeps the message in order: it has a key.
func (d *delivery) keyed() bool { return d.m.Key != nil }

// parkedAs names the message for KeyOrder.
func (d *delivery) parkedAs() retrytopics.Parked {
	return retrytopics.Parked{Topic: d.p.topology.Topic, Key: string(d.m.Key), ID: d.id}
}

// markParked records that the message is among its key's parked messages
// (once), which the partition then knows its key by.
func (f *keyOrderFeature) markParked(d *delivery) {
	if !d.parked {
		d.parked = true
		f.parkHere(d.m.Key)
	}
}

// deferRoute sends a message behind its key's first parked message: to the
// tier whose delay covers the first one's wait, keeping its own retry
// state.
func (d *delivery) deferRoute() route {
	t := d.p.topology
	tier, _ := t.Holding(time.Until(time.UnixMilli(d.firstDue)))
	return route{tier: &tier, info: d.retryInfo(d.m.RetryRound, tier, nil)}
}

// parkedHere reports whether this partition has a message of key parked in
// KeyOrder.
func (f *keyOrderFeature) parkedHere(key []byte) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.parked[string(key)] > 0
}

// parkHere and unparkedHere count the messages of key this partition
// parked and unparked.
func (f *keyOrderFeature) parkHere(key []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.parked == nil {
		f.parked = map[string]int{}
	}
	f.parked[string(key)]++
}

func (f *keyOrderFeature) unparkedHere(key []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.parked[string(key)]--; f.parked[string(key)] <= 0 {
		delete(f.parked, string(key))
	}
}

// isParked reports whether the message is among its key's parked messages.
func (d *delivery) isParked() bool { return d.tracking != nil && d.parked }

// leaveParked removes a parked message from its key's parked messages, and
// reports whether it did (false: the partition's work ended first).
func (f *keyOrderFeature) leaveParked(d *delivery) bool {
	if !d.isParked() {
		return true
	}
	p := f.p
	ok := p.persistIn(p.workCtx, "unpark the key", false, func(ctx context.Context) error {
		return f.order.Unpark(ctx, d.parkedAs())
	})
	if ok {
		d.parked = false
		f.unparkedHere(d.m.Key)
	}
	return ok
}
