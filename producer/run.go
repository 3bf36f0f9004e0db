package producer

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Run publishes events until ctx ends, then lets the batch in flight finish
// within ShutdownTimeout and returns nil. It wakes on NOTIFY from the outbox
// trigger (unless PollOnly), polls every PollInterval, pauses while the
// breaker is open, survives PostgreSQL and Kafka outages by retrying, and
// deletes published events older than Retention. Errors it recovers from are
// logged, not returned.
func (r *Relay) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if !r.cfg.PollOnly {
		wg.Go(func() { r.listen(ctx) })
	}
	if r.cfg.Retention > 0 {
		wg.Go(func() { r.every(ctx, r.cfg.CleanupInterval, r.cleanup) })
	}
	if _, none := r.metrics.(noMetrics); !none {
		wg.Go(func() { r.every(ctx, r.cfg.StatsInterval, r.measureBacklog) })
	}
	var workers sync.WaitGroup
	for i := range r.cfg.Workers {
		workers.Go(func() { r.loop(ctx, i) })
	}
	workers.Wait()
	wg.Wait()
	if r.ownsPub {
		if err := r.publisher.Close(); err != nil {
			r.log.Warn("closing the Kafka producer", "error", err)
		}
	}
	return nil
}

// loop runs the batches of worker index until ctx ends.
func (r *Relay) loop(ctx context.Context, index int) {
	shares := homeShares(index, r.cfg.Workers)
	errDelay := time.Duration(0)
	for ctx.Err() == nil {
		res, err := r.runBatch(ctx, shares)
		var wait time.Duration
		switch {
		case err != nil:
			errDelay = min(max(2*errDelay, 100*time.Millisecond), 5*time.Second)
			r.log.Error("relay batch failed; retrying", "error", err, "retry_in", errDelay)
			wait = errDelay
		case res.BreakerOpen:
			wait = r.untilHalfOpen()
		case res.Claimed == r.cfg.BatchSize && res.Published+res.Failed+res.DeadLettered > 0:
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

func (r *Relay) cleanup(ctx context.Context) {
	n, err := r.store.cleanup(ctx, r.pool, r.cfg.Now().Add(-r.cfg.Retention), r.cfg.CleanupBatch)
	switch {
	case err != nil && ctx.Err() == nil:
		r.log.Warn("retention cleanup failed; will retry", "error", err)
	case n > 0:
		r.log.Info("deleted published events past retention", "deleted", n, "retention", r.cfg.Retention)
	}
}

func (r *Relay) measureBacklog(ctx context.Context) {
	waiting, age, err := r.store.backlog(ctx, r.pool, r.queryNow())
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("measuring the backlog failed", "error", err)
		}
		return
	}
	r.metrics.Backlog(waiting, age)
}

// listen holds a LISTEN connection and wakes the loop on every notification
// for this table. It reconnects after errors (a PostgreSQL restart, a
// terminated backend) and wakes the loop then too, since notifications sent
// while it was away are lost.
func (r *Relay) listen(ctx context.Context) {
	delay := time.Duration(0)
	for ctx.Err() == nil {
		listened, err := r.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if listened {
			delay = 0 // it worked until now: start the backoff over
		}
		delay = min(max(2*delay, 100*time.Millisecond), 5*time.Second)
		r.log.Warn("LISTEN connection lost; polling until it is back", "error", err, "retry_in", delay)
		sleep(ctx, delay, nil)
	}
}

// listenOnce listens until the connection fails; listened reports whether
// LISTEN had succeeded.
func (r *Relay) listenOnce(ctx context.Context) (listened bool, err error) {
	cfg := r.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = listenerAppName(cfg.RuntimeParams["application_name"])
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+r.table.Name); err != nil {
		return false, err
	}
	r.Wake() // catch up on anything committed while we were not listening
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return true, err
		}
		if n.Payload == r.table.String() {
			r.Wake()
		}
	}
}

func listenerAppName(base string) string {
	if base == "" {
		return "courier-relay-listener"
	}
	return base + "-listener"
}
