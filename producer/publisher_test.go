package producer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// newPublisher is the relay's default Publisher on k, closed when the test
// ends.
func newPublisher(t *testing.T, k *testkit.Kafka, tune func(*sarama.Config), opts ...producer.PublisherOption) record.Publisher {
	t.Helper()
	cfg := producer.NewSaramaConfig()
	if tune != nil {
		tune(cfg)
	}
	pub, err := producer.NewSaramaPublisher(k.Brokers, cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := pub.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return pub
}

// keyedRecords returns perKey records for each of keys keys, interleaved,
// each carrying its key and number as "key/n" in the ce_id header.
func keyedRecords(topic string, keys, perKey int, valueSize int) []*record.Record {
	var out []*record.Record
	for n := range perKey {
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			out = append(out, &record.Record{
				Topic: topic, Key: []byte(key),
				Value:   []byte(strings.Repeat("v", valueSize)),
				Headers: []record.Header{{Key: []byte(producer.HeaderID), Value: fmt.Appendf(nil, "%s/%d", key, n)}},
			})
		}
	}
	return out
}

// observeProduce counts the produce requests the in-process broker answers.
func observeProduce(k *testkit.Kafka) *kfake.FaultHandle { return observeKey(k, kmsg.Produce) }

// observeKey counts the requests of key the in-process broker answers.
func observeKey(k *testkit.Kafka, key kmsg.Key) *kfake.FaultHandle {
	return k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{key}, Count: -1, Observe: true})
}

// arrivedIDs reads topic until want records arrived and returns their ce_ids
// by key, in partition order.
func arrivedIDs(t *testing.T, k *testkit.Kafka, topic string, want int) map[string][]string {
	t.Helper()
	byKey := map[string][]string{}
	for _, m := range consume(t, k, topic).waitDistinct(want, 30*time.Second) {
		byKey[string(m.Key)] = append(byKey[string(m.Key)], headerValue(m, producer.HeaderID))
	}
	return byKey
}

// TestPublisherSendsOneRequestPerCall: 600 records over 20 keys and 6
// partitions leave in one produce request and arrive in order, each with
// the offset the broker gave it.
func TestPublisherSendsOneRequestPerCall(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 6)
	pub := newPublisher(t, k, nil)
	requests := observeProduce(k)

	records := keyedRecords(topic, 20, 30, 100)
	for i, err := range pub.Publish(context.Background(), records) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if n := requests.Hits(); n != 1 {
		t.Fatalf("%d produce requests for one call, want 1", n)
	}
	offsets := map[int32][]int64{}
	for _, r := range records {
		offsets[r.Partition] = append(offsets[r.Partition], r.Offset)
	}
	for p, o := range offsets {
		if !slices.IsSorted(o) || o[0] != 0 || o[len(o)-1] != int64(len(o)-1) {
			t.Fatalf("partition %d offsets %v, want 0..%d in record order", p, o, len(o)-1)
		}
	}
	for key, ids := range arrivedIDs(t, k, topic, len(records)) {
		for n, id := range ids {
			if id != fmt.Sprintf("%s/%d", key, n) {
				t.Fatalf("key %s arrived as %v, want in order", key, ids)
			}
		}
	}
}

// TestPublisherFailsAPartitionWhole: when the broker refuses one
// partition, every record of that partition fails and none of them is
// written, while the other partitions of the same request are.
func TestPublisherFailsAPartitionWhole(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 3)
	pub := newPublisher(t, k, func(c *sarama.Config) { c.Producer.Retry.Max = 0 })
	k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{1}, Err: kerr.PolicyViolation})

	records := keyedRecords(topic, 30, 4, 50)
	errs := pub.Publish(context.Background(), records)
	acked := 0
	for i, r := range records {
		// Failed records get no place: their partition is the partitioner's.
		partition := partitionOf(t, topic, string(r.Key), 3)
		switch {
		case partition == 1 && !errors.Is(errs[i], sarama.ErrPolicyViolation):
			t.Fatalf("record %d on the refused partition: error %v, want the broker's refusal", i, errs[i])
		case partition != 1 && errs[i] != nil:
			t.Fatalf("record %d on partition %d: %v", i, partition, errs[i])
		case errs[i] == nil && r.Partition != partition:
			t.Fatalf("record %d acknowledged on partition %d, its key's is %d", i, r.Partition, partition)
		case errs[i] == nil:
			acked++
		}
	}
	if acked == 0 || acked == len(records) {
		t.Fatalf("%d of %d acknowledged: the keys did not spread over the partitions", acked, len(records))
	}
	msgs := consume(t, k, topic).waitDistinct(acked, 30*time.Second)
	for _, m := range msgs {
		if m.Partition == 1 {
			t.Fatalf("a record of the refused partition was written: %s", headerValue(m, producer.HeaderID))
		}
	}
}

