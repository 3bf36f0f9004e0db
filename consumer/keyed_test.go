package consumer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/testkit"
)

// TestKeyedWorkersKeepPerKeyOrder: with 8 workers per partition and random
// handler latencies, the messages of one key never overlap and arrive in
// offset order, while messages of different keys do run at once.
func TestKeyedWorkersKeepPerKeyOrder(t *testing.T) {
	t.Parallel()
	const keys, perKey, workers = 40, 25, 8
	f := newFixture(t, 2)
	var msgs []*sarama.ProducerMessage
	for n := range perKey {
		for k := range keys {
			msgs = append(msgs, record(fmt.Sprint("key-", k), fmt.Sprintf("key-%d/%d", k, n)))
		}
	}
	f.produce(t, f.topic, msgs...)

	var mu sync.Mutex
	busy := map[string]bool{}
	next := map[string]int{}
	running, peak, done := 0, 0, 0
	var problems []string
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		key, nStr, _ := strings.Cut(string(m.Value), "/")
		n, _ := strconv.Atoi(nStr)
		mu.Lock()
		if busy[key] {
			problems = append(problems, fmt.Sprintf("%s/%d overlaps another message of its key", key, n))
		}
		if n != next[key] {
			problems = append(problems, fmt.Sprintf("%s/%d handled when %d was next", key, n, next[key]))
		}
		busy[key] = true
		running++
		peak = max(peak, running)
		mu.Unlock()

		time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond) // the handler's own latency

		mu.Lock()
		busy[key] = false
		next[key] = n + 1
		running--
		done++
		mu.Unlock()
		return nil
	}))
	cfg.Workers = workers
	run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 30*time.Second, "every message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return done >= keys*perKey
	})
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems[:min(len(problems), 10)] {
		t.Error(p)
	}
	for k := range keys {
		if key := fmt.Sprint("key-", k); next[key] != perKey {
			t.Errorf("%s: %d messages handled, want %d", key, next[key], perKey)
		}
	}
	if peak < 2 {
		t.Errorf("at most %d message ran at once, want the %d workers of each partition to overlap", peak, workers)
	}
	t.Logf("peak concurrency %d over 2 partitions × %d workers", peak, workers)
}

// TestKeyedWorkersCommitBelowTheSlowest: while the first message of a
// partition is still being handled, later messages of other keys finish
// but no offset is marked or committed past the unfinished one.
func TestKeyedWorkersCommitBelowTheSlowest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess())
	commits := f.watchCommits(t)
	msgs := []*sarama.ProducerMessage{record("slow", "slow")}
	for i := range 20 {
		msgs = append(msgs, record(fmt.Sprint("k", i), fmt.Sprint("v", i)))
	}
	f.produce(t, f.topic, msgs...)
	release := make(chan struct{})
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if string(m.Value) == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}))
	metrics := &recorder{}
	cfg.Workers = 4
	cfg.Hooks = []consumer.Hook{metrics}
	run(t, newConsumer(t, cfg))
	// The slow message's worker queue fills up behind it, and then the
	// dispatch waits; the other workers get through what came before (the
	// keys go to workers by a fixed hash, so always the same ones).
	testkit.WaitFor(t, 10*time.Second, "5 fast messages handled", func() bool { return metrics.count(consumer.OutcomeHandled) >= 5 })
	if n := metrics.marks(); n != 0 {
		t.Errorf("%d offsets marked while offset 0 is unfinished, want none", n)
	}
	if got := commits.list(); len(got) != 0 {
		t.Errorf("commits %v while offset 0 is unfinished, want none", got)
	}
	close(release)
	testkit.WaitFor(t, 10*time.Second, "every offset committed", func() bool { return f.committed(t, 0) == int64(len(msgs)) })
}
