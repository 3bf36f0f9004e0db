package consumer_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/handled"
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
	retry := func() error { return errors.New("503: try again") }
	breaker := func() error {
		return &consumer.BreakerOpenError{Breaker: "ledger", RetryAt: time.Now().Add(time.Hour), Err: errors.New("ledger down")}
	}
	for _, tc := range []struct {
		name    string
		fail    func() error
		workers int
	}{
		{"retry backoff", retry, 1},
		{"open breaker", breaker, 1},
		{"retry backoff, keyed workers", retry, 4},
		{"open breaker, keyed workers", breaker, 4},
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
			cfgA.Workers = tc.workers
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

// TestCoordinatorWaitsDoNotStallFetching: while the group coordinator
// holds a request of the group (here a heartbeat, as it holds a JoinGroup
// until every member has joined), the partitions go on being fetched and
// handled: the group's requests go over connections of their own, not
// behind the fetches' (a broker answers a connection's requests in order).
func TestCoordinatorWaitsDoNotStallFetching(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess())
	var handled counter
	run(t, newConsumer(t, f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		handled.add(string(m.Value))
		return nil
	}))))
	f.produceTo(t, 0, record("k", "before"))
	testkit.WaitFor(t, 20*time.Second, "the first record handled", func() bool { return handled.get("before") == 1 })

	held, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	var holding atomic.Bool
	f.k.Cluster.ControlKey(int16(kmsg.Heartbeat), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.k.Cluster.KeepControl()
		if req.(*kmsg.HeartbeatRequest).Group != f.group || !holding.CompareAndSwap(false, true) {
			return nil, nil, false // hold one heartbeat of the group
		}
		f.k.Cluster.SleepControl(func() {
			close(held)
			select { // within the session timeout (10s)
			case <-release:
			case <-time.After(8 * time.Second):
			}
		})
		return nil, nil, false
	})
	<-held
	f.produceTo(t, 0, record("k", "during"))
	testkit.WaitFor(t, 5*time.Second, "a record produced while the coordinator holds a heartbeat handled", func() bool { return handled.get("during") == 1 })
}

// TestScaleRunLosesNothing: 24 partitions, a group of 2 members scaled to
// 4 and back to 2 while a producer writes steadily, once rebalancing
// eagerly and once cooperatively: every record is handled at least once
// and every offset committed. It logs, per change of the group, the
// longest stall (gap between handled records) of a partition that kept its
// owner and of one that moved, and the duplicates (run it with -v to read
// them; the performance guide's figures come from it).
func TestScaleRunLosesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		strategy func() sarama.BalanceStrategy
	}{
		{"eager", sarama.NewBalanceStrategySticky},
		{"cooperative", sarama.NewBalanceStrategyCooperativeSticky},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const partitions = 24
			f := newFixture(t, partitions)
			var log handled.Log
			member := func(name string) func() {
				cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
					log.Add(name, m.Partition, m.Offset)
					return nil
				}))
				cfg.Sarama.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{tc.strategy()}
				return run(t, newConsumer(t, cfg))
			}
			member("a")
			member("b")
			produced := produceSteadily(t, f, partitions)
			// Each phase lasts until every member of the group handled
			// records since it began, and a few hundred more were handled.
			phase := func(what string, members ...string) {
				from := time.Now()
				testkit.WaitFor(t, 60*time.Second, what+": every member handling", func() bool { return log.HandledSince(from, members...) })
				n := log.Total()
				testkit.WaitFor(t, 60*time.Second, what, func() bool { return log.Total() >= n+600 })
			}
			phase("the group of 2 to handle records", "a", "b")
			steadyFrom := time.Now()
			phase("the group of 2 to go on", "a", "b")
			changes := []time.Time{time.Now()}
			stopC, stopD := member("c"), member("d")
			phase("the group of 4 to handle records", "a", "b", "c", "d")
			changes = append(changes, time.Now())
			stopC()
			stopD()
			phase("the group of 2 again to handle records", "a", "b")
			end := time.Now()
			last := produced()
			testkit.WaitFor(t, 60*time.Second, "every record handled and committed", func() bool {
				if log.Count(last).Lost > 0 {
					return false
				}
				for p := range int32(partitions) {
					if f.committed(t, p) != last[p]+1 {
						return false
					}
				}
				return true
			})
			t.Logf("%s, before any change: longest gap between handled records of a partition %v", tc.name, log.Stalls(steadyFrom, changes[0]).Kept.Round(time.Millisecond))
			bounds := append(changes, end)
			for i := range changes {
				s := log.Stalls(bounds[i], bounds[i+1])
				t.Logf("%s, change %d (%s): longest stall of the %d partitions that kept their owner %v, of the %d that moved %v",
					tc.name, i+1, []string{"2 to 4 members", "4 to 2 members"}[i], s.KeptPartitions, s.Kept.Round(time.Millisecond), s.MovedPartitions, s.Moved.Round(time.Millisecond))
			}
			c := log.Count(last)
			t.Logf("%s: %d records, lost %d, handled twice or more %d", tc.name, c.Records, c.Lost, c.Duplicates)
		})
	}
}

// produceSteadily writes a record to each partition of f's topic in turn,
// one every millisecond, until the returned function is called; that
// returns the last offset written to each partition.
func produceSteadily(t *testing.T, f *fixture, partitions int32) (stop func() []int64) {
	t.Helper()
	cfg := f.k.Config()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	p, err := sarama.NewSyncProducer(f.k.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	quit, done := make(chan struct{}), make(chan error, 1)
	last := make([]int64, partitions)
	go func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-quit:
				done <- nil
				return
			case <-tick.C:
			}
			partition := int32(n) % partitions
			_, offset, err := p.SendMessage(&sarama.ProducerMessage{Topic: f.topic, Partition: partition, Value: sarama.StringEncoder("steady")})
			if err != nil {
				done <- err
				return
			}
			last[partition] = offset
		}
	}()
	var once sync.Once
	stop = func() []int64 {
		once.Do(func() {
			close(quit)
			if err := <-done; err != nil {
				t.Errorf("producing: %v", err)
			}
			if err := p.Close(); err != nil {
				t.Errorf("closing the producer: %v", err)
			}
		})
		return last
	}
	t.Cleanup(func() { stop() })
	return stop
}
