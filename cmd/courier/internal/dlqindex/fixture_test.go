package dlqindex_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
)

// fixture is a dead-letter topic, a client to index it with and a batching
// producer to fill it.
type fixture struct {
	k          *testkit.Kafka
	topic      string
	partitions int32
	client     sarama.Client
	producer   *kgo.Client
}

func newFixture(tb testing.TB, partitions int32, opts ...testkit.KafkaOption) *fixture {
	tb.Helper()
	k := testkit.NewKafka(tb, opts...)
	f := &fixture{k: k, topic: k.Topic(tb, 1) + dlq.DefaultSuffix, partitions: partitions}
	k.CreateTopic(tb, f.topic, partitions)
	client, err := sarama.NewClient(k.Brokers, k.Config())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = client.Close() })
	f.client = client
	f.producer = f.newProducer(tb)
	return f
}

// newProducer returns a batching producer to the fixture's topic, which
// writes each record to the partition it names.
func (f *fixture) newProducer(tb testing.TB) *kgo.Client {
	tb.Helper()
	producer, err := kgo.NewClient(kgo.SeedBrokers(f.k.Brokers...), kgo.DefaultProduceTopic(f.topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(producer.Close)
	return producer
}

// produce writes recs, in batches.
func (f *fixture) produce(tb testing.TB, recs []*kgo.Record) {
	tb.Helper()
	const batch = 5000
	for len(recs) > 0 {
		n := min(batch, len(recs))
		if err := f.producer.ProduceSync(context.Background(), recs[:n]...).FirstErr(); err != nil {
			tb.Fatalf("produce dead letters: %v", err)
		}
		recs = recs[n:]
	}
}

// deadLetter returns the record of the dead letter of o and failure (raw
// mode when raw), on partition p.
func deadLetter(tb testing.TB, p int32, o dlq.Original, failure dlq.Failure, raw bool) *kgo.Record {
	tb.Helper()
	env, err := dlq.New(o, failure)
	if err != nil {
		tb.Fatal(err)
	}
	render := env.Record
	if raw {
		render = env.RawRecord
	}
	r, err := render()
	if err != nil {
		tb.Fatal(err)
	}
	out := &kgo.Record{Partition: p, Key: r.Key, Value: r.Value, Timestamp: failure.FailedAt}
	for _, h := range r.Headers {
		out.Headers = append(out.Headers, kgo.RecordHeader{Key: string(h.Key), Value: h.Value})
	}
	return out
}

// Values of the realistic dead letters.
var (
	originalTopics = []string{"orders", "payments", "payouts", "invoices", "shipments", "refunds"}
	// errorTexts: 30 texts, the first 20 transient, the rest permanent.
	errorTexts = []string{
		"psp timeout after 30s",
		"HTTP 503 Service Unavailable from ledger",
		"dial tcp 10.0.3.17:5432: connect: connection refused",
		"context deadline exceeded",
		"redis: connection pool timeout",
		"HTTP 502 Bad Gateway from psp",
		"kafka: broker not available",
		"pq: could not serialize access due to concurrent update",
		"HTTP 429 Too Many Requests from fraud-check",
		"read tcp 10.0.4.2:41822->10.0.9.9:443: read: connection reset by peer",
		"tls: handshake timeout",
		"fraud-check: upstream timeout",
		"ledger: lock wait timeout exceeded; try restarting transaction",
		"EOF",
		"HTTP 500 Internal Server Error from tax-service",
		"inventory: reservation service unavailable",
		"smtp: 421 service not available",
		"s3: SlowDown: please reduce your request rate",
		"dns: lookup psp.example.com: i/o timeout",
		"grpc: Unavailable: transport is closing",
		"validation: amount_cents must be positive",
		"validation: currency \"XYZ\" is not supported",
		"json: cannot unmarshal string into Go struct field Payout.amount_cents of type int64",
		"pq: duplicate key value violates unique constraint \"payouts_pkey\"",
		"psp: card declined (do_not_honor)",
		"unknown customer cust-0",
		"schema: missing required field \"order_id\"",
		"refund exceeds the captured amount",
		"Permanent: account closed",
		"shipment address failed validation: postcode",
	}
	groups = []string{"payouts", "billing", "fulfilment", ""} // "" is the relay
	// tenants: "" is a record without ce_tenantid.
	tenants = []string{"acme", "globex", "acme", "initech", ""}
)

// corpus makes realistic dead letters, one every 6 seconds from start:
// six original topics, both kinds, the 30 error texts (a few of them
// most of the time), three consumer groups and the relay, text keys, some
// binary and some missing, raw mode now and then, and a corrupt record in
// every 5,000; most have a tenant.
type corpus struct {
	rng        *rand.Rand
	start      time.Time
	partitions int32
	n          int
}

func newCorpus(partitions int32) *corpus {
	return &corpus{rng: rand.New(rand.NewPCG(1, 2)), start: time.Date(2026, 1, 16, 9, 0, 0, 0, time.UTC), partitions: partitions}
}

// next returns the records of the next n dead letters.
func (c *corpus) next(tb testing.TB, n int) []*kgo.Record {
	tb.Helper()
	out := make([]*kgo.Record, 0, n)
	for range n {
		out = append(out, c.record(tb))
	}
	return out
}

func (c *corpus) record(tb testing.TB) *kgo.Record {
	i := c.n
	c.n++
	rng := c.rng
	p := int32(i) % c.partitions
	at := c.start.Add(time.Duration(i) * 6 * time.Second)
	if i%5000 == 4999 {
		return &kgo.Record{Partition: p, Value: []byte(`{"envelope_version":1,"original_topic":`), Timestamp: at}
	}
	text := int(float64(len(errorTexts)) * math.Pow(rng.Float64(), 3)) // the first texts most often
	kind := dlq.KindRetriesExhausted
	if text >= 20 {
		kind = dlq.KindPermanent
	}
	group := groups[rng.IntN(len(groups))]
	o := dlq.Original{
		Topic:     originalTopics[int(float64(len(originalTopics))*math.Pow(rng.Float64(), 2))],
		Partition: int32(rng.IntN(12)), Offset: int64(i) * 3, Timestamp: at.Add(-2 * time.Second),
		Value: fmt.Appendf(nil, `{"order_id":"order-%d","amount_cents":%d,"currency":"EUR","customer":"cust-%d","items":[{"sku":"sku-%d","qty":%d}]}`,
			i, 100+rng.IntN(100000), rng.IntN(5000), rng.IntN(800), 1+rng.IntN(4)),
		Headers: []dlq.Header{
			{Key: []byte("ce_specversion"), Value: []byte("1.0")},
			{Key: []byte("ce_id"), Value: fmt.Appendf(nil, "0195f3c4-%04x-7000-8000-%012x", i%0x10000, i)},
			{Key: []byte("ce_type"), Value: []byte("OrderCreated")},
			{Key: []byte("ce_source"), Value: []byte("courier")},
			{Key: []byte("ce_time"), Value: []byte(at.Format(time.RFC3339Nano))},
			{Key: []byte("content-type"), Value: []byte("application/json")},
		},
	}
	if tenant := tenants[i%len(tenants)]; tenant != "" {
		o.Headers = append(o.Headers, dlq.Header{Key: []byte("ce_tenantid"), Value: []byte(tenant)})
	}
	switch k := rng.IntN(100); {
	case k < 2:
		o.Key = []byte{0xff, 0xfe, byte(i), byte(i >> 8)}
	case k < 3: // no key
	default:
		o.Key = fmt.Appendf(nil, "order-%d", i%20000)
	}
	if group == "" { // the relay's dead letter never reached Kafka
		o.Partition, o.Offset = dlq.NoPartition, dlq.NoOffset
	}
	failure := dlq.Failure{Error: errorTexts[text], Kind: kind, Attempts: 1 + rng.IntN(6), FailedAt: at,
		ConsumerGroup: group, ReplayCount: rng.IntN(10) / 8}
	return deadLetter(tb, p, o, failure, i%97 == 0)
}
