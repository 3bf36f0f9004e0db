package producer

// The health probes of a Relay: Liveness says whether Run runs, Readiness
// whether every worker of Run made progress within
// RelayConfig.ReadinessGrace. Run's workers record their progress after
// each batch; the probes read it, with the breaker's state and the held
// partitions the relay keeps anyway (Breaker, Held). Nothing here has a
// goroutine or a timer: an answer is worked out when a probe asks.

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/courierkit/courier/internal/probe"
)

// Liveness returns an http.Handler that answers whether Run is running,
// for a Kubernetes liveness probe (GET /livez, say): 200 from the moment
// Run starts until it returns, also while Kafka or PostgreSQL is down and
// while the last batch finishes at shutdown; 503 before Run starts and
// once it has returned. An outage never makes it fail, since a restart
// would not end it. A relay driven by RunOnce alone is never live.
//
// It answers GET and HEAD with a small JSON body, {"status":"live",
// "reason":"Run is running"} or "not_live" with the reason, with
// Content-Type application/json and Cache-Control no-store; any other
// method gets 405. See "Health probes" in docs/relay.md.
func (r *Relay) Liveness() http.Handler {
	return probe.Func(r.health.liveness)
}

// Readiness returns an http.Handler that answers whether the relay is
// getting the outbox to Kafka, for a Kubernetes readiness probe (GET
// /readyz, say): 200 while Run runs and each of its workers, within
// RelayConfig.ReadinessGrace, ran a batch that made progress. A batch makes
// progress when it is recorded and Kafka answered for one of its events at
// least (published, dead-lettered, or refused and retried later with its
// attempt counted), or when it found nothing to send (nothing due, or only
// events to wait for their NotBefore). A batch that failed (PostgreSQL
// down), that Kafka did not answer, that the cluster's condition held
// whole, or that the open breaker skipped makes none: a relay with events
// waiting and Kafka down is ready until its breaker has kept it from
// Kafka for ReadinessGrace. A partition the cluster's condition holds does
// not fail it: its events wait out of the claims, and the others go on
// (Held lists it, and CourierOutboxPartitionHeld pages). It answers 503
// before each worker's first batch made progress, once Run's context has
// ended (it is stopping), and before Run starts and after it returned.
//
// A relay takes no traffic, so nothing is routed by its readiness: it
// tells a rollout, a dashboard or an alert that the relay is stuck.
//
// It answers GET and HEAD with a small JSON body: status ("ready" or
// "not_ready"), reason (e.g. "a worker has made no progress for 1m5s, past
// the bound of 1m2s; the breaker around Kafka is open"), breaker (as
// Breaker) and held_partitions (how many Held lists), with Content-Type
// application/json and Cache-Control no-store; any other method gets 405.
func (r *Relay) Readiness() http.Handler {
	return probe.Func(func() (bool, any) {
		return r.health.readiness(r.cfg.ReadinessGrace, r.Breaker(), len(r.Held()))
	})
}

// progressed reports whether a batch of Run made progress (see Readiness):
// it was recorded, and Kafka answered for one of its events or there was
// nothing to send.
func progressed(res BatchResult, err error) bool {
	switch {
	case err != nil || res.BreakerOpen:
		return false
	case res.Published+res.DeadLettered+res.Failed > 0:
		return true
	default:
		return res.Claimed == res.Held
	}
}

// relayHealth is where a Relay's Run stands for its probes, guarded by mu.
type relayHealth struct {
	mu sync.Mutex
	// runs counts the Runs running; ran is set once one returned.
	runs int
	ran  bool
	// ctx is the latest Run's context: once it ends, Run is stopping.
	ctx context.Context
	// started is when Run started; progress, per worker, when its last
	// batch made progress (zero: none since Run started).
	started  time.Time
	progress []time.Time
}

// start records that Run started on ctx, with workers workers.
func (h *relayHealth) start(ctx context.Context, workers int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs++
	h.ctx, h.started = ctx, time.Now()
	if h.runs == 1 {
		h.progress = make([]time.Time, workers)
	}
}

// stop records that a Run returned.
func (h *relayHealth) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs--
	h.ran = true
}

// batch records the outcome of a batch of worker index.
func (h *relayHealth) batch(index int, res BatchResult, err error) {
	if !progressed(res, err) {
		return
	}
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if index < len(h.progress) {
		h.progress[index] = now
	}
}

// readinessAnswer is the body of a Readiness answer.
type readinessAnswer struct {
	Status         string `json:"status"` // "ready" or "not_ready"
	Reason         string `json:"reason"`
	Breaker        string `json:"breaker"`
	HeldPartitions int    `json:"held_partitions"`
}

func (h *relayHealth) liveness() (bool, any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return probe.Liveness(h.runs > 0, h.ran)
}

// readiness is the Readiness answer of a relay whose breaker is in state
// breaker and that holds held partitions, ready while each worker made
// progress within grace.
func (h *relayHealth) readiness(grace time.Duration, breaker BreakerState, held int) (bool, any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := readinessAnswer{Status: "not_ready", Breaker: breaker.String(), HeldPartitions: held}
	switch {
	case h.runs == 0 && h.ran:
		a.Reason = "Run has returned"
	case h.runs == 0:
		a.Reason = "Run has not started"
	case h.ctx.Err() != nil:
		a.Reason = "Run is stopping: its context ended"
	default:
		a.Reason = h.progressReason(grace)
		if a.Reason == "" {
			a.Status = "ready"
			a.Reason = fmt.Sprintf("every worker made progress within the bound of %v", grace)
		} else if breaker == BreakerOpen {
			a.Reason += "; the breaker around Kafka is open"
		}
	}
	return a.Status == "ready", a
}

// progressReason says why the workers are not ready, "" when they are:
// each made progress within grace.
func (h *relayHealth) progressReason(grace time.Duration) string {
	var oldest time.Time
	for _, p := range h.progress {
		if p.IsZero() {
			return fmt.Sprintf("a worker has made no progress since Run started %v ago", probe.Round(time.Since(h.started)))
		}
		if oldest.IsZero() || p.Before(oldest) {
			oldest = p
		}
	}
	if since := time.Since(oldest); since >= grace {
		return fmt.Sprintf("a worker has made no progress for %v, past the bound of %v", probe.Round(since), grace)
	}
	return ""
}
