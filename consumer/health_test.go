package consumer_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/testkit"
)

// probeAnswer is a probe's JSON body, the fields of both probes.
type probeAnswer struct {
	Status     string `json:"status"`
	Reason     string `json:"reason"`
	Group      string `json:"group"`
	InGroup    bool   `json:"in_group"`
	Partitions int    `json:"partitions"`
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

// waitAnswer waits until the probe answers code and what satisfies cond.
func waitAnswer(t *testing.T, what string, probe http.Handler, code int, cond func(probeAnswer) bool) probeAnswer {
	t.Helper()
	var a probeAnswer
	var got int
	testkit.WaitFor(t, 30*time.Second, what, func() bool {
		got, a = ask(t, probe)
		return got == code && cond(a)
	})
	return a
}

// holdNextJoin makes the in-process broker hold the next JoinGroup request
// of the fixture's group until release is called (defer it); held is
// closed once the request is held.
func (f *fixture) holdNextJoin(t *testing.T) (held <-chan struct{}, release func()) {
	t.Helper()
	heldCh, released := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	var taken atomic.Bool
	f.k.Cluster.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if req.(*kmsg.JoinGroupRequest).Group != f.group || !taken.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		f.k.Cluster.SleepControl(func() {
			close(heldCh)
			select { // within Sarama's read timeout of a JoinGroup (15s here)
			case <-released:
			case <-time.After(10 * time.Second):
			}
		})
		return nil, nil, false // then the broker handles it
	})
	return heldCh, release
}

// rebalanceOnce makes the in-process broker answer the next heartbeat of
// the fixture's group REBALANCE_IN_PROGRESS, as it does when a member
// joins or leaves: an eager member ends its session and joins again, a
// cooperative one joins again within its session.
func (f *fixture) rebalanceOnce(t *testing.T) {
	t.Helper()
	var done atomic.Bool
	f.k.Cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if req.(*kmsg.HeartbeatRequest).Group != f.group || !done.CompareAndSwap(false, true) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = kerr.RebalanceInProgress.Code
		return resp, nil, true
	})
}

// TestConsumerIsLiveOnlyWhileRunRuns: Liveness answers 503 before Run
// starts, 200 while it runs (also while it waits to join its group) and
// 503 once it has returned.
func TestConsumerIsLiveOnlyWhileRunRuns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess())
	held, release := f.holdNextJoin(t)
	defer release()
	c := newConsumer(t, f.config(t, consumer.HandlerFunc(func(context.Context, *consumer.Message) error { return nil })))
	live := c.Liveness()
	wantAnswer(t, "Liveness before Run", live, http.StatusServiceUnavailable, "Run has not started")

	stop := run(t, c)
	<-held
	wantAnswer(t, "Liveness while Run waits to join its group", live, http.StatusOK, "Run is running")
	release()
	waitAnswer(t, "the consumer in its group", c.Readiness(), http.StatusOK, func(a probeAnswer) bool { return a.InGroup })
	wantAnswer(t, "Liveness in the group", live, http.StatusOK, "Run is running")

	stop()
	wantAnswer(t, "Liveness after Run returned", live, http.StatusServiceUnavailable, "Run has returned")
}

// TestConsumerIsReadyOnlyInItsGroupOrBrieflyOut: Readiness answers 503
// before Run and while Run first joins the group; 200 once the consumer is
// in the group with its partitions; during a rebalance the broker holds,
// 200 while the consumer has been out of the group for less than
// ReadinessGrace and 503 past it (liveness staying 200), and 200 again once
// it is back in; under cooperative rebalancing the consumer stays in its
// group while it rebalances. After Run, 503.
func TestConsumerIsReadyOnlyInItsGroupOrBrieflyOut(t *testing.T) {
	t.Parallel()
	const partitions = 2
	for _, tc := range []struct {
		name     string
		strategy func() sarama.BalanceStrategy
		grace    time.Duration
		// inGroup: the consumer stays in its group while it rebalances.
		inGroup bool
		// pastBound: the rebalance outlasts grace, so readiness fails.
		pastBound bool
	}{
		{"eager, out within the bound", sarama.NewBalanceStrategyRange, time.Minute, false, false},
		{"eager, out past the bound", sarama.NewBalanceStrategyRange, 200 * time.Millisecond, false, true},
		{"cooperative, in the group while it rebalances", sarama.NewBalanceStrategyCooperativeSticky, 200 * time.Millisecond, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, partitions, testkit.InProcess())
			var handled atomic.Int32
			cfg := f.config(t, counting(&handled))
			cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{tc.strategy()}
			cfg.ReadinessGrace = tc.grace
			c := newConsumer(t, cfg)
			ready, live := c.Readiness(), c.Liveness()
			a := wantAnswer(t, "Readiness before Run", ready, http.StatusServiceUnavailable, "Run has not started")
			if a.Group != f.group || a.InGroup || a.Partitions != 0 || a.Status != "not_ready" {
				t.Errorf("Readiness before Run: %+v, want not_ready, group %s, not in it, no partition", a, f.group)
			}

			joining, releaseJoin := f.holdNextJoin(t)
			defer releaseJoin()
			stop := run(t, c)
			<-joining
			wantAnswer(t, "Readiness while Run first joins the group", ready, http.StatusServiceUnavailable, "joining the group")
			releaseJoin()
			waitAnswer(t, "the consumer ready in its group with both partitions", ready, http.StatusOK, func(a probeAnswer) bool {
				return a.InGroup && a.Partitions == partitions && a.Status == "ready"
			})
			f.produce(t, f.topic, record("k", "v"))
			testkit.WaitFor(t, 20*time.Second, "a record handled", func() bool { return handled.Load() == 1 })

			rejoining, releaseRejoin := f.holdNextJoin(t)
			defer releaseRejoin()
			f.rebalanceOnce(t)
			<-rejoining
			switch {
			case tc.inGroup:
				a := wantAnswer(t, "Readiness while a cooperative rebalance waits", ready, http.StatusOK, "in the group")
				if !a.InGroup || a.Partitions != partitions {
					t.Errorf("Readiness while a cooperative rebalance waits: %+v, want in the group with its %d partitions", a, partitions)
				}
			case tc.pastBound:
				waitAnswer(t, "Readiness to fail past the bound", ready, http.StatusServiceUnavailable, func(a probeAnswer) bool {
					return strings.Contains(a.Reason, "past the bound of 200ms") && !a.InGroup && a.Partitions == 0
				})
				wantAnswer(t, "Liveness out of the group past the bound", live, http.StatusOK, "Run is running")
			default:
				a := wantAnswer(t, "Readiness out of the group within the bound", ready, http.StatusOK, "within the bound of 1m0s")
				if a.InGroup || a.Partitions != 0 {
					t.Errorf("Readiness while the rejoin is held: %+v, want out of the group, no partition", a)
				}
			}
			releaseRejoin()
			waitAnswer(t, "the consumer back in its group", ready, http.StatusOK, func(a probeAnswer) bool {
				return a.InGroup && a.Partitions == partitions
			})

			stop()
			wantAnswer(t, "Readiness after Run returned", ready, http.StatusServiceUnavailable, "Run has returned")
		})
	}
}

