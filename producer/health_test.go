package producer_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// probeAnswer is a relay probe's JSON body, the fields of both probes.
type probeAnswer struct {
	Status         string `json:"status"`
	Reason         string `json:"reason"`
	Breaker        string `json:"breaker"`
	HeldPartitions int    `json:"held_partitions"`
}

// ask sends a GET to a probe and returns its status and decoded body.
func ask(t *testing.T, probe http.Handler) (int, probeAnswer) {
	t.Helper()
	return testkit.AskProbe[probeAnswer](t, probe)
}

// wantAnswer fails the test unless the probe answers code with a reason
// containing reason.
func wantAnswer(t *testing.T, what string, probe http.Handler, code int, reason string) probeAnswer {
	t.Helper()
	got, a := ask(t, probe)
	if got != code || !strings.Contains(a.Reason, reason) {
		t.Fatalf("%s: %d %+v, want %d with a reason saying %q", what, got, a, code, reason)
	}
	return a
}

// waitAnswer waits until the probe answers code with a reason containing
// reason.
func waitAnswer(t *testing.T, what string, probe http.Handler, code int, reason string) probeAnswer {
	t.Helper()
	var a probeAnswer
	var got int
	testkit.WaitFor(t, 30*time.Second, what, func() bool {
		got, a = ask(t, probe)
		return got == code && strings.Contains(a.Reason, reason)
	})
	return a
}

// gatedPublisher is a fakePublisher whose first Publish waits until open
// is called; entered is closed once it waits.
type gatedPublisher struct {
	*fakePublisher
	entered, gate chan struct{}
	once, opened  sync.Once
}

func newGatedPublisher() *gatedPublisher {
	return &gatedPublisher{fakePublisher: &fakePublisher{}, entered: make(chan struct{}), gate: make(chan struct{})}
}

func (g *gatedPublisher) Publish(ctx context.Context, records []*record.Record) []error {
	g.once.Do(func() { close(g.entered) })
	<-g.gate
	return g.fakePublisher.Publish(ctx, records)
}

func (g *gatedPublisher) open() { g.opened.Do(func() { close(g.gate) }) }

// startRelay runs r.Run until stop is called or the test ends, and checks
// that it returns nil.
func startRelay(t *testing.T, r *producer.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run returned %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// TestRelayIsLiveOnlyWhileRunRuns: Liveness answers 503 before Run
// starts, 200 while it runs (also while Kafka is down and the breaker
// open) and 503 once it has returned.
func TestRelayIsLiveOnlyWhileRunRuns(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	pub := &fakePublisher{}
	pub.setFail(func(*record.Record) error { return sarama.ErrOutOfBrokers }) // Kafka is down
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, PollInterval: 10 * time.Millisecond,
		Backoff: backoff.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond}, Breaker: producer.BreakerConfig{OpenFor: time.Hour}})
	live := relay.Liveness()
	wantAnswer(t, "Liveness before Run", live, http.StatusServiceUnavailable, "Run has not started")

	enqueue(t, pg, out, orderCreated("o-1"))
	stop := startRelay(t, relay)
	testkit.WaitFor(t, 30*time.Second, "the breaker to open with Kafka down", func() bool { return relay.Breaker() == producer.BreakerOpen })
	wantAnswer(t, "Liveness with Kafka down and the breaker open", live, http.StatusOK, "Run is running")

	stop()
	wantAnswer(t, "Liveness after Run returned", live, http.StatusServiceUnavailable, "Run has returned")
}

// TestRelayIsReadyOnlyWhileItMakesProgress: Readiness answers 503 before
// Run and until each worker's first batch made progress; 200 while the
// workers publish or find nothing to publish; 503 once Kafka has been
// down (every batch deferred, then the breaker open) for longer than
// ReadinessGrace, Liveness staying 200; 200 again once Kafka is back; 503
// after Run.
func TestRelayIsReadyOnlyWhileItMakesProgress(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	pub := newGatedPublisher()
	defer pub.open()
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, Workers: 2, PollInterval: 10 * time.Millisecond,
		ReadinessGrace: 300 * time.Millisecond,
		// Deferred events are due again at once, so that the worker of
		// their keys never finds nothing to send while Kafka is down.
		Backoff: backoff.Backoff{Base: time.Millisecond, Max: 10 * time.Millisecond},
		Breaker: producer.BreakerConfig{OpenFor: 50 * time.Millisecond}})
	ready, live := relay.Readiness(), relay.Liveness()
	a := wantAnswer(t, "Readiness before Run", ready, http.StatusServiceUnavailable, "Run has not started")
	if a.Status != "not_ready" || a.Breaker != "closed" || a.HeldPartitions != 0 {
		t.Errorf("Readiness before Run: %+v, want not_ready, the breaker closed, no partition held", a)
	}
	send := func(round int) {
		for i := range 8 { // keys of both workers
			enqueue(t, pg, out, orderCreated(fmt.Sprintf("o-%d-%d", round, i)))
		}
	}
	send(1)
	stop := startRelay(t, relay)
	<-pub.entered
	wantAnswer(t, "Readiness while a worker's first batch is publishing", ready, http.StatusServiceUnavailable, "has made no progress")
	pub.open()
	testkit.WaitFor(t, 30*time.Second, "the first events published", func() bool { return len(pub.ackedIDs("orders")) == 8 })
	waitAnswer(t, "Readiness once every worker made progress", ready, http.StatusOK, "every worker made progress within the bound of 300ms")

	pub.setFail(func(*record.Record) error { return sarama.ErrOutOfBrokers }) // Kafka goes down
	send(2)
	waitAnswer(t, "Readiness to fail with Kafka down past the bound", ready, http.StatusServiceUnavailable, "past the bound of 300ms")
	wantAnswer(t, "Liveness with Kafka down", live, http.StatusOK, "Run is running")

	pub.setFail(nil) // Kafka is back
	testkit.WaitFor(t, 30*time.Second, "the events that waited published", func() bool { return len(pub.ackedIDs("orders")) == 16 })
	a = waitAnswer(t, "Readiness once Kafka is back", ready, http.StatusOK, "every worker made progress")
	if a.Breaker != "closed" {
		t.Errorf("Readiness once Kafka is back: %+v, want the breaker closed", a)
	}

	stop()
	wantAnswer(t, "Readiness after Run returned", ready, http.StatusServiceUnavailable, "Run has returned")
}

// TestRelayProbesAnswerGetAndHeadWithJSON: the relay's probes answer GET
// with a JSON body, HEAD with the headers alone, both with Content-Type
// application/json and Cache-Control no-store, and any other method with
// 405 and an Allow header.
func TestRelayProbesAnswerGetAndHeadWithJSON(t *testing.T) {
	t.Parallel()
	pg, _ := setup(t)
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: &fakePublisher{}})
	testkit.CheckProbes(t, http.StatusServiceUnavailable, map[string]http.Handler{"/livez": relay.Liveness(), "/readyz": relay.Readiness()}, map[string]map[string]any{
		"/livez":  {"status": "not_live", "reason": "Run has not started"},
		"/readyz": {"status": "not_ready", "reason": "Run has not started", "breaker": "closed", "held_partitions": 0.0},
	})
}
