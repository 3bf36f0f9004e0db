package producer

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/record"
)

// idlePublisher is a record.Publisher the presence test never calls.
type idlePublisher struct{}

func (idlePublisher) Publish(context.Context, []*record.Record) []error { return nil }
func (idlePublisher) Close() error                                      { return nil }

// TestRelaysStartingTogetherDivideTheSharesAtOnce: relays that start
// within moments of each other see each other's slots within milliseconds
// (the first one keeps looking often while the slots change), so that
// every share has exactly one worker long before the second-long refresh
// that keeps the division once it holds; and when one relay stops, the
// others take its shares.
func TestRelaysStartingTogetherDivideTheSharesAtOnce(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	pg.Migrate(t)
	ctx, cancel := context.WithCancel(context.Background())
	workers := []int{2, 1, 1}
	relays := make([]*Relay, len(workers))
	stops := make([]context.CancelFunc, len(workers))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel() // before the wait
	connected := func(r *Relay) bool {
		r.presence.mu.Lock()
		defer r.presence.mu.Unlock()
		return r.presence.conn != nil
	}
	for i, w := range workers {
		r, err := NewRelay(pg.Pool, RelayConfig{Schema: pg.Schema, Publisher: idlePublisher{}, Workers: w})
		if err != nil {
			t.Fatal(err)
		}
		relays[i] = r
		var runCtx context.Context
		runCtx, stops[i] = context.WithCancel(ctx)
		wg.Go(func() { r.presence.run(runCtx) })
		if i == 0 {
			// The others start a moment later, once the first has read
			// the slots and seen only its own.
			testkit.WaitFor(t, 10*time.Second, "the first relay holding its slots", func() bool { return connected(r) })
		}
	}
	// divided reports whether the workers of the running relays claim
	// every share once.
	divided := func(running []*Relay) bool {
		var all []int32
		for _, r := range running {
			for w := range r.cfg.Workers {
				all = append(all, r.presence.shares(w)...)
			}
		}
		slices.Sort(all)
		if len(all) != shareCount {
			return false
		}
		for i, s := range all {
			if s != int32(i) {
				return false
			}
		}
		return true
	}
	testkit.WaitFor(t, 10*time.Second, "every relay holding its slots", func() bool { return !slices.ContainsFunc(relays, func(r *Relay) bool { return !connected(r) }) })
	started := time.Now()
	testkit.WaitFor(t, 10*time.Second, "the shares divided among 4 workers", func() bool { return divided(relays) })
	if took := time.Since(started); took >= presenceRefresh/2 {
		t.Errorf("the relays divided the shares %v after they all held their slots, want well within the refresh of %v", took, presenceRefresh)
	}
	stops[0]()
	testkit.WaitFor(t, 10*time.Second, "the shares divided among the 2 relays left", func() bool { return divided(relays[1:]) })
}
