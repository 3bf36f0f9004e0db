package dlqindex_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/cmd/courier/internal/dlqindex"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
)

// holdFetches makes the in-process broker hold every fetch from an offset
// at or past from until release is called (deferred by the caller).
// held counts the fetches held.
func (f *fixture) holdFetches(t *testing.T, from int64) (held *atomic.Int32, release func()) {
	t.Helper()
	held = &atomic.Int32{}
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	f.k.Cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.k.Cluster.KeepControl()
		for _, topic := range req.(*kmsg.FetchRequest).Topics {
			for _, p := range topic.Partitions {
				if p.FetchOffset >= from {
					held.Add(1)
					f.k.Cluster.SleepControl(func() { <-released })
					return nil, nil, false
				}
			}
		}
		return nil, nil, false
	})
	return held, release
}

// countListOffsets counts the ListOffsets requests the broker gets from now
// on: each Refresh asks for the oldest and newest offset of every
// partition.
func (f *fixture) countListOffsets() *atomic.Int32 {
	n := &atomic.Int32{}
	f.k.Cluster.ControlKey(int16(kmsg.ListOffsets), func(kmsg.Request) (kmsg.Response, error, bool) {
		f.k.Cluster.KeepControl()
		n.Add(1)
		return nil, nil, false
	})
	return n
}

// returned waits for the result of a call running in another goroutine.
func returned(t *testing.T, what string, result <-chan error) error {
	t.Helper()
	select {
	case err := <-result:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("%s has not returned after 10s", what)
		return nil
	}
}

func TestRefreshReturnsWhenItsContextEndsAndKeepsWhatItRead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess())
	c := newCorpus(1)
	for range 3 { // three produce requests: three record batches of 10
		f.produce(t, c.next(t, 10))
	}
	cfg := f.k.Config()
	cfg.Consumer.Fetch.Default = 1 // a batch a fetch
	// Sarama fetches again once the reader took every record of the last
	// fetch (and waits a minute for it), so the fetch of the second batch
	// says the index took the first.
	cfg.ChannelBufferSize = 0
	cfg.Consumer.MaxProcessingTime = time.Minute
	client, err := sarama.NewClient(f.k.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	x := dlqindex.New(client, f.topic)

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if err := x.Refresh(ended); !errors.Is(err, context.Canceled) || x.Len() != 0 {
		t.Fatalf("Refresh with an ended context: %v, Len %d; want context.Canceled, 0", err, x.Len())
	}

	held, release := f.holdFetches(t, 10) // the fetch of the second batch
	defer release()
	ctx, cancel := context.WithCancel(context.Background())
	result := make(chan error, 1)
	go func() { result <- x.Refresh(ctx) }()
	testkit.WaitFor(t, 10*time.Second, "the fetch of the second batch", func() bool { return held.Load() > 0 })
	cancel()
	if err := returned(t, "Refresh after its context ended", result); !errors.Is(err, context.Canceled) {
		t.Fatalf("Refresh whose context ended while the broker held a fetch: %v, want context.Canceled", err)
	}
	if x.Len() != 10 || !x.RefreshedAt().IsZero() {
		t.Errorf("after the cancelled Refresh: Len %d, RefreshedAt %v; want the first batch's 10, and no complete Refresh", x.Len(), x.RefreshedAt())
	}

	release()
	before := time.Now()
	f.refresh(t, x)
	if got, want := listAll(t, x, dlq.Filter{}, 100), newestFirst(f.scanned(t, dlq.Filter{})); len(got) != 30 || !reflect.DeepEqual(got, want) {
		t.Errorf("the next Refresh left %d records, want each of the 30 once", len(got))
	}
	if x.RefreshedAt().Before(before.Add(-time.Second)) || x.RefreshedAt().After(time.Now()) {
		t.Errorf("RefreshedAt = %v, want when the last Refresh began", x.RefreshedAt())
	}
}

// watchedContext tells when Done is first called: a Refresh waiting for
// another's read waits on it.
type watchedContext struct {
	context.Context
	once  sync.Once
	asked chan struct{}
}

func watched(ctx context.Context) *watchedContext {
	return &watchedContext{Context: ctx, asked: make(chan struct{})}
}

func (c *watchedContext) Done() <-chan struct{} {
	c.once.Do(func() { close(c.asked) })
	return c.Context.Done()
}