// TestConsumerStaysLiveWhileKafkaIsDown: while no broker answers, the
// consumer leaves its group and Readiness fails once ReadinessGrace has
// passed, but Liveness stays 200 (a restart would not bring Kafka back);
// once Kafka answers again the consumer is back in its group and ready.
func TestConsumerStaysLiveWhileKafkaIsDown(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess()) // the test takes the broker down
	cfg := f.config(t, consumer.HandlerFunc(func(context.Context, *consumer.Message) error { return nil }))
	cfg.ReadinessGrace = 200 * time.Millisecond
	c := newConsumer(t, cfg)
	ready, live := c.Readiness(), c.Liveness()
	run(t, c)
	waitAnswer(t, "the consumer ready in its group", ready, http.StatusOK, func(a probeAnswer) bool { return a.InGroup && a.Partitions == 1 })

	var down atomic.Bool
	down.Store(true)
	f.k.Cluster.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		if !down.Load() {
			return nil, nil, false
		}
		f.k.Cluster.KeepControl()
		return nil, errors.New("broker down"), true // closes the connection
	})
	waitAnswer(t, "Readiness to fail with Kafka down", ready, http.StatusServiceUnavailable, func(a probeAnswer) bool {
		return strings.Contains(a.Reason, "past the bound") && !a.InGroup
	})
	wantAnswer(t, "Liveness with Kafka down", live, http.StatusOK, "Run is running")
	// Still down, and still out: Run keeps trying, and stays live.
	waitAnswer(t, "Readiness still failing", ready, http.StatusServiceUnavailable, func(a probeAnswer) bool { return !a.InGroup })
	wantAnswer(t, "Liveness with Kafka still down", live, http.StatusOK, "Run is running")

	down.Store(false)
	waitAnswer(t, "the consumer back in its group once Kafka answers", ready, http.StatusOK, func(a probeAnswer) bool {
		return a.InGroup && a.Partitions == 1
	})
	wantAnswer(t, "Liveness once Kafka is back", live, http.StatusOK, "Run is running")
}

// TestConsumerWithoutPartitionsIsReady: in a group with more members than
// its topic has partitions, the member left with none is in the group, and
// ready: it is a standby, and failing it would hold up a rollout for ever.
func TestConsumerWithoutPartitionsIsReady(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	nop := consumer.HandlerFunc(func(context.Context, *consumer.Message) error { return nil })
	a, b := newConsumer(t, f.config(t, nop)), newConsumer(t, f.config(t, nop))
	run(t, a)
	run(t, b)
	var answers [2]probeAnswer
	testkit.WaitFor(t, 30*time.Second, "one member with the partition and one without, both ready in the group", func() bool {
		for i, c := range []*consumer.Consumer{a, b} {
			code, ans := ask(t, c.Readiness())
			if code != http.StatusOK || !ans.InGroup {
				return false
			}
			answers[i] = ans
		}
		return answers[0].Partitions+answers[1].Partitions == 1
	})
	idle := answers[0]
	if idle.Partitions != 0 {
		idle = answers[1]
	}
	if idle.Status != "ready" || !strings.Contains(idle.Reason, "no partition to consume") {
		t.Errorf("the member without a partition answers %+v, want ready, saying it has no partition to consume", idle)
	}
}

// TestProbesAnswerGetAndHeadWithJSON: the probes answer GET with a JSON
// body, HEAD with the headers alone, both with Content-Type
// application/json and Cache-Control no-store, and any other method with
// 405 and an Allow header.
func TestProbesAnswerGetAndHeadWithJSON(t *testing.T) {
	t.Parallel()
	c, err := consumer.New(minimalConfig())
	if err != nil {
		t.Fatal(err)
	}
	testkit.CheckProbes(t, http.StatusServiceUnavailable, map[string]http.Handler{"/livez": c.Liveness(), "/readyz": c.Readiness()}, map[string]map[string]any{
		"/livez":  {"status": "not_live", "reason": "Run has not started"},
		"/readyz": {"status": "not_ready", "reason": "Run has not started", "group": "payouts", "in_group": false, "partitions": 0.0},
	})
}
