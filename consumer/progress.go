package consumer

import (
	"errors"
	"time"

	"github.com/IBM/sarama"
)

// highWaterReader reads a partition's high-water mark from its leader:
// sarama.Client's GetOffset, asked for sarama.OffsetNewest.
type highWaterReader interface {
	GetOffset(topic string, partition int32, time int64) (int64, error)
}

// maxHighWaterWait bounds how long a tick waits for the high-water mark
// (and ProgressInterval, when shorter): a read still unanswered then is
// picked up by a later tick, and the tick reports the last value.
const maxHighWaterWait = 5 * time.Second

// errHighWaterSlow is the failure of a read of the high-water mark that
// did not answer within its tick's wait.
var errHighWaterSlow = errors.New("the partition's leader did not answer within the wait")

// highWaterRead is what one read of the high-water mark returned.
type highWaterRead struct {
	offset int64
	err    error
}

// progressWatch is a partition's progress timer: every ProgressInterval
// it reads the partition's high-water mark from the broker, and reports
// the partition's lag from it and the age of its oldest message in
// flight. Sarama's claim.HighWaterMarkOffset only moves with fetches, and
// a partition whose handler hangs fetches nothing once its channel is
// full: so the lag of a stuck partition rises only with a read of its own.
type progressWatch struct {
	p      *partition
	reader highWaterReader
	wait   time.Duration
	quit   chan struct{}
	// reading receives the answer of the read in flight; nil when none
	// is (at most one read of the partition runs at a time).
	reading chan highWaterRead
	// failing: the last read failed, and that was logged.
	failing bool
}

// watchProgress starts the partition's progress timer, when a hook wants
// its lag or oldest in-flight age, and returns the function that stops it
// and waits for it to end. A read still in flight then ends on its own,
// within Sarama's Net.ReadTimeout, or when the client closes.
func (p *partition) watchProgress(reader highWaterReader) (stop func()) {
	if len(p.c.metrics.lag) == 0 && len(p.c.metrics.oldestInFlight) == 0 {
		return func() {}
	}
	interval := p.c.cfg.ProgressInterval
	w := &progressWatch{p: p, reader: reader, wait: min(interval, maxHighWaterWait), quit: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-w.quit:
				return
			case <-t.C:
				if !w.tick() {
					return
				}
			}
		}
	}()
	return func() {
		close(w.quit)
		<-done
	}
}

// tick reads the high-water mark (or waits for the read in flight), then
// reports the partition's progress. It reports false when the timer was
// stopped meanwhile.
func (w *progressWatch) tick() bool {
	if w.reading == nil {
		w.reading = make(chan highWaterRead, 1) // the read never blocks on its answer
		go func(answer chan<- highWaterRead) {
			offset, err := w.reader.GetOffset(w.p.topic, w.p.partition, sarama.OffsetNewest)
			answer <- highWaterRead{offset, err}
		}(w.reading)
	}
	t := time.NewTimer(w.wait)
	defer t.Stop()
	select {
	case r := <-w.reading:
		w.reading = nil
		w.read(r)
	case <-t.C:
		w.read(highWaterRead{err: errHighWaterSlow})
	case <-w.quit:
		return false
	}
	w.p.reportProgress()
	return true
}

// read keeps the high-water mark a read returned, or logs its failure,
// once until a read succeeds again: the lag keeps its last value meanwhile.
func (w *progressWatch) read(r highWaterRead) {
	if r.err == nil {
		w.p.highWater.Store(r.offset)
		if w.failing {
			w.failing = false
			w.p.log.Info("the partition's high-water mark can be read again; its lag is current")
		}
		return
	}
	if !w.failing {
		w.failing = true
		w.p.log.Warn("cannot read the partition's high-water mark; its lag keeps its last value until it can (logged once until then)",
			"error", r.err, "wait", w.wait)
	}
}

// reportProgress reports the age of the partition's oldest message in
// flight (0 for none), and its lag: the high-water mark minus the next
// offset to commit (the one marked last; before any mark, the committed
// offset the claim started from, else the first message taken). Before
// any of them is known there is no lag to report.
func (p *partition) reportProgress() {
	offset, since, taken := p.pending.oldest()
	var age time.Duration
	if taken && since != notInFlight {
		age = p.since(since)
	}
	p.c.metrics.OldestInFlight(p.topic, p.partition, age)
	next := p.marked.Load()
	if next < 0 {
		if !taken {
			return
		}
		next = offset
	}
	highWater := max(p.claim.HighWaterMarkOffset(), p.highWater.Load())
	p.c.metrics.Lag(p.topic, p.partition, max(highWater-next, 0))
}