// TestPublisherSplitsALargePartitionAndStopsAtAFailure: a partition whose
// records exceed Producer.MaxMessageBytes goes as several record batches,
// one after the other; when one fails, the later ones are not sent and fail
// with it, so no record overtakes a failed one.
func TestPublisherSplitsALargePartitionAndStopsAtAFailure(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 1)
	pub := newPublisher(t, k, func(c *sarama.Config) {
		c.Producer.MaxMessageBytes = 4000
		c.Producer.Retry.Max = 0
	})
	requests := observeProduce(k)
	var seen []kmsg.Request // When may run more than once for a request
	k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.UnknownServerError, Count: -1,
		When: func(req kmsg.Request) bool {
			if !slices.Contains(seen, req) {
				seen = append(seen, req)
			}
			return len(seen) == 2 && seen[1] == req // the second batch
		}})

	records := keyedRecords(topic, 1, 40, 300) // ~14 KB: four or more batches
	errs := pub.Publish(context.Background(), records)
	first := slices.IndexFunc(errs, func(err error) bool { return err != nil })
	if first <= 0 {
		t.Fatalf("errors %v: want the first batch acknowledged and a later one refused", errs)
	}
	for i, err := range errs[first:] {
		if !errors.Is(err, sarama.ErrUnknown) {
			t.Fatalf("record %d after the refused batch: %v, want the refusal", first+i, err)
		}
	}
	if n := requests.Hits(); n != 2 {
		t.Fatalf("%d produce requests, want 2: the batches after the refused one must not be sent", n)
	}
	ids := arrivedIDs(t, k, topic, first)["key-0"]
	if len(ids) != first {
		t.Fatalf("%d records on the topic, want the %d of the first batch", len(ids), first)
	}
}

// TestPublisherRetriesALeaderMove: a partition whose leader moved is
// refreshed and sent again, up to Producer.Retry.Max times.
func TestPublisherRetriesALeaderMove(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 2)
	pub := newPublisher(t, k, func(c *sarama.Config) { c.Producer.Retry.Backoff = time.Millisecond })
	k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition, Count: 2})

	records := keyedRecords(topic, 5, 5, 10)
	for i, err := range pub.Publish(context.Background(), records) {
		if err != nil {
			t.Fatalf("record %d: %v, want it written after the retries", i, err)
		}
	}
	arrivedIDs(t, k, topic, len(records))
}

// TestPublisherRefusesAnOversizedRecordAlone: a record larger than
// Producer.MaxMessageBytes fails as too large without being sent, and the
// later records of its key fail with it, unsent; the other keys' records
// are written.
func TestPublisherRefusesAnOversizedRecordAlone(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 1)
	pub := newPublisher(t, k, func(c *sarama.Config) { c.Producer.MaxMessageBytes = 10_000 })
	records := keyedRecords(topic, 3, 2, 100) // key-0/0 key-1/0 key-2/0 key-0/1 key-1/1 key-2/1
	records[1].Value = make([]byte, 20_000)
	errs := pub.Publish(context.Background(), records)
	if !errors.Is(errs[1], sarama.ErrMessageSizeTooLarge) || !strings.Contains(errs[1].Error(), "Producer.MaxMessageBytes") {
		t.Fatalf("oversized record: %v, want ErrMessageSizeTooLarge naming the setting to raise", errs[1])
	}
	if errs[4] == nil {
		t.Fatal("the record behind the oversized one, of the same key, was acknowledged: it overtook it")
	}
	for _, i := range []int{0, 2, 3, 5} {
		if errs[i] != nil {
			t.Fatalf("record %d of another key: %v", i, errs[i])
		}
	}
	got := arrivedIDs(t, k, topic, 4)
	if len(got["key-1"]) != 0 {
		t.Fatalf("key-1 records written: %v", got["key-1"])
	}
}