// startRefreshes starts n Refresh calls of x and returns their results once
// each waits.
func startRefreshes(t *testing.T, x *dlqindex.Index, n int) <-chan error {
	t.Helper()
	results := make(chan error, n)
	for range n {
		ctx := watched(context.Background())
		go func() { results <- x.Refresh(ctx) }()
		select {
		case <-ctx.asked:
		case <-time.After(10 * time.Second):
			t.Fatal("a Refresh did not wait within 10s")
		}
	}
	return results
}

func TestConcurrentRefreshesReadOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2, testkit.InProcess())
	c := newCorpus(2)
	f.produce(t, c.next(t, 20))
	listOffsets := f.countListOffsets()
	f.refreshed(t)
	perRead := listOffsets.Load()

	x := dlqindex.New(f.client, f.topic)
	held, release := f.holdFetches(t, 0)
	defer release()
	listOffsets.Store(0)
	first := make(chan error, 1)
	go func() { first <- x.Refresh(context.Background()) }()
	testkit.WaitFor(t, 10*time.Second, "the first Refresh's fetch", func() bool { return held.Load() > 0 })
	others := startRefreshes(t, x, 4)
	release()
	for i := range 5 {
		var err error
		if i == 0 {
			err = returned(t, "the first Refresh", first)
		} else {
			err = returned(t, "a waiting Refresh", others)
		}
		if err != nil {
			t.Fatalf("Refresh %d: %v", i, err)
		}
	}
	if x.Len() != 20 || listOffsets.Load() != perRead {
		t.Errorf("5 concurrent Refresh calls: Len %d and %d ListOffsets requests; want 20 and the %d of one read",
			x.Len(), listOffsets.Load(), perRead)
	}
}

func TestAWaitingRefreshReadsWhenTheReadingOnesContextEnds(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess())
	c := newCorpus(1)
	f.produce(t, c.next(t, 20))
	x := dlqindex.New(f.client, f.topic)
	held, release := f.holdFetches(t, 0)
	defer release()

	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- x.Refresh(ctx) }()
	testkit.WaitFor(t, 10*time.Second, "the first Refresh's fetch", func() bool { return held.Load() > 0 })
	others := startRefreshes(t, x, 2)
	cancel()
	if err := returned(t, "the cancelled Refresh", first); !errors.Is(err, context.Canceled) {
		t.Fatalf("the Refresh whose context ended: %v, want context.Canceled", err)
	}
	release()
	for range 2 {
		if err := returned(t, "a waiting Refresh", others); err != nil {
			t.Errorf("a Refresh waiting for a cancelled one: %v, want it to read in its place", err)
		}
	}
	if x.Len() != 20 {
		t.Errorf("Len = %d, want 20", x.Len())
	}
}

func TestRefreshBesideListAndSummary(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3)
	c := newCorpus(3)
	x := dlqindex.New(f.client, f.topic)
	const rounds, per = 15, 20

	var stop atomic.Bool
	var readers sync.WaitGroup
	for range 2 {
		readers.Go(func() {
			for !stop.Load() {
				s := x.Summary(dlq.Filter{})
				byKind := 0
				for _, k := range s.ByKind {
					byKind += k.N
				}
				if byKind+s.Corrupt != s.Total {
					t.Errorf("a Summary counts %d by kind and %d corrupt of %d records", byKind, s.Corrupt, s.Total)
					return
				}
				var seen []dlqindex.Item
				var after dlqindex.Cursor
				for {
					items, next := x.List(dlq.Filter{ErrorContains: "e"}, after, 7)
					seen = append(seen, items...)
					if next.IsZero() {
						break
					}
					after = next
				}
				if !slices.IsSortedFunc(seen, func(a, b dlqindex.Item) int { return b.Timestamp.Compare(a.Timestamp) }) {
					t.Error("pages read while Refresh ran are not newest first")
					return
				}
			}
		})
	}
	for range rounds {
		f.produce(t, c.next(t, per))
		var refreshes sync.WaitGroup
		for range 2 {
			refreshes.Go(func() {
				if err := x.Refresh(context.Background()); err != nil {
					t.Errorf("Refresh: %v", err)
				}
			})
		}
		refreshes.Wait()
	}
	stop.Store(true)
	readers.Wait()
	if x.Len() != rounds*per {
		t.Errorf("Len = %d, want %d", x.Len(), rounds*per)
	}
}
