package producer_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/internal/delaylink"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// BenchmarkRelayBesideAHeldPartition measures what a held partition costs
// its neighbour: each op is one RunOnce of a batch of 500 events of
// partition 1 (alone), and beside them 20 new events of partition 0 that
// the broker takes (beside-healthy) or refuses with NOT_ENOUGH_REPLICAS
// for the whole run (beside-held), the relay on Sarama's default retries
// (3, 100 ms). Partition 0's events have new keys, so that none waits
// behind its key, or, in the cases named hot-keys, 5 keys, so that nearly
// every one waits behind an earlier one of its key, as the events of an
// account or an order do. beside-an-old-hold is beside-held with the hold
// at its longest step (30 s) from the first, as a hold a minute old is.
// The case alone-while-4000-wait is alone with 4,000 events of other keys
// waiting for a NotBefore an hour ahead: what the per-key order check
// costs once anything waits. The cases under network/ run on the network
// profile: the relay reaches PostgreSQL through a link adding 1 ms each
// way, and the broker answers each produce request 5 ms late, as an
// acks=all write to replicas in other zones is. Each case first runs 3
// batches apart from the figures: the relay connects, and beside a held
// partition the first batch waits for Sarama's retries before the hold
// begins (first-batch-ms). It reports partition 1's events per second, and how
// many of partition 0's events a batch settled (held-settled/batch: the 20
// new ones, plus those tried again each time the hold is up), and how long
// a batch took to claim (claim-ms, until the relay's ClaimedHook heard of
// it) and then to publish and settle (publish-settle-ms). Run it with
//
//	go test -run '^$' -bench RelayBesideAHeldPartition -benchtime 400x ./producer/
func BenchmarkRelayBesideAHeldPartition(b *testing.B) {
	for _, c := range []struct {
		name         string
		beside, held bool
		hotKeys      int // partition 0's keys; 0: a new one per event
		waiting      int
		step         time.Duration // of the relay's Backoff, from its first; 0: the default
		network      bool
	}{
		{name: "alone"}, {name: "beside-healthy", beside: true}, {name: "beside-held", beside: true, held: true},
		{name: "beside-an-old-hold", beside: true, held: true, step: producer.DefaultBackoffMax},
		{name: "beside-held-hot-keys", beside: true, held: true, hotKeys: 5},
		{name: "beside-an-old-hold-hot-keys", beside: true, held: true, hotKeys: 5, step: producer.DefaultBackoffMax},
		{name: "alone-while-4000-wait", waiting: 4000},
		{name: "network/alone", network: true}, {name: "network/beside-held", beside: true, held: true, network: true},
		{name: "network/beside-held-hot-keys", beside: true, held: true, hotKeys: 5, network: true},
	} {
		b.Run(c.name, func(b *testing.B) {
			pg := testkit.Postgres(b)
			pg.Migrate(b)
			out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema})
			if err != nil {
				b.Fatal(err)
			}
			k := testkit.NewKafka(b, testkit.InProcess())
			topic := k.Topic(b, 2)
			if c.held {
				k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: -1})
			}
			pool := pg.Pool
			if c.network {
				pool = throughLink(b, pg.Pool, time.Millisecond)
				slowProduces(k.Cluster, 5*time.Millisecond)
			}
			claimed := &claimTimer{}
			relay, err := producer.NewRelay(pool, producer.RelayConfig{Schema: pg.Schema, Brokers: k.Brokers, BatchSize: 520, Logger: testkit.Logger(b),
				Backoff: backoff.Backoff{Base: c.step, Max: c.step}, Hooks: []producer.Hook{claimed}})
			if err != nil {
				b.Fatal(err)
			}
			healthy := keysOn(b, topic, 1, 2, 50)
			hot := keysOn(b, topic, 0, 2, max(c.hotKeys, 1))
			if c.waiting > 0 {
				later := make([]producer.Event, c.waiting)
				for i := range later {
					later[i] = producer.Event{Topic: topic, Key: fmt.Sprintf("later-%d", i), Type: "T", Payload: []byte(`{}`), NotBefore: time.Now().Add(time.Hour)}
				}
				if _, err := out.EnqueueBatch(context.Background(), pg.Pool, later); err != nil {
					b.Fatal(err)
				}
				for range (c.waiting + 519) / 520 { // they move to wait, unpublished
					if _, err := relay.RunOnce(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
			}
			next := 0 // the next key to try for partition 0
			ctx := context.Background()
			batch := func() (res producer.BatchResult, took, claiming time.Duration) {
				events := make([]producer.Event, 0, 520)
				for n := range 500 {
					events = append(events, producer.Event{Topic: topic, Key: healthy[n%len(healthy)], Type: "T", Payload: []byte(`{}`)})
				}
				for c.beside && len(events) < 520 {
					key := hot[len(events)%len(hot)]
					if c.hotKeys == 0 {
						key = fmt.Sprintf("sick-%d", next)
						if next++; partitionOf(b, topic, key, 2) != 0 {
							continue
						}
					}
					events = append(events, producer.Event{Topic: topic, Key: key, Type: "T", Payload: []byte(`{}`)})
				}
				b.StopTimer()
				if _, err := out.EnqueueBatch(ctx, pg.Pool, events); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				res, err = relay.RunOnce(ctx)
				if err != nil {
					b.Fatal(err)
				}
				return res, time.Since(start), claimed.at.Sub(start)
			}
			_, first, _ := batch()
			for range 2 {
				batch()
			}
			var published, held, batches int
			var spent, claiming time.Duration
			for b.Loop() {
				res, took, claim := batch()
				spent += took
				claiming += claim
				published += res.Published
				held += res.KafkaHeld
				batches++
			}
			if published == 0 {
				b.Fatal("published nothing")
			}
			b.ReportMetric(float64(published)/spent.Seconds(), "healthy-events/s")
			b.ReportMetric(float64(held)/float64(batches), "held-settled/batch")
			b.ReportMetric(float64(first.Microseconds())/1000, "first-batch-ms")
			b.ReportMetric(float64(claiming.Microseconds())/1000/float64(batches), "claim-ms")
			b.ReportMetric(float64((spent-claiming).Microseconds())/1000/float64(batches), "publish-settle-ms")
		})
	}
}

// claimTimer is a ClaimedHook that notes when the relay last claimed.
type claimTimer struct{ at time.Time }

func (c *claimTimer) Claimed(int) { c.at = time.Now() }

// throughLink is a pool like pool whose connections reach its server
// through a delaylink adding delay each way, closed when the benchmark
// ends.
func throughLink(b *testing.B, pool *pgxpool.Pool, delay time.Duration) *pgxpool.Pool {
	b.Helper()
	cfg := pool.Config().Copy()
	link, err := delaylink.New(net.JoinHostPort(cfg.ConnConfig.Host, fmt.Sprint(cfg.ConnConfig.Port)), delay)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = link.Close() })
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks, cfg.ConnConfig.TLSConfig = link.Host(), link.Port(), nil, nil
	slow, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(slow.Close)
	return slow
}

// slowProduces has the cluster answer each produce request delay late,
// and then as it would have.
func slowProduces(c *kfake.Cluster, delay time.Duration) {
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-time.After(delay) })
		return nil, nil, false
	})
}