// TestPublisherLooksUpATopicOncePerCall: records for a topic the broker
// does not know fail with its error after one metadata lookup for the
// whole call, not one per record.
func TestPublisherLooksUpATopicOncePerCall(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	pub := newPublisher(t, k, func(c *sarama.Config) { c.Metadata.Retry.Max = 0 })
	// Connect first: the client's bootstrap metadata request is not the lookup.
	known := k.Topic(t, 1)
	if err := pub.Publish(context.Background(), keyedRecords(known, 1, 1, 10))[0]; err != nil {
		t.Fatal(err)
	}
	lookups := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Count: -1, Observe: true})
	errs := pub.Publish(context.Background(), keyedRecords("t.never-created", 10, 2, 10))
	for i, err := range errs {
		if err == nil {
			t.Fatalf("record %d for a missing topic was acknowledged", i)
		}
	}
	if n := lookups.Hits(); n != 1 {
		t.Fatalf("%d metadata requests for one call to one missing topic, want 1", n)
	}
}

// TestPublisherGivesUpWhenTheContextEnds: a Publish cut short by its
// context reports the context's error for every record it did not finish.
func TestPublisherGivesUpWhenTheContextEnds(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 1)
	pub := newPublisher(t, k, func(c *sarama.Config) { c.Producer.Retry.Max, c.Producer.Retry.Backoff = 1000, time.Hour })
	k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	for i, err := range pub.Publish(ctx, keyedRecords(topic, 2, 1, 10)) {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("record %d: %v, want the context's deadline", i, err)
		}
	}
}

// TestNewSaramaPublisherRefusesConfigsItCannotHonour: each refusal names
// the setting and the fix.
func TestNewSaramaPublisherRefusesConfigsItCannotHonour(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, want string
		tune       func(*sarama.Config)
	}{
		{"version below Kafka 4.0's floor", "Version 2.0.0 is older than 2.1.0", func(c *sarama.Config) { c.Version = sarama.V2_0_0_0 }},
		{"no acks", "RequiredAcks", func(c *sarama.Config) { c.Producer.RequiredAcks = sarama.NoResponse }},
		{"idempotent", "Idempotent", func(c *sarama.Config) {
			c.Producer.Idempotent, c.Net.MaxOpenRequests = true, 1
		}},
		{"random partitioner", "Partitioner", func(c *sarama.Config) { c.Producer.Partitioner = sarama.NewRandomPartitioner }},
		{"leader-only acks with idempotence", "WaitForAll", func(c *sarama.Config) { c.Producer.RequiredAcks = sarama.WaitForLocal }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := producer.NewSaramaConfig()
			c.tune(cfg)
			_, err := producer.NewSaramaPublisher([]string{"127.0.0.1:9092"}, cfg)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("NewSaramaPublisher = %v, want an error naming %s", err, c.want)
			}
		})
	}
}

// TestPublisherIsSafeForConcurrentCalls: the relay's workers share one
// Publisher; calls at once, with keys and without, all succeed (and -race
// finds no shared partitioner state).
func TestPublisherIsSafeForConcurrentCalls(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 4)
	pub := newPublisher(t, k, nil)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			records := keyedRecords(topic, 10, 5, 20)
			for i, r := range records {
				if i%2 == w%2 {
					r.Key = nil // no key: any partition
				}
			}
			for i, err := range pub.Publish(context.Background(), records) {
				if err != nil {
					t.Errorf("caller %d, record %d: %v", w, i, err)
				}
			}
		})
	}
	wg.Wait()
}

