package consumer_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/testkit"
)

func TestTransientFailureSucceedsOnAttempt3(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess())
	commits := f.watchCommits(t)
	f.produce(t, f.topic, record("k", "v1"))

	var mu sync.Mutex
	var attempts []int
	c := newConsumer(t, f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, m.Attempt)
		if m.Attempt < 3 {
			return errors.New("psp: 503")
		}
		return nil
	})))
	stop := run(t, c)
	testkit.WaitFor(t, 10*time.Second, "offset 1 committed", func() bool { return f.committed(t, 0) == 1 })
	stop()

	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(attempts, []int{1, 2, 3}) {
		t.Errorf("attempts %v, want [1 2 3]", attempts)
	}
	if got := commits.list(); !slices.Equal(got, []int64{1}) {
		t.Errorf("commits of partition 0: %v, want offset 1 committed once", got)
	}
	if n := len(f.readAll(t, f.dlq)); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
}
