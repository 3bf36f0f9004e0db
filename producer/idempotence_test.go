package producer_test

// The publisher's idempotent writes, against the in-process broker, which
// checks producer ids and sequence numbers as Kafka does: batches are
// numbered per partition, a batch sent again after a lost answer is kept
// once, a session the broker lost is replaced, and a cluster that refuses
// producer ids gets a clear error.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// sentBatch is the header of a record batch a produce request carried.
type sentBatch struct {
	partition  int32
	producerID int64
	epoch      int16
	firstSeq   int32
	records    int32
}

// batchLog records the header of every record batch the broker receives.
type batchLog struct {
	mu      sync.Mutex
	batches []sentBatch
}

// logBatches starts recording the batches k receives in produce requests.
func logBatches(t *testing.T, k *testkit.Kafka) *batchLog {
	l := &batchLog{}
	k.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		k.Cluster.KeepControl()
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, rt := range req.(*kmsg.ProduceRequest).Topics {
			for _, rp := range rt.Partitions {
				var b kmsg.RecordBatch
				if err := b.ReadFrom(rp.Records); err != nil {
					t.Errorf("a produce request carried a batch the test cannot read: %v", err)
					continue
				}
				l.batches = append(l.batches, sentBatch{rp.Partition, b.ProducerID, b.ProducerEpoch, b.FirstSequence, b.NumRecords})
			}
		}
		return nil, nil, false
	})
	return l
}

func (l *batchLog) all() []sentBatch {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.batches)
}

// duplicatesOn reads topic up to its high watermarks, checks that want
// distinct ids arrived, and returns how many records repeat an id.
func duplicatesOn(t *testing.T, k *testkit.Kafka, topic string, want int) int {
	t.Helper()
	msgs := waitFaultRecords(t, k, consume(t, k, topic), topic, want)
	if n := len(distinctIDs(msgs)); n != want {
		t.Fatalf("%d distinct records on %s, want %d", n, topic, want)
	}
	return len(msgs) - want
}

// publishAll publishes records and fails the test on any error.
func publishAll(t *testing.T, pub record.Publisher, records []*record.Record) {
	t.Helper()
	for i, err := range pub.Publish(context.Background(), records) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
}

// TestPublisherNumbersItsBatches: successive calls write in one producer
// session, each partition's batches numbered from 0 by records; without
// idempotence the batches carry no producer id.
func TestPublisherNumbersItsBatches(t *testing.T) {
	t.Parallel()
	t.Run("idempotent", func(t *testing.T) {
		t.Parallel()
		k := testkit.NewKafka(t, testkit.InProcess())
		topic := k.Topic(t, 2)
		log := logBatches(t, k)
		pub := newPublisher(t, k, nil)
		for range 3 {
			publishAll(t, pub, keyedRecords(topic, 6, 4, 10))
		}
		next := map[int32]int32{}
		batches := log.all()
		for _, b := range batches {
			if b.producerID < 0 || b.producerID != batches[0].producerID || b.epoch != batches[0].epoch {
				t.Fatalf("batch %+v: want every batch in the first one's producer session (id %d, epoch %d)", b, batches[0].producerID, batches[0].epoch)
			}
			if b.firstSeq != next[b.partition] {
				t.Fatalf("batch %+v: first sequence %d, want %d (the records before it on its partition)", b, b.firstSeq, next[b.partition])
			}
			next[b.partition] += b.records
		}
		if len(next) != 2 || next[0]+next[1] != 3*24 {
			t.Fatalf("sequences reached %v, want 72 records numbered over 2 partitions", next)
		}
	})
	t.Run("without idempotence", func(t *testing.T) {
		t.Parallel()
		k := testkit.NewKafka(t, testkit.InProcess())
		topic := k.Topic(t, 2)
		log := logBatches(t, k)
		publishAll(t, newPublisher(t, k, nil, producer.WithoutIdempotence()), keyedRecords(topic, 6, 4, 10))
		for _, b := range log.all() {
			if b.producerID != -1 || b.firstSeq != -1 {
				t.Fatalf("batch %+v: want no producer id and no sequence", b)
			}
		}
	})
}

