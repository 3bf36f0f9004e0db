package consumer

import (
	"context"
	"hash/crc32"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/IBM/sarama"
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
	// letters are the partition's dead-letter writes in flight.
	letters deadLetters

	// clock is when the partition started: attempts read their time as
	// clock plus the monotonic time since (cheaper than time.Now).
	clock time.Time

	mu     sync.Mutex
	pauses int // waiters holding the partition paused
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
		letters:      deadLetters{slots: make(chan struct{}, h.c.cfg.MaxDeadLettersInFlight)},
	}
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
	return p
}

// close waits for the dead-letter writes in flight (they end with the
// session, or ShutdownTimeout after it) and releases the partition.
func (p *partition) close() {
	p.letters.wg.Wait()
	p.stopWork()
	p.c.metrics.Released(p.topic, p.partition)
}

// serial handles the messages one at a time, in offset order. Dead-letter
// writes run beside it (see deadLetter), so offsets are marked up to the
// lowest message not yet settled.
func (p *partition) serial() {
	for {
		select {
		case <-p.sessCtx.Done():
			return
		case msg, ok := <-p.claim.Messages():
			if !ok || !p.waitDeadLetters() {
				return
			}
			p.pending.start(msg.Offset)
			if !p.process(msg) {
				return
			}
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
		queues = make([]chan *sarama.ConsumerMessage, n)
	)
	for i := range queues {
		queue := make(chan *sarama.ConsumerMessage, workerQueue)
		queues[i] = queue
		wg.Go(func() {
			for msg := range queue {
				// After a message is abandoned (the session ended) the
				// rest of the queue is skipped by process.
				p.process(msg)
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
		var msg *sarama.ConsumerMessage
		select {
		case <-p.sessCtx.Done():
			return
		case m, ok := <-p.claim.Messages():
			if !ok || !p.waitDeadLetters() {
				return
			}
			msg = m
		}
		worker := int(msg.Offset % int64(n)) // keyless: no order to keep
		if msg.Key != nil {
			worker = int(crc32.ChecksumIEEE(msg.Key) % uint32(n))
		}
		p.pending.start(msg.Offset)
		select {
		case <-p.sessCtx.Done():
			return
		case queues[worker] <- msg:
		}
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
