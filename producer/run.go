package producer

import (
	"context"
	"sync"
	"time"
)

// Run publishes events until ctx ends, then lets the batch in flight finish
// within ShutdownTimeout and returns nil. It first checks the outbox's
// tables, and returns at once an error matching ErrOutboxNotReady (an
// *OutboxNotReadyError naming what is missing and the migrate command that
// creates it) when the schema, a table or a column is missing. It wakes when the outbox's
// sequence shows new events (see ProbeInterval), polls every PollInterval
// besides, pauses while the breaker is open, survives PostgreSQL and Kafka
// outages by retrying, keeps the history's day partitions made ahead, and
// drops published events older than Retention, and vacuums its queue when
// autovacuum has not. Errors it recovers from are logged, not returned.
// Liveness answers 200 while it runs, and Readiness while its workers make
// progress.
func (r *Relay) Run(ctx context.Context) error {
	r.health.start(ctx, r.cfg.Workers)
	defer r.health.stop()
	if err := r.ready(ctx); err != nil {
		r.closePublisher()
		return err
	}
	var wg sync.WaitGroup
	wg.Go(func() { r.watch(ctx) })
	if !r.cfg.PollOnly {
		wg.Go(func() { r.presence.run(ctx) })
	}
	wg.Go(func() { r.every(ctx, r.cfg.CleanupInterval, r.maintain) })
	wg.Go(func() { r.every(ctx, vacuumInterval, r.vacuum) })
	if len(r.metrics.backlog) > 0 {
		wg.Go(func() { r.every(ctx, r.cfg.StatsInterval, r.measureBacklog) })
	}
	var workers sync.WaitGroup
	for i := range r.cfg.Workers {
		workers.Go(func() { r.loop(ctx, i) })
	}
	workers.Wait()
	wg.Wait()
	r.closePublisher()
	return nil
}

// closePublisher closes the Kafka producer the relay made.
func (r *Relay) closePublisher() {
	if r.ownsPub {
		if err := r.publisher.Close(); err != nil {
			r.log.Warn("closing the Kafka producer", "error", err)
		}
	}
}

// loop runs the batches of worker index until ctx ends.
func (r *Relay) loop(ctx context.Context, index int) {
	errDelay := time.Duration(0)
	for ctx.Err() == nil {
		res, err := r.runBatch(ctx, r.presence.shares(index))
		r.health.batch(index, res, err)
		var wait time.Duration
		switch {
		case err != nil:
			errDelay = min(max(2*errDelay, 100*time.Millisecond), 5*time.Second)
			r.log.Error("relay batch failed; retrying", "error", err, "retry_in", errDelay)
			wait = errDelay
		case res.BreakerOpen:
			wait = r.untilHalfOpen()
		case res.Claimed == r.cfg.BatchSize && res.Published+res.Failed+res.DeadLettered+res.Deferred+res.KafkaHeld+res.Held > 0:
			errDelay = 0
			continue // a full batch that made progress: there is more
		case res.Released > 0:
			// An event failed or Kafka was unreachable, so later events of
			// its key wait: try again shortly rather than at the next poll.
			errDelay = 0
			wait = min(r.cfg.PollInterval, 50*time.Millisecond)
		default:
			errDelay = 0
			wait = r.cfg.PollInterval
		}
		sleep(ctx, wait, r.wake[index])
	}
}

// runBatch runs RunOnce on a context that outlives ctx by ShutdownTimeout,
// so that cancelling Run lets the batch in flight finish and be recorded.
func (r *Relay) runBatch(ctx context.Context, shares []int32) (BatchResult, error) {
	batchCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		timer := time.NewTimer(r.cfg.ShutdownTimeout)
		defer timer.Stop()
		select {
		case <-timer.C:
			cancel()
		case <-batchCtx.Done():
		}
	})
	defer stop()
	return r.runOnce(batchCtx, shares)
}

// sleep waits for d, a wake-up on wake (nil: none) or the end of ctx.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	case <-wake:
	}
}

// every runs fn every interval until ctx ends.
func (r *Relay) every(ctx context.Context, interval time.Duration, fn func(context.Context)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// maintain keeps the history's partitions made ahead and applies
// retention (see store.maintain).
func (r *Relay) maintain(ctx context.Context) {
	c, _, err := r.store.maintain(ctx, r.pool, r.queryNow(), r.cfg.Retention, r.cfg.CleanupBatch)
	switch {
	case err != nil && ctx.Err() == nil:
		r.log.Warn("retention and partition upkeep failed; will retry", "error", err)
	case c.Events > 0 || c.Keys > 0:
		r.log.Info("removed published events past retention", "events", c.Events, "partitions", c.Partitions,
			"legacy_table", c.Legacy, "idempotency_keys", c.Keys, "retention", r.cfg.Retention)
	}
}

// vacuumInterval is how often the relay looks whether its queue needs a
// vacuum (see store.vacuum).
const vacuumInterval = 2 * time.Second

// vacuum vacuums the queue when PostgreSQL's autovacuum has not kept it
// clean. A failure (the relay's role may not own the tables) is logged once
// per relay: autovacuum may still do the work.
func (r *Relay) vacuum(ctx context.Context) {
	vacuumed, err := r.store.vacuum(ctx, r.pool)
	switch {
	case err != nil && ctx.Err() == nil && r.vacuumFailed.CompareAndSwap(false, true):
		r.log.Warn("vacuuming the outbox queue failed; leaving it to autovacuum", "error", err)
	case len(vacuumed) > 0:
		r.log.Debug("vacuumed the outbox queue", "tables", vacuumed)
	}
}

func (r *Relay) measureBacklog(ctx context.Context) {
	waiting, age, err := r.store.backlogNow(ctx, r.pool, r.queryNow())
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("measuring the backlog failed", "error", err)
		}
		return
	}
	r.metrics.Backlog(waiting, age)
}
