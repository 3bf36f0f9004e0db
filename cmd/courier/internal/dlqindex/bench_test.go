package dlqindex_test

import (
	"context"
	"maps"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/cmd/courier/internal/dlqindex"
	"github.com/courierkit/courier/dlq"
)

// BenchmarkIndex100k measures the index of a dead-letter topic of 100,000
// realistic dead letters on 3 partitions (newCorpus: six original topics,
// both kinds, 30 error texts, binary and missing keys, raw mode now and
// then, 20 corrupt records) in the in-process broker: the first Refresh
// (and the heap the index then holds), a Refresh reading 100 new records,
// one finding none, and one finding none right after a read (with
// Sarama's default Consumer.MaxWaitTime of 500 ms, and with 20 ms; see
// Refresh), Summary with no filter and with each filter of the tests, and List's
// first page and a page 90,000 records deep. Each reports the median of
// its runs as ms-median. Run it with
//
//	go test -run '^$' -bench Index100k -benchtime 10x ./cmd/courier/internal/dlqindex/
func BenchmarkIndex100k(b *testing.B) {
	const records = 100_000
	f := newFixture(b, 3)
	c := newCorpus(3)
	f.produce(b, c.next(b, records))
	x := dlqindex.New(f.client, f.topic)
	if err := x.Refresh(context.Background()); err != nil {
		b.Fatal(err)
	}
	if x.Len() != records {
		b.Fatalf("the index holds %d records, want %d", x.Len(), records)
	}

	b.Run("refresh/first", func(b *testing.B) {
		medianOf(b, nil, func() {
			if err := dlqindex.New(f.client, f.topic).Refresh(context.Background()); err != nil {
				b.Fatal(err)
			}
		})
		before := heapInUse()
		y := dlqindex.New(f.client, f.topic)
		if err := y.Refresh(context.Background()); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(heapInUse()-before)/(1<<20), "MB-heap")
		runtime.KeepAlive(y)
	})
	refresh := func(b *testing.B, x *dlqindex.Index) func() {
		return func() {
			if err := x.Refresh(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("refresh/100-new", func(b *testing.B) {
		medianOf(b, func() { f.produce(b, c.next(b, 100)) }, refresh(b, x))
	})
	b.Run("refresh/nothing-new", func(b *testing.B) {
		refresh(b, x)()
		medianOf(b, nil, refresh(b, x))
	})
	b.Run("refresh/nothing-new/after-a-read", func(b *testing.B) {
		medianOf(b, func() { f.produce(b, c.next(b, 100)); refresh(b, x)() }, refresh(b, x))
	})
	b.Run("refresh/nothing-new/after-a-read/max-wait-20ms", func(b *testing.B) {
		cfg := f.k.Config()
		cfg.Consumer.MaxWaitTime = 20 * time.Millisecond
		client, err := sarama.NewClient(f.k.Brokers, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer client.Close()
		y := dlqindex.New(client, f.topic)
		refresh(b, y)()
		medianOf(b, func() { f.produce(b, c.next(b, 100)); refresh(b, y)() }, refresh(b, y))
	})
	all := filters(c.start)
	for _, name := range slices.Sorted(maps.Keys(all)) {
		b.Run("summary/"+name, func(b *testing.B) {
			medianOf(b, nil, func() { x.Summary(all[name]) })
		})
	}
	b.Run("list/first-page", func(b *testing.B) {
		medianOf(b, nil, func() { x.List(dlq.Filter{}, dlqindex.Cursor{}, dlqindex.DefaultLimit) })
	})
	b.Run("list/first-page/error-contains", func(b *testing.B) {
		medianOf(b, nil, func() { x.List(all["error contains"], dlqindex.Cursor{}, dlqindex.DefaultLimit) })
	})
	var deep dlqindex.Cursor
	for range 90 {
		_, deep = x.List(dlq.Filter{}, deep, 1000)
	}
	b.Run("list/deep-page", func(b *testing.B) {
		medianOf(b, nil, func() { x.List(dlq.Filter{}, deep, dlqindex.DefaultLimit) })
	})
	b.Run("list/deep-page/no-match-after", func(b *testing.B) {
		medianOf(b, nil, func() { x.List(all["no match"], deep, dlqindex.DefaultLimit) })
	})
}

// medianOf runs op b.N times, each after prepare (when not nil, outside
// the timer), and reports the median run as ms-median.
func medianOf(b *testing.B, prepare, op func()) {
	b.Helper()
	var runs []time.Duration
	for b.Loop() {
		if prepare != nil {
			b.StopTimer()
			prepare()
			b.StartTimer()
		}
		start := time.Now()
		op()
		runs = append(runs, time.Since(start))
	}
	slices.Sort(runs)
	b.ReportMetric(float64(runs[len(runs)/2])/float64(time.Millisecond), "ms-median")
}

// heapInUse returns the bytes of live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
