package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/goleak"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/testkit"
)

// TestShutdownFinishesInFlightHandlers: when Run's context ends, the
// handler in flight finishes and its offset is committed; the message
// waiting for its retry is not (its wait stops at once).
func TestShutdownFinishesInFlightHandlers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	f.produceTo(t, 0, &sarama.ProducerMessage{Value: sarama.StringEncoder("in-flight")})
	f.produceTo(t, 1, &sarama.ProducerMessage{Value: sarama.StringEncoder("waiting-for-retry")})
	started := make(chan struct{})
	release := make(chan struct{})
	var retried atomic.Bool
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		switch string(m.Value) {
		case "in-flight":
			close(started)
			<-release
			return nil
		default:
			if m.Attempt > 1 {
				retried.Store(true)
			}
			return errors.New("try again in an hour")
		}
	}))
	cfg.Backoff = backoff.Backoff{Base: time.Hour, Max: time.Hour}
	cfg.ShutdownTimeout = time.Minute
	stop := run(t, newConsumer(t, cfg))
	<-started
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	close(release) // while Run is stopping (or about to)
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of the handler finishing; the retry wait must stop at once")
	}
	if got := f.committed(t, 0); got != 1 {
		t.Errorf("partition 0 committed %d, want 1: the in-flight message finished during shutdown", got)
	}
	if got := f.committed(t, 1); got > 0 || retried.Load() {
		t.Errorf("partition 1 committed %d (retried %t), want nothing: the message was still waiting for its retry", got, retried.Load())
	}
}

// TestRunLeavesNoGoroutines: once Run returns, every goroutine it started
// (Sarama's, the partitions', their revocation feeds under cooperative
// rebalancing, the keyed workers', the dead-letter producer's) is gone.
func TestRunLeavesNoGoroutines(t *testing.T) {
	for _, strategy := range []func() sarama.BalanceStrategy{sarama.NewBalanceStrategyRange, sarama.NewBalanceStrategyCooperativeSticky} {
		t.Run(strategy().Name(), func(t *testing.T) {
			f := newFixture(t, 2, testkit.InProcess())
			f.produce(t, f.topic, record("a", "ok"), record("b", "poison"), record("c", "ok-2"))
			before := goleak.IgnoreCurrent()

			cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
				if string(m.Value) == "poison" {
					return consumer.Permanent(errors.New("bad"))
				}
				return nil
			}))
			cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{strategy()}
			cfg.Workers = 3
			cfg.Hooks = []consumer.Hook{&recorder{}}
			cfg.ProgressInterval = 10 * time.Millisecond // its timers and reads stop with the partitions
			stop := run(t, newConsumer(t, cfg))
			testkit.WaitFor(t, 10*time.Second, "every message settled", func() bool {
				return f.committed(t, 0)+f.committed(t, 1) == 3
			})
			stop()
			// kfake serves the connections the test's own clients opened.
			goleak.VerifyNone(t, append(testkit.KfakeConnections(), before)...)
		})
	}
}

// TestRebalanceLosesNothing: while messages flow, a second member joins
// and then the first one leaves; every message is handled at least once and
// every offset ends up committed.
func TestRebalanceLosesNothing(t *testing.T) {
	t.Parallel()
	const total, chunk, partitions = 2000, 50, 4
	f := newFixture(t, partitions)
	var handled counter
	var byA, byB atomic.Int64
	handler := func(member *atomic.Int64) consumer.Handler {
		return consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
			member.Add(1)
			handled.add(m.ID)
			return nil
		})
	}
	var metricsA recorder
	cfgA := f.config(t, handler(&byA))
	cfgA.Hooks = []consumer.Hook{&metricsA}
	stopA := run(t, newConsumer(t, cfgA))

	produced := make(chan error, 1)
	go func() {
		p, err := sarama.NewSyncProducer(f.k.Brokers, f.k.Config())
		if err != nil {
			produced <- err
			return
		}
		defer p.Close()
		for i := 0; i < total; i += chunk {
			// Keep a backlog of about one chunk, so messages flow through
			// both rebalances; and hold the second half back until the
			// first member gave partitions up to the second, or it could
			// handle everything before the second has any.
			for deadline := time.Now().Add(20 * time.Second); (handled.len() < i-chunk || i >= total/2 && metricsA.releases() == 0) &&
				time.Now().Before(deadline); {
				time.Sleep(time.Millisecond)
			}
			var msgs []*sarama.ProducerMessage
			for n := i; n < i+chunk; n++ {
				m := record(fmt.Sprint("key-", n%97), fmt.Sprint(n))
				m.Topic = f.topic
				msgs = append(msgs, m)
			}
			if err := p.SendMessages(msgs); err != nil {
				produced <- err
				return
			}
		}
		produced <- nil
	}()

	testkit.WaitFor(t, 20*time.Second, "a quarter handled by the first member", func() bool { return handled.len() >= total/4 })
	run(t, newConsumer(t, f.config(t, handler(&byB))))
	testkit.WaitFor(t, 20*time.Second, "the second member to take part", func() bool { return byB.Load() > 0 })
	testkit.WaitFor(t, 20*time.Second, "half handled", func() bool { return handled.len() >= total/2 })
	stopA()
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "every message handled", func() bool { return handled.len() == total })
	testkit.WaitFor(t, 30*time.Second, "every offset committed", func() bool {
		var sum int64
		for p := range int32(partitions) {
			sum += max(f.committed(t, p), 0)
		}
		return sum == total
	})
	t.Logf("first member handled %d, second %d, for %d messages", byA.Load(), byB.Load(), total)
}

// TestRunWithRetryAndDedupeLeavesNoGoroutines: the same, with retry
// topics, key order and dedupe on (their writes, marks and waits all end).
func TestRunWithRetryAndDedupeLeavesNoGoroutines(t *testing.T) {
	f := newFixture(t, 2, testkit.InProcess())
	r := testkit.NewRedis(t)
	order := f.keyOrder(t, r)
	var seen calls
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		seen.add(m)
		switch {
		case string(m.Value) == "bad":
			return consumer.Permanent(errors.New("bad"))
		case string(m.Value) == "flaky" && m.RetryRound == 0:
			return errors.New("503")
		}
		return nil
	}))
	f.withRetry(t, &cfg, 10*time.Millisecond)
	cfg.KeyOrder = order
	cfg.Dedupe = consumer.DedupeConfig{Store: f.redisDedupe(t, r.Client, r.Prefix), Lease: 10 * time.Second}
	cfg.Workers = 3
	f.produce(t, f.topic, record("a", "ok"), record("b", "bad"), record("c", "flaky"), record("c", "after"))
	before := goleak.IgnoreCurrent()
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "every message settled", func() bool {
		return f.committed(t, 0)+f.committed(t, 1) == 4 && seen.count("flaky") == 2 && seen.count("after") == 1
	})
	stop()
	goleak.VerifyNone(t, append(testkit.KfakeConnections(), before)...)
}
