package consumer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/testkit"
)

// cooperativeConfig is f's config rebalancing cooperatively.
func cooperativeConfig(t *testing.T, f *fixture, h consumer.Handler) consumer.Config {
	cfg := f.config(t, h)
	cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	return cfg
}

// TestRevokedPartitionStopsItsWait: under cooperative rebalancing, a
// partition revoked while its message waits (a retry backoff of an hour,
// or a breaker open for an hour) stops the wait at once and is released,
// and the new owner handles the message; the partition the member keeps
// is not released (its session goes on) and handles the records produced
// after the rebalance. The second member subscribes to the waiting
// partition's topic only, so the rebalance must move that one and keep
// the other.
func TestRevokedPartitionStopsItsWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fail func() error
	}{
		{"retry backoff", func() error { return errors.New("503: try again") }},
		{"open breaker", func() error {
			return &consumer.BreakerOpenError{Breaker: "ledger", RetryAt: time.Now().Add(time.Hour), Err: errors.New("ledger down")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, 1)
			kept := f.k.Topic(t, 1)
			var (
				waiting  = make(chan struct{})
				once     sync.Once
				handledA counter
				handledB counter
			)
			cfgA := cooperativeConfig(t, f, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
				if m.Topic == f.topic {
					once.Do(func() { close(waiting) })
					return tc.fail()
				}
				handledA.add(string(m.Value))
				return nil
			}))
			cfgA.Topics = []string{f.topic, kept}
			cfgA.Backoff = backoff.Backoff{Base: time.Hour, Max: time.Hour}
			var releasesA recorder
			cfgA.Hooks = []consumer.Hook{&releasesA}
			run(t, newConsumer(t, cfgA))
			f.produce(t, kept, record("k", "before"))
			f.produce(t, f.topic, record("w", "wait"))
			testkit.WaitFor(t, 20*time.Second, "the first member to wait on the message and handle the other topic", func() bool {
				select {
				case <-waiting:
					return handledA.get("before") == 1
				default:
					return false
				}
			})

			cfgB := cooperativeConfig(t, f, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
				handledB.add(string(m.Value))
				return nil
			}))
			run(t, newConsumer(t, cfgB))
			testkit.WaitFor(t, 20*time.Second, "the waiting partition released by the first member and its message handled by the second", func() bool {
				return releasesA.releasesOf(f.topic, 0) == 1 && handledB.get("wait") == 1
			})
			f.produce(t, kept, record("k", "after"))
			testkit.WaitFor(t, 20*time.Second, "the kept partition to handle a record produced after the rebalance", func() bool {
				return handledA.get("after") == 1
			})
			if n := releasesA.releasesOf(kept, 0); n != 0 {
				t.Errorf("the first member released the partition it kept %d times, want 0: the rebalance ended its whole session", n)
			}
			testkit.WaitFor(t, 20*time.Second, "the moved message's offset committed", func() bool { return f.committed(t, 0) == 1 })
		})
	}
}
