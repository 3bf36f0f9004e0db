package consumer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/testkit"
)

// progress is a hook that keeps the last lag and oldest in-flight age
// reported of each partition, and forgets them on release.
type progress struct {
	mu  sync.Mutex
	lag map[int32]int64
	age map[int32]time.Duration
}

func (p *progress) Lag(_ string, partition int32, lag int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lag == nil {
		p.lag = map[int32]int64{}
	}
	p.lag[partition] = lag
}

func (p *progress) OldestInFlight(_ string, partition int32, age time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.age == nil {
		p.age = map[int32]time.Duration{}
	}
	p.age[partition] = age
}

func (p *progress) Released(_ string, partition int32) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.lag, partition)
	delete(p.age, partition)
}

// of returns the last lag and age of partition, and whether either was
// reported.
func (p *progress) of(partition int32) (lag int64, age time.Duration, reported bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	lag, hasLag := p.lag[partition]
	age, hasAge := p.age[partition]
	return lag, age, hasLag || hasAge
}

// TestStuckHandlerRaisesLagAndAge: while the handler hangs on the first
// message, and nothing is marked, the records produced behind it raise the
// partition's lag to their count, read from the broker's high-water mark,
// and the age of the oldest message in flight grows; once the handler
// returns, both fall back to 0. Before the progress timer, the lag moved
// only when an offset was marked, so it stayed unreported here.
func TestStuckHandlerRaisesLagAndAge(t *testing.T) {
	t.Parallel()
	const behind = 20
	f := newFixture(t, 1)
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if string(m.Value) != "hangs" {
			return nil
		}
		once.Do(func() { close(entered) })
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	cfg.AttemptTimeout = time.Minute // the attempt hangs, not times out
	cfg.ProgressInterval = 50 * time.Millisecond
	// A small fetch buffer, as in production once the partition's channel
	// is full: Sarama fetches nothing more, and the claim's high-water
	// mark stops moving.
	cfg.Sarama.ChannelBufferSize = 1
	hook := &progress{}
	cfg.Hooks = []consumer.Hook{hook}
	f.produceTo(t, 0, record("a", "hangs"))
	run(t, newConsumer(t, cfg))
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler was not called within 10s")
	}
	var msgs []*sarama.ProducerMessage
	for i := range behind {
		msgs = append(msgs, record(fmt.Sprint("k", i), fmt.Sprint("fine-", i)))
	}
	f.produceTo(t, 0, msgs...)

	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("a lag of %d while the handler hangs", behind+1), func() bool {
		lag, _, _ := hook.of(0)
		return lag == behind+1
	})
	_, first, _ := hook.of(0)
	testkit.WaitFor(t, 10*time.Second, "the oldest in-flight age rising past 300ms", func() bool {
		_, age, _ := hook.of(0)
		return age > first && age >= 300*time.Millisecond
	})

	close(release)
	testkit.WaitFor(t, 10*time.Second, "lag 0 and age 0 once the handler returned", func() bool {
		lag, age, reported := hook.of(0)
		return reported && lag == 0 && age == 0
	})
}