// TestPublisherKeepsOneCopyOfAnUnansweredBatch: the broker appends a batch
// but answers REQUEST_TIMED_OUT or NOT_ENOUGH_REPLICAS_AFTER_APPEND, three
// times. The idempotent publisher sends it again, beyond Retry.Max (0),
// until it is answered, and the broker keeps one copy; without idempotence
// each answer the publisher retries leaves a copy more.
func TestPublisherKeepsOneCopyOfAnUnansweredBatch(t *testing.T) {
	t.Parallel()
	afterAppend := func(k *testkit.Kafka) {
		k.Cluster.Fault(
			kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.RequestTimedOut, Count: 2},
			kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicasAfterAppend},
		)
	}
	t.Run("idempotent", func(t *testing.T) {
		t.Parallel()
		k := testkit.NewKafka(t, testkit.InProcess())
		topic := k.Topic(t, 1)
		pub := newPublisher(t, k, func(c *sarama.Config) { c.Producer.Retry.Max, c.Producer.Retry.Backoff = 0, time.Millisecond })
		afterAppend(k)
		records := keyedRecords(topic, 5, 2, 10)
		publishAll(t, pub, records)
		if dups := duplicatesOn(t, k, topic, len(records)); dups != 0 {
			t.Fatalf("%d duplicates on the topic, want none: the broker must drop the batch sent again", dups)
		}
	})
	t.Run("without idempotence", func(t *testing.T) {
		t.Parallel()
		k := testkit.NewKafka(t, testkit.InProcess())
		topic := k.Topic(t, 1)
		pub := newPublisher(t, k, func(c *sarama.Config) { c.Producer.Retry.Max, c.Producer.Retry.Backoff = 3, time.Millisecond }, producer.WithoutIdempotence())
		afterAppend(k)
		records := keyedRecords(topic, 5, 2, 10)
		publishAll(t, pub, records)
		if dups := duplicatesOn(t, k, topic, len(records)); dups != 3*len(records) {
			t.Fatalf("%d duplicates on the topic, want %d: each retried answer after an append leaves a copy", dups, 3*len(records))
		}
	})
}

// TestPublisherStartsANewSessionWhenTheBrokerLostItsSequence: a broker that
// answers OUT_OF_ORDER_SEQUENCE_NUMBER (it lost or expired the producer's
// state; nothing was appended) gets the batch again in a new session; one
// that keeps answering so fails the records with that error after three new
// sessions.
func TestPublisherStartsANewSessionWhenTheBrokerLostItsSequence(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 1)
	inits := observeKey(k, kmsg.InitProducerID)
	pub := newPublisher(t, k, func(c *sarama.Config) { c.Producer.Retry.Max, c.Producer.Retry.Backoff = 0, time.Millisecond })
	first := keyedRecords(topic, 3, 1, 10)
	publishAll(t, pub, first)
	k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.OutOfOrderSequenceNumber})
	second := keyedRecords(topic, 3, 2, 10)[3:]
	publishAll(t, pub, second)
	if n := inits.Hits(); n != 2 {
		t.Fatalf("%d InitProducerId requests, want 2: one session, then one for the lost sequence", n)
	}
	if dups := duplicatesOn(t, k, topic, len(first)+len(second)); dups != 0 {
		t.Fatalf("%d duplicates, want none", dups)
	}

	lost := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.OutOfOrderSequenceNumber, Count: -1})
	defer lost.Remove()
	for i, err := range pub.Publish(context.Background(), keyedRecords(topic, 1, 1, 10)) {
		if !errors.Is(err, sarama.ErrOutOfOrderSequenceNumber) {
			t.Fatalf("record %d: %v, want OUT_OF_ORDER_SEQUENCE_NUMBER once new sessions did not help", i, err)
		}
	}
	if n := inits.Hits(); n != 5 {
		t.Fatalf("%d InitProducerId requests, want 5: three more sessions for the batch", n)
	}
}

