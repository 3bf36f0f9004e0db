package consumer

import (
	"context"
	"fmt"
	"hash/crc32"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"

	"github.com/courierkit/courier/retrytopics"
)

// partition handles the messages of one claim.
type partition struct {
	*groupHandler
	sess      sarama.ConsumerGroupSession
	claim     sarama.ConsumerGroupClaim
	topic     string
	partition int32
	log       *slog.Logger

	// sessCtx ends with the session: no new message, attempt or write
	// starts after it, and waits stop.
	sessCtx context.Context
	// workCtx ends ShutdownTimeout after sessCtx: handlers and dead-letter
	// writes in flight run on it.
	workCtx  context.Context
	stopWork func()

	// pending holds the messages taken and not yet settled (handled, or
	// written to the dead-letter topic): offsets are marked up to the
	// lowest of them.
	pending offsets
	// moves are the partition's writes to retry and dead-letter topics in flight.
	moves moves

	// clock is when the partition started: attempts read their time as
	// clock plus the monotonic time since (cheaper than time.Now).
	clock time.Time

	// topology is the retry topology of the partition's topic (a main
	// topic or one of its retry topics); nil without Config.Retry.
	topology *retrytopics.Topology
	// tierDelay is the delay of the retry tier the partition's topic is;
	// 0 for a main topic.
	tierDelay time.Duration
	// tracked: its deliveries carry tracking (Dedupe or KeyOrder is on,
	// or the topic is a retry topic).
	tracked bool

	// slab and trackingSlab hold the deliveries and their tracking
	// allocated but not yet handed out.
	slab         []delivery
	trackingSlab []tracking

	// maxBatch is the most messages taken at once (see take); batch is
	// their buffer, and carry a message taken but not yet due.
	maxBatch int
	batch    []taken
	carry    *taken

	// owner tells this partition's dedupe claims from any other's; each
	// claim call adds its number (claims) to it. Keyed workers claim too
	// (a message claimed elsewhere is claimed again), hence the atomic.
	owner  string
	claims atomic.Uint64
	// marks sends the dedupe marks of handled messages; nil without
	// Dedupe.
	marks *doneMarks
	// parkedKeys counts, by key, the messages this partition parked in
	// KeyOrder and has not yet unparked.
	parkedMu   sync.Mutex
	parkedKeys map[string]int

	mu        sync.Mutex
	pauses    int                 // waiters holding the partition paused
	abandoned map[string][]string // claims to release when the partition is given up: ids by owner
}

func newPartition(h *groupHandler, sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) *partition {
	p := &partition{
		groupHandler: h,
		sess:         sess,
		claim:        claim,
		topic:        claim.Topic(),
		partition:    claim.Partition(),
		log:          h.c.log.With("topic", claim.Topic(), "partition", claim.Partition()),
		sessCtx:      sess.Context(),
		clock:        time.Now(),
		moves:        moves{slots: make(chan struct{}, h.c.cfg.MaxDeadLettersInFlight)},
		topology:     h.c.topologies[claim.Topic()],
		maxBatch:     1,
	}
	if h.c.cfg.Dedupe.Store != nil || h.c.cfg.KeyOrder != nil {
		p.maxBatch = h.c.cfg.Dedupe.Batch
		p.tracked = true
	}
	p.batch = make([]taken, 0, p.maxBatch)
	if p.topology != nil {
		for _, tier := range p.topology.Tiers {
			if tier.Topic == p.topic {
				p.tierDelay = tier.Delay
			}
		}
	}
	p.tracked = p.tracked || p.tierDelay > 0
	workCtx, cancel := context.WithCancel(context.WithoutCancel(p.sessCtx))
	grace := h.c.cfg.ShutdownTimeout
	stop := context.AfterFunc(p.sessCtx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-workCtx.Done():
		}
	})
	p.workCtx = workCtx
	p.stopWork = func() { stop(); cancel() }
	if h.c.cfg.Dedupe.Store != nil {
		p.owner = fmt.Sprintf("%s/%d/%s", p.topic, p.partition, uuid.NewString())
		p.marks = newDoneMarks(p)
	}
	return p
}

// close waits for the writes in flight (they end with the session, or
// ShutdownTimeout after it) and the dedupe marks, releases the claims of
// the messages left unhandled, and releases the partition.
func (p *partition) close() {
	p.moves.wg.Wait()
	if p.marks != nil {
		p.marks.close()
		p.finishDedupe()
	}
	p.stopWork()
	p.c.metrics.Released(p.topic, p.partition)
}

// serial handles the messages one at a time, in offset order. Writes to
// retry and dead-letter topics run beside it (see forward), so offsets are
// marked up to the lowest message not yet settled.
func (p *partition) serial() {
	for {
		batch := p.take()
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
			case <-p.sessCtx.Done():
				for _, left := range batch[i:] {
					left.d.abandon()
				}
				return
			case queues[worker] <- t:
			}
		}
	}
}

// parkedHere reports whether this partition has a message of key parked in
// KeyOrder.
func (p *partition) parkedHere(key []byte) bool {
	p.parkedMu.Lock()
	defer p.parkedMu.Unlock()
	return p.parkedKeys[string(key)] > 0
}

// parkHere and unparkedHere count the messages of key this partition
// parked and unparked.
func (p *partition) parkHere(key []byte) {
	p.parkedMu.Lock()
	defer p.parkedMu.Unlock()
	if p.parkedKeys == nil {
		p.parkedKeys = map[string]int{}
	}
	p.parkedKeys[string(key)]++
}

func (p *partition) unparkedHere(key []byte) {
	p.parkedMu.Lock()
	defer p.parkedMu.Unlock()
	if p.parkedKeys[string(key)]--; p.parkedKeys[string(key)] <= 0 {
		delete(p.parkedKeys, string(key))
	}
}

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

// pause stops fetching the partition until every pause has its resume.
// Messages already fetched stay buffered.
func (p *partition) pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pauses++; p.pauses == 1 {
		p.group.Pause(map[string][]int32{p.topic: {p.partition}})
	}
}

func (p *partition) resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pauses--; p.pauses == 0 {
		p.group.Resume(map[string][]int32{p.topic: {p.partition}})
	}
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

// now is the time on the partition's clock: since it started, monotonic.
func (p *partition) now() time.Duration { return time.Since(p.clock) }

// since is how long ago t was on the partition's clock.
func (p *partition) since(t time.Duration) time.Duration { return p.now() - t }