// TestPublisherCallsAtOnceDoNotShareAConnection: a broker handles one
// request of a connection at a time, and a produce with acks=all holds its
// connection until the replicas have it; so while the broker holds one
// call's produce, a second call's must reach it on a connection of its own
// rather than queue behind the first. The broker holds the first until the
// second arrives, or 10s: sharing a connection, the second never would.
func TestPublisherCallsAtOnceDoNotShareAConnection(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 1)
	pub := newPublisher(t, k, nil)
	var produces atomic.Int32
	second := make(chan struct{})
	var overlapped atomic.Bool
	k.Cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		switch produces.Add(1) {
		case 1:
			k.Cluster.SleepControl(func() {
				select {
				case <-second:
					overlapped.Store(true)
				case <-time.After(10 * time.Second):
				}
			})
		case 2:
			close(second)
		}
		return nil, nil, false
	})
	var wg sync.WaitGroup
	publish := func(call int) {
		wg.Go(func() {
			for i, err := range pub.Publish(context.Background(), keyedRecords(topic, 5, 2, 20)) {
				if err != nil {
					t.Errorf("call %d, record %d: %v", call, i, err)
				}
			}
		})
	}
	publish(1)
	testkit.WaitFor(t, 10*time.Second, "the first call's produce at the broker", func() bool { return produces.Load() == 1 })
	publish(2)
	wg.Wait()
	if !overlapped.Load() {
		t.Errorf("the second call's produce did not reach the broker while it held the first's: the calls share a connection")
	}
	if got := len(k.ReadAll(t, topic)); got != 20 {
		t.Errorf("%d records arrived, want the 20 of both calls", got)
	}
}

// TestPublisherStopsWhenClosed: a write waiting to retry gives up when the
// publisher closes, with an error that says so.
func TestPublisherStopsWhenClosed(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 1)
	cfg := producer.NewSaramaConfig()
	cfg.Producer.Retry.Max, cfg.Producer.Retry.Backoff = 1000, time.Hour
	pub, err := producer.NewSaramaPublisher(k.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	fault := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotLeaderForPartition, Count: -1})
	done := make(chan []error, 1)
	go func() { done <- pub.Publish(context.Background(), keyedRecords(topic, 1, 1, 10)) }()
	if err := fault.Wait(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if errs := <-done; !errors.Is(errs[0], sarama.ErrShuttingDown) {
		t.Fatalf("Publish after Close = %v, want ErrShuttingDown", errs)
	}
}

// stampInterceptor adds a header to every record it sees.
type stampInterceptor struct{}

func (stampInterceptor) OnSend(m *sarama.ProducerMessage) {
	m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte("x-stamp"), Value: []byte("seen")})
}

// panicInterceptor panics, which must not stop the record.
type panicInterceptor struct{}

func (panicInterceptor) OnSend(*sarama.ProducerMessage) { panic("interceptor bug") }

// TestPublisherRunsProducerInterceptors: Producer.Interceptors see every
// record before it is sent, as with Sarama's own producer, and one that
// panics does not stop the record; what they change is sent, and the
// caller's records stay as given.
func TestPublisherRunsProducerInterceptors(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	pub := newPublisher(t, k, func(c *sarama.Config) {
		c.Producer.Interceptors = []sarama.ProducerInterceptor{panicInterceptor{}, stampInterceptor{}}
	})
	records := keyedRecords(topic, 2, 1, 10)
	for i, err := range pub.Publish(context.Background(), records) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	for i, r := range records {
		if len(r.Headers) != 1 {
			t.Fatalf("record %d has %d headers after Publish: the interceptors changed the caller's record", i, len(r.Headers))
		}
	}
	for _, m := range consume(t, k, topic).waitDistinct(2, 30*time.Second) {
		if got := headerValue(m, "x-stamp"); got != "seen" {
			t.Fatalf("record %s: x-stamp = %q, want the interceptor's header", m.Key, got)
		}
	}
}

// TestPublisherSplitsRequestsOverMaxRequestSize: when one broker's batches
// exceed sarama.MaxRequestSize they go in several requests, and every
// record is written. (Not parallel: it lowers a Sarama global.)
func TestPublisherSplitsRequestsOverMaxRequestSize(t *testing.T) {
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 4)
	pub := newPublisher(t, k, nil)
	saved := sarama.MaxRequestSize
	sarama.MaxRequestSize = 40_000
	t.Cleanup(func() { sarama.MaxRequestSize = saved })
	requests := observeProduce(k)

	records := keyedRecords(topic, 8, 10, 1_000) // ~90 KB over 4 partitions
	for i, err := range pub.Publish(context.Background(), records) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	if n := requests.Hits(); n < 3 {
		t.Fatalf("%d produce requests for ~90 KB under a 40 KB request limit, want 3 or more", n)
	}
	arrivedIDs(t, k, topic, len(records))
}