// TestConcurrentCallsWriteInSeparateSessions: callers publishing to one
// partition at once never share a session (two batches of one session in
// flight would be out of order), so every record is written once; and the
// sessions are reused, one per caller at most.
func TestConcurrentCallsWriteInSeparateSessions(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 1)
	inits := observeKey(k, kmsg.InitProducerID)
	log := logBatches(t, k)
	pub := newPublisher(t, k, nil)
	const callers, calls = 4, 25
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			for n := range calls {
				records := keyedRecords(topic, 2, 1, 10)
				for i, r := range records {
					r.Headers[0].Value = fmt.Appendf(nil, "caller %d call %d record %d", c, n, i)
				}
				for i, err := range pub.Publish(context.Background(), records) {
					if err != nil {
						t.Errorf("caller %d call %d record %d: %v", c, n, i, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := inits.Hits(); n < 1 || n > callers {
		t.Fatalf("%d InitProducerId requests for %d callers, want 1 to %d", n, callers, callers)
	}
	sessions := map[int64]bool{}
	for _, b := range log.all() {
		sessions[b.producerID] = true
	}
	if len(sessions) != inits.Hits() {
		t.Fatalf("batches of producer ids %v, want one per InitProducerId (%d)", slices.Sorted(maps.Keys(sessions)), inits.Hits())
	}
	if dups := duplicatesOn(t, k, topic, callers*calls*2); dups != 0 {
		t.Fatalf("%d duplicates, want none", dups)
	}
}

// TestPublisherReportsARefusedProducerID: a cluster that refuses producer
// ids (no IdempotentWrite permission) fails every record with
// ErrIdempotenceRefused, which names the switch, and writes nothing; with
// idempotence off the same cluster takes them.
func TestPublisherReportsARefusedProducerID(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 1)
	k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.ClusterAuthorizationFailed, Count: -1})
	produced := observeProduce(k)
	for i, err := range newPublisher(t, k, nil).Publish(context.Background(), keyedRecords(topic, 2, 1, 10)) {
		if !errors.Is(err, producer.ErrIdempotenceRefused) || !errors.Is(err, sarama.ErrClusterAuthorizationFailed) {
			t.Fatalf("record %d: %v, want ErrIdempotenceRefused with the broker's CLUSTER_AUTHORIZATION_FAILED", i, err)
		}
	}
	if n := produced.Hits(); n != 0 {
		t.Fatalf("%d produce requests without a producer id, want none", n)
	}
	publishAll(t, newPublisher(t, k, nil, producer.WithoutIdempotence()), keyedRecords(topic, 2, 1, 10))
}

// TestRelayWaitsOutARefusedProducerID: a cluster that refuses producer ids
// costs the events no attempt (with MaxAttempts 1, one counted attempt
// would dead-letter them): they wait, the breaker opens as for an
// unreachable Kafka, and the relay says once, at error level, what to do.
// Once the cluster grants producer ids every event is published.
func TestRelayWaitsOutARefusedProducerID(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 2)
	total := enqueueKeyed(t, pg, out, topic, 5, 2)
	refused := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.InitProducerID}, Err: kerr.ClusterAuthorizationFailed, Count: -1})
	logs := &testkit.Buffer{}
	metrics := &recordedMetrics{}
	relay := newRelay(t, pg, k, producer.RelayConfig{
		MaxAttempts: 1, PollInterval: 20 * time.Millisecond, Hooks: []producer.Hook{metrics},
		Backoff: backoff.Backoff{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond},
		Breaker: producer.BreakerConfig{OpenFor: 50 * time.Millisecond},
		Logger:  slog.New(slog.NewTextHandler(logs, nil)),
	})
	runRelay(t, relay)
	testkit.WaitFor(t, 30*time.Second, "the breaker to open", func() bool {
		metrics.mu.Lock()
		defer metrics.mu.Unlock()
		return slices.Contains(metrics.states, producer.BreakerOpen)
	})
	if n := countRows(t, pg.Pool, "retry_count > 0 OR status = 'dead'"); n != 0 {
		t.Fatalf("%d events with an attempt counted or dead-lettered, want none", n)
	}
	var said []string
	for _, l := range logs.Lines() {
		if strings.Contains(l, "refuses the relay a producer id") {
			said = append(said, l)
		}
	}
	if len(said) != 1 || !strings.Contains(said[0], "level=ERROR") || !strings.Contains(said[0], "IdempotentWrite") || !strings.Contains(said[0], "DisableIdempotence") {
		t.Fatalf("the relay said %q, want one error naming the permission and the switch", said)
	}
	refused.Remove()
	testkit.WaitFor(t, 30*time.Second, "every event published", func() bool {
		return countRows(t, pg.Pool, "status = 'published'") == total
	})
}
