package bench

// BenchmarkRedisDedupeCost measures the CPU the Redis dedupe costs per
// message on each side of the wire, with nothing else running: batches of
// 256 new ids claimed and marked processed by dedupe.Redis, one after the
// other, as a partition's claims and done marks go. It reports this
// process's CPU per id (getrusage: go-redis and the store encoding the
// commands and reading the replies) and the Redis server's (INFO: its main
// thread), and the commands Redis ran per id. Run it with
//
//	go test -run '^$' -bench RedisDedupeCost -benchtime 4000x ./cmd/courier/internal/bench/
//
// With the consumer's own CPU per message ("CPU while consuming" in
// `courier bench consume`), these say how many cores a given rate of Redis
// dedupe needs at the least on a machine.

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/internal/testkit"
)

func BenchmarkRedisDedupeCost(b *testing.B) {
	r := testkit.NewRedis(b)
	store, err := dedupe.NewRedis(r.Client, dedupe.RedisConfig{Scope: "bench", Prefix: r.Prefix, Window: dedupeWindow})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	const batch = consumer.DefaultTakeBatch
	ids := make([]string, batch)
	var seq int
	redisBefore, err := readRedisCounters(ctx, r.Client)
	if err != nil {
		b.Skipf("Redis's INFO cannot be read: %v", err)
	}
	cpuBefore, err := readCPU()
	if err != nil {
		b.Skipf("this process's CPU cannot be read: %v", err)
	}
	for b.Loop() {
		for i := range ids {
			seq++
			ids[i] = "9b2f4c1e-aaaa-bbbb-cccc-" + strconv.Itoa(1_000_000_000_000 + seq)[1:] // as long as a UUID
		}
		owner := "orders/3/" + ids[0]
		statuses, err := store.Claim(ctx, owner, ids, consumer.DefaultDedupeLease)
		if err != nil {
			b.Fatal(err)
		}
		if statuses[batch-1] != dedupe.Claimed {
			b.Fatalf("a new id is %v", statuses[batch-1])
		}
		if err := store.Done(ctx, owner, ids); err != nil {
			b.Fatal(err)
		}
	}
	cpuAfter, cpuErr := readCPU()
	redisAfter, redisErr := readRedisCounters(ctx, r.Client)
	if cpuErr != nil || redisErr != nil {
		b.Fatal(cpuErr, redisErr)
	}
	n := float64(b.N * batch)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/id")
	b.ReportMetric(float64((cpuAfter.process-cpuBefore.process)/time.Nanosecond)/1e3/n, "client-cpu-us/id")
	b.ReportMetric((redisAfter.cpu-redisBefore.cpu)*1e6/n, "redis-cpu-us/id")
	b.ReportMetric((redisAfter.commands-redisBefore.commands)/n, "redis-commands/id")
}
