package consumer

// The health probes: Liveness says whether Run runs, Readiness whether the
// consumer is in its group, or out of it for less than
// Config.ReadinessGrace. Run and the group handler's Setup, Cleanup and
// ConsumeClaim tell health where the consumer stands; the probes read it.
// Nothing here has a goroutine or a timer: an answer is worked out when a
// probe asks.

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
// Run starts until it returns, also while it waits for Kafka to come back,
// for a rebalance or for its handlers to finish at shutdown; 503 before
// Run starts and once it has returned. A Kafka outage never makes it fail,
// since a restart would not bring Kafka back.
//
// It answers GET and HEAD with a small JSON body, {"status":"live",
// "reason":"Run is running"} or "not_live" with the reason, with
// Content-Type application/json and Cache-Control no-store; any other
// method gets 405. See "Health probes" in docs/consumer.md.
func (c *Consumer) Liveness() http.Handler {
	return probe.Func(c.health.liveness)
}

// Readiness returns an http.Handler that answers whether the consumer is
// in its consumer group, for a Kubernetes readiness probe (GET /readyz,
// say): 200 while Run is in the group, holding the partitions the group
// assigned it, none included (a group with more members than its topics
// have partitions leaves some with none; they are standbys, and a probe
// failing for them would hold up a rollout for ever), and while it has been
// out of the group (a rebalance, Kafka unreachable, the coordinator moving)
// for less than Config.ReadinessGrace since it was last in. It answers 503
// past that bound, until Run is in the group again; before Run has first
// joined the group (a consumer that just started is ready once it is in);
// once Run's context has ended (it is stopping); and before Run starts and
// after it returned.
//
// Only the group counts: an open Breaker, a paused partition or a handler
// that fails keep the consumer ready, since taking it out of service would
// not bring its downstream back.
//
// It answers GET and HEAD with a small JSON body: status ("ready" or
// "not_ready"), reason (e.g. "out of the group for 12.5s (a rebalance or a
// reconnect), within the bound of 2m0s"), group, in_group and partitions
// (the partitions it consumes now), with Content-Type application/json
// and Cache-Control no-store; any other method gets 405.
func (c *Consumer) Readiness() http.Handler {
	return probe.Func(func() (bool, any) { return c.health.readiness(c.cfg.Group, c.cfg.ReadinessGrace) })
}

// health is where a Consumer stands for its probes, guarded by mu.
type health struct {
	mu  sync.Mutex
	run runState
	// ctx is the running Run's context: once it ends, Run is stopping.
	ctx context.Context
	// started is when Run started; outSince when the consumer last left
	// its group (started until it first joins).
	started, outSince time.Time
	// inGroup is set between a session's Setup and its Cleanup; joined
	// once a session was set up since Run started.
	inGroup, joined bool
	// claims counts the ConsumeClaims running: the partitions consumed.
	claims int
}

// runState is where Run is: not started, running, or returned.
type runState int

const (
	notStarted runState = iota
	running
	returned
)

// start records that Run started, on ctx.
func (h *health) start(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	h.run, h.ctx, h.started, h.outSince = running, ctx, now, now
	h.inGroup, h.joined, h.claims = false, false, 0
}

// stop records that Run returned.
func (h *health) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.run, h.ctx, h.inGroup, h.claims = returned, nil, false, 0
}

// setup records that a session began: the consumer is in its group.
func (h *health) setup() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.inGroup, h.joined = true, true
}

// cleanup records that a session ended: the consumer left its group.
func (h *health) cleanup() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inGroup {
		h.inGroup, h.outSince = false, time.Now()
	}
}

// claimed adds delta to the partitions consumed.
func (h *health) claimed(delta int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.claims += delta
}

// readinessAnswer is the body of a Readiness answer.
type readinessAnswer struct {
	Status     string `json:"status"` // "ready" or "not_ready"
	Reason     string `json:"reason"`
	Group      string `json:"group"`
	InGroup    bool   `json:"in_group"`
	Partitions int    `json:"partitions"`
}

func (h *health) liveness() (bool, any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return probe.Liveness(h.run == running, h.run == returned)
}

// readiness is the Readiness answer of the consumer of group, ready while
// it is out of its group for less than grace.
func (h *health) readiness(group string, grace time.Duration) (bool, any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := readinessAnswer{Status: "not_ready", Group: group, InGroup: h.inGroup, Partitions: h.claims}
	out := time.Since(h.outSince)
	switch {
	case h.run == notStarted:
		a.Reason = "Run has not started"
	case h.run == returned:
		a.Reason = "Run has returned"
	case h.ctx.Err() != nil:
		a.Reason = "Run is stopping: its context ended"
	case h.inGroup && h.claims == 0:
		a.Status, a.Reason = "ready", "in the group with no partition to consume: the group has more members than its topics have partitions"
	case h.inGroup:
		a.Status, a.Reason = "ready", fmt.Sprintf("in the group, consuming %d %s", h.claims, plural(h.claims, "partition"))
	case !h.joined:
		a.Reason = fmt.Sprintf("joining the group for %v; ready once it is in", probe.Round(time.Since(h.started)))
	case out < grace:
		a.Status, a.Reason = "ready", fmt.Sprintf("out of the group for %v (a rebalance or a reconnect), within the bound of %v", probe.Round(out), grace)
	default:
		a.Reason = fmt.Sprintf("out of the group for %v (a rebalance or a reconnect), past the bound of %v", probe.Round(out), grace)
	}
	return a.Status == "ready", a
}

// plural is word, with an s unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
