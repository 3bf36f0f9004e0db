package producer_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// publishedOnly is a hook that implements PublishedHook alone.
type publishedOnly struct {
	mu     sync.Mutex
	topics []string
}

func (p *publishedOnly) Published(topic string, _ time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.topics = append(p.topics, topic)
}

// orderLog is a hook that implements ClaimedHook alone, noting its name in
// a log shared with other hooks, to show the order they are called in.
type orderLog struct {
	name string
	log  *[]string
}

func (o orderLog) Claimed(int) { *o.log = append(*o.log, o.name) }

// claimedInt64 has a Claimed method of another signature: it implements
// no hook interface.
type claimedInt64 struct{}

func (claimedInt64) Claimed(int64) {}

// TestHookGetsOnlyItsCalls: a hook implementing one hook interface hears
// the measurements of that interface, beside a hook implementing them all;
// the hooks of one interface are called in the order of Hooks.
func TestHookGetsOnlyItsCalls(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	for _, key := range []string{"o-1", "o-2"} {
		ev := orderCreated(key)
		ev.Topic = topic
		enqueue(t, pg, out, ev)
	}
	published, all := &publishedOnly{}, &recordedMetrics{}
	var order []string
	relay := newRelay(t, pg, k, producer.RelayConfig{Hooks: []producer.Hook{
		orderLog{"first", &order}, published, all, orderLog{"last", &order},
	}})
	if res := runOnce(t, relay); res.Published != 2 {
		t.Fatalf("RunOnce = %+v, want 2 published", res)
	}
	if !slices.Equal(published.topics, []string{topic, topic}) {
		t.Errorf("the PublishedHook heard of %q, want %q twice", published.topics, topic)
	}
	if claims, _ := all.snapshot(); !slices.Equal(claims, []int{2}) {
		t.Errorf("the hook of every interface heard of claims %v, want [2]", claims)
	}
	if !slices.Equal(order, []string{"first", "last"}) {
		t.Errorf("the ClaimedHooks were called in the order %q, want first, last", order)
	}
}

// TestHookImplementingNoneIsRefused: NewRelay refuses a hook that
// implements none of the hook interfaces, naming its index and type.
func TestHookImplementingNoneIsRefused(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connects
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, c := range []struct {
		hooks []producer.Hook
		says  string
	}{
		{[]producer.Hook{&recordedMetrics{}, struct{}{}}, "Hooks[1] is a struct {}"},
		{[]producer.Hook{nil}, "Hooks[0] is a <nil>"},
		{[]producer.Hook{&publishedOnly{}, &publishedOnly{}, claimedInt64{}}, "Hooks[2] is a producer_test.claimedInt64"},
	} {
		relay, err := producer.NewRelay(pool, producer.RelayConfig{Brokers: []string{"127.0.0.1:1"}, Hooks: c.hooks})
		if relay != nil || !errors.Is(err, producer.ErrInvalidConfig) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("NewRelay with %d hooks = %v, %v; want ErrInvalidConfig saying %q", len(c.hooks), relay, err, c.says)
		}
	}
	if _, err := producer.NewRelay(pool, producer.RelayConfig{Brokers: []string{"127.0.0.1:1"}, Hooks: []producer.Hook{&publishedOnly{}}}); err != nil {
		t.Errorf("NewRelay with a hook of one interface: %v", err)
	}
}

// batchStages is a BatchHook that notes what it hears.
type batchStages struct {
	mu      sync.Mutex
	batches []int
	stages  []producer.BatchStages
}

func (b *batchStages) Batch(events int, stages producer.BatchStages) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batches, b.stages = append(b.batches, events), append(b.stages, stages)
}

// timedPublisher is a fakePublisher that notes how long each Publish call
// took, from inside.
type timedPublisher struct {
	fakePublisher
	took []time.Duration
}

func (p *timedPublisher) Publish(ctx context.Context, records []*record.Record) []error {
	start := time.Now()
	defer func() { p.took = append(p.took, time.Since(start)) }()
	return p.fakePublisher.Publish(ctx, records)
}

// TestBatchHookHearsWhereABatchsTimeGoes: a BatchHook hears of each batch
// that claimed events, with its size and the time of its claim, publish
// and settle; the publish stage spans the whole Publish call. A claim that
// finds nothing is no batch.
func TestBatchHookHearsWhereABatchsTimeGoes(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	for _, key := range []string{"o-1", "o-2", "o-3"} {
		enqueue(t, pg, out, orderCreated(key))
	}
	pub, log := &timedPublisher{}, &batchStages{}
	relay := newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, Hooks: []producer.Hook{log}})
	if res := runOnce(t, relay); res.Published != 3 {
		t.Fatalf("RunOnce = %+v, want 3 published", res)
	}
	if res := runOnce(t, relay); res.Claimed != 0 {
		t.Fatalf("the second RunOnce = %+v, want nothing left", res)
	}
	if !slices.Equal(log.batches, []int{3}) || len(pub.took) != 1 {
		t.Fatalf("the BatchHook heard of batches %v (%d publishes), want one of 3", log.batches, len(pub.took))
	}
	if s := log.stages[0]; s.Claim <= 0 || s.Settle <= 0 || s.Publish < pub.took[0] {
		t.Errorf("stages %+v, want a claim and a settle, and a publish of at least the %v Publish took", s, pub.took[0])
	}
}
