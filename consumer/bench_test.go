package consumer_test

// BenchmarkConsume measures the runner beside a raw Sarama consumer group
// measured in the same run on the same broker (STYLE 13: figures, not
// asserted wall-clock times). It uses an in-process kfake broker unless
// COURIER_TEST_KAFKA_BROKERS names a cluster. It never runs in a plain
// `go test`; run it with
//
//	go test -run '^$' -bench Consume -benchtime 1x ./consumer/
//
// -benchtime 1x consumes one backlog per configuration: about 20s in all on
// two cores. -benchtime 3x consumes three per configuration, the
// configurations taking turns (about a minute): use it for figures.
// Anything else loading the machine (another go test) moves the figures.

import (
	"context"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/sony/gobreaker/v2"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

const (
	benchMessages    = 200_000 // backlog of a throughput sub-benchmark
	benchKeys        = 1_000   // distinct record keys
	benchPartitions  = 12
	benchPayloadSize = 200 // bytes of JSON per message
	benchFailEvery   = 100 // 1%: messages i with i%benchFailEvery == benchFailEvery-1 fail for good
	benchSeedChunk   = 5_000

	benchSlowMessages = 4_000 // backlog of a slow-handler sub-benchmark
	benchSlowHandler  = 5 * time.Millisecond

	benchDeadline = 2 * time.Minute // to join the group, then again to consume the backlog

	benchRaw      = "raw-sarama-group"
	benchSlowBase = "runner/handler=5ms/workers=1"
)

// BenchmarkConsume consumes a backlog of benchMessages messages (benchKeys
// keys over benchPartitions partitions, ~200-byte JSON values with the
// CloudEvents headers the relay writes) with a raw Sarama consumer group
// that only marks each message, the baseline, and with the runner (retries
// and dead letters on, the default config) whose handler returns nil, or
// fails 1% of the messages with consumer.Permanent (they go to the
// dead-letter topic, whose records are counted afterwards). It also
// consumes benchSlowMessages messages with a handler that takes 5ms, with
// Config.Workers 1 and 16.
//
// Each consumption seeds its own topic and creates a fresh group (the
// runner with the Sarama settings it uses by default, the raw group with
// the same). On the in-process broker the clock starts when the broker
// receives the group's first fetch of the topic, so the group join is not
// timed, and stops when the last message is settled (handled or
// dead-lettered by the runner, marked by the raw group): msgs/s is
// consuming throughput. The backlog is large because the raw group drains
// it fast (200,000 messages in about 0.4s on two cores).
//
// The configurations take turns: each iteration consumes one backlog with
// every one of them, starting one further along the list each time, so that
// a machine whose speed drifts meets them all alike. A configuration's rate
// is its messages over its median consuming time. The figures are printed
// beside their baseline's, and each 5ms row beside its ceiling: the
// backlog's busiest worker handling its messages one after the other, which
// that many workers cannot beat.
func BenchmarkConsume(b *testing.B) {
	k := testkit.NewKafka(b)
	slow := func(ctx context.Context, _ *consumer.Message, _ bool) error {
		t := time.NewTimer(benchSlowHandler)
		defer t.Stop()
		select {
		case <-t.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	cases := []*consumeCase{
		{name: benchRaw, n: benchMessages, consume: benchRawGroup},
		{name: "runner/no-failures", n: benchMessages,
			consume: benchRunner(consumer.Config{}, func(context.Context, *consumer.Message, bool) error { return nil })},
		{name: "runner/1%-permanent", n: benchMessages,
			consume: benchRunner(consumer.Config{}, func(_ context.Context, m *consumer.Message, fail bool) error {
				if fail {
					return consumer.Permanent(fmt.Errorf("bench: message %s fails for good", m.ID))
				}
				return nil
			})},
	}
	for _, workers := range []int{1, 16} {
		cases = append(cases, &consumeCase{name: fmt.Sprintf("runner/handler=5ms/workers=%d", workers), n: benchSlowMessages,
			workers: workers, consume: benchRunner(consumer.Config{Workers: workers}, slow)})
	}
	round := 0
	for b.Loop() {
		for i := range cases {
			c := cases[(round+i)%len(cases)]
			c.last = seedBacklog(b, k, c.n)
			runtime.GC() // start from the same heap: no collection owed by the seeding or an earlier consumption
			s := newBenchSettled(c.n)
			c.spent = append(c.spent, c.consume(b, c.last, s))
			if got := s.count.Load(); got != int64(c.n) {
				b.Fatalf("%s: %d messages settled, want %d (redelivered after a rebalance?)", c.name, got, c.n)
			}
		}
		round++
	}
	b.ReportMetric(0, "ns/op") // the sum of every consumption and seeding: meaningless
	results := &testkit.Rates{Unit: "msgs/s"}
	for _, c := range cases {
		rate := testkit.MedianRate(c.n, c.spent)
		results.Set(c.name, rate)
		if c.workers > 0 {
			ceiling := c.last.ceiling(c.workers, benchSlowHandler)
			results.Note(c.name, fmt.Sprintf("(ceiling %.0f: %.2fx)", ceiling, rate/ceiling))
		}
	}
	results.Print(os.Stdout, fmt.Sprintf("msgs/s consuming %d messages (%d with the 5ms handler) over %d keys and %d partitions, %d times each, taking turns, same broker:",
		benchMessages, benchSlowMessages, benchKeys, benchPartitions, round), func(name string) string {
		if strings.HasPrefix(name, "runner/handler=5ms/") {
			return benchSlowBase
		}
		return benchRaw
	})
	fmt.Println("  (ceiling: the backlog's busiest worker handling its messages one after the other)")
}

// consumeCase is one way of consuming a backlog.
type consumeCase struct {
	name    string
	n       int // messages in its backlog
	workers int // Config.Workers of a 5ms-handler case, else 0
	consume benchConsumeFunc
	spent   []time.Duration // consuming, each iteration
	last    *benchBacklog   // the last backlog, for the ceiling
}

// benchBacklog is a seeded topic, its dead-letter topic and a fresh group.
type benchBacklog struct {
	k     *testkit.Kafka
	topic string
	dlq   string
	group string
	n     int
	fail  map[string]bool  // ce_id of the messages meant to fail
	keys  []map[string]int // messages by key, by partition
}

// ceiling is the most msgs/s a handler taking d can reach on the backlog
// with Config.Workers workers: the busiest worker of the busiest partition
// handles its messages one after the other. Keys are spread over workers by
// CRC-32, as the runner does; with 1 worker this is the busiest partition.
func (bl *benchBacklog) ceiling(workers int, d time.Duration) float64 {
	busiest := 0
	for _, keys := range bl.keys {
		load := make([]int, workers)
		for key, n := range keys {
			load[crc32.ChecksumIEEE([]byte(key))%uint32(workers)] += n
		}
		busiest = max(busiest, slices.Max(load))
	}
	return float64(bl.n) / (float64(busiest) * d.Seconds())
}

// benchConsumeFunc consumes bl until s has counted every message, then stops
// and returns how long consuming took (see benchSettled.measure), once its
// consumer has shut down.
type benchConsumeFunc func(b *testing.B, bl *benchBacklog, s *benchSettled) time.Duration

// benchSettled counts settled messages and closes done with the last.
type benchSettled struct {
	target int64
	count  atomic.Int64
	done   chan struct{}
}

func newBenchSettled(target int) *benchSettled {
	return &benchSettled{target: int64(target), done: make(chan struct{})}
}

func (s *benchSettled) add() {
	if s.count.Add(1) == s.target {
		close(s.done)
	}
}

// measure times the consumption, from when fetching starts (see
// benchBacklog.fetching) to the last settled message, failing after
// benchDeadline for either.
func (s *benchSettled) measure(b *testing.B, fetching <-chan struct{}) time.Duration {
	b.Helper()
	if fetching != nil {
		select {
		case <-fetching:
		case <-time.After(benchDeadline):
			b.Fatalf("the group did not fetch within %v: did it join?", benchDeadline)
		}
	}
	start := time.Now()
	select {
	case <-s.done:
	case <-time.After(benchDeadline):
		b.Fatalf("%d of %d messages settled within %v", s.count.Load(), s.target, benchDeadline)
	}
	return time.Since(start)
}

// benchRawGroup is the baseline: a Sarama consumer group, configured as the
// runner's default, whose ConsumeClaim only marks each message.
func benchRawGroup(b *testing.B, bl *benchBacklog, s *benchSettled) time.Duration {
	fetching := bl.fetching()
	group, err := sarama.NewConsumerGroup(bl.k.Brokers, bl.group, consumer.NewSaramaConfig())
	if err != nil {
		b.Fatal(err)
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for err := range group.Errors() {
			b.Logf("raw consumer group error: %v", err)
		}
	}()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			if err := group.Consume(ctx, []string{bl.topic}, benchMarker{s}); err != nil && ctx.Err() == nil {
				b.Logf("raw consumer group session failed: %v", err)
			}
		}
	})
	defer func() {
		cancel()
		wg.Wait()
		if err := group.Close(); err != nil {
			b.Errorf("closing the raw consumer group: %v", err)
		}
		<-drained
	}()
	return s.measure(b, fetching)
}

// benchMarker is the raw group's handler.
type benchMarker struct{ s *benchSettled }

func (benchMarker) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (benchMarker) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h benchMarker) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for {
		select {
		case <-sess.Context().Done():
			return nil
		case msg, ok := <-claim.Messages():
			if !ok {
				return nil
			}
			sess.MarkMessage(msg, "")
			h.s.add()
		}
	}
}

// benchRunner consumes with a runner configured as cfg plus the backlog's
// brokers, group and topic. handle is told whether the message is one of
// those meant to fail. Messages are counted as settled through Metrics
// (handled or dead-lettered). Afterwards the dead-letter topic must hold
// exactly the messages meant to fail when handle failed them, else none.
func benchRunner(cfg consumer.Config, handle func(ctx context.Context, m *consumer.Message, fail bool) error) benchConsumeFunc {
	return func(b *testing.B, bl *benchBacklog, s *benchSettled) time.Duration {
		var failed atomic.Int64
		cfg.Brokers, cfg.Group, cfg.Topics = bl.k.Brokers, bl.group, []string{bl.topic}
		cfg.Handler = consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
			err := handle(ctx, m, bl.fail[m.ID])
			if err != nil {
				failed.Add(1)
			}
			return err
		})
		cfg.Metrics = benchMetrics{s}
		cfg.Logger = testkit.Logger(b, `msg="message dead-lettered"`)
		c, err := consumer.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		fetching := bl.fetching()
		ctx, cancel := context.WithCancel(context.Background())
		runErr := make(chan error, 1)
		go func() { runErr <- c.Run(ctx) }()
		defer func() {
			cancel()
			select {
			case err := <-runErr:
				if err != nil {
					b.Errorf("Run returned %v", err)
				}
			case <-time.After(30 * time.Second):
				b.Errorf("Run did not return within 30s of its context ending")
			}
		}()
		elapsed := s.measure(b, fetching)
		want := 0
		if failed.Load() > 0 {
			want = len(bl.fail)
		}
		bl.checkDeadLetters(b, want)
		return elapsed
	}
}

// benchMetrics counts messages handled or dead-lettered.
type benchMetrics struct{ s *benchSettled }

func (m benchMetrics) Message(_ string, o consumer.Outcome) {
	if o == consumer.OutcomeHandled || o == consumer.OutcomeDeadLettered {
		m.s.add()
	}
}
func (benchMetrics) HandlerDuration(string, time.Duration)  {}
func (benchMetrics) InFlight(string, int)                   {}
func (benchMetrics) BreakerChanged(string, gobreaker.State) {}
func (benchMetrics) Lag(string, int32, int64)               {}
func (benchMetrics) Released(string, int32)                 {}

// seedBacklog creates a topic and its dead-letter topic and writes n
// messages to the topic. Keys come from a fixed-seed generator, so every
// sub-benchmark consumes the same backlog; each message has a new ce_id.
func seedBacklog(b *testing.B, k *testkit.Kafka, n int) *benchBacklog {
	b.Helper()
	bl := &benchBacklog{
		k: k, topic: k.Topic(b, benchPartitions), group: "bench." + testkit.UniqueName(b, 100),
		n: n, fail: map[string]bool{}, keys: make([]map[string]int, benchPartitions),
	}
	for i := range bl.keys {
		bl.keys[i] = map[string]int{}
	}
	bl.dlq = dlq.Topic(bl.topic, consumer.DefaultDeadLetterSuffix)
	k.CreateTopic(b, bl.dlq, 1)
	sp, err := sarama.NewSyncProducer(k.Brokers, k.Config())
	if err != nil {
		b.Fatal(err)
	}
	defer sp.Close()
	rng := rand.New(rand.NewPCG(13, 13))
	created := time.Now().UTC().Format(time.RFC3339Nano)
	msgs := make([]*sarama.ProducerMessage, 0, benchSeedChunk)
	for i := range n {
		key := fmt.Sprintf("order-%d", rng.IntN(benchKeys))
		id := uuid.Must(uuid.NewV7()).String()
		if i%benchFailEvery == benchFailEvery-1 {
			bl.fail[id] = true
		}
		payload := fmt.Appendf(nil, `{"order_id":%q,"n":%d,"status":"created","note":"`, key, i)
		payload = append(payload, strings.Repeat("x", max(benchPayloadSize-len(payload)-2, 0))...)
		payload = append(payload, `"}`...)
		msgs = append(msgs, &sarama.ProducerMessage{
			Topic: bl.topic,
			Key:   sarama.StringEncoder(key),
			Value: sarama.ByteEncoder(payload),
			Headers: []sarama.RecordHeader{
				benchHeader(producer.HeaderSpecVersion, "1.0"),
				benchHeader(producer.HeaderID, id),
				benchHeader(producer.HeaderType, "OrderCreated"),
				benchHeader(producer.HeaderSource, producer.DefaultSource),
				benchHeader(producer.HeaderTime, created),
				benchHeader(producer.HeaderContentType, "application/json"),
				benchHeader(producer.HeaderCorrelationID, "corr-"+key),
			},
		})
		if len(msgs) == benchSeedChunk || i == n-1 {
			if err := sp.SendMessages(msgs); err != nil {
				b.Fatal(err)
			}
			for _, m := range msgs {
				bl.keys[m.Partition][string(m.Key.(sarama.StringEncoder))]++
			}
			msgs = msgs[:0]
		}
	}
	return bl
}

// fetching returns a channel the in-process broker closes when it receives
// the first fetch of the topic: consuming starts, the group has joined. It
// returns nil on a real cluster, whose fetches cannot be watched: the timer
// then starts with the consumer and counts the group join too (seconds on
// Kafka, with group.initial.rebalance.delay.ms).
func (bl *benchBacklog) fetching() <-chan struct{} {
	cluster := bl.k.Cluster
	if cluster == nil {
		return nil
	}
	ch := make(chan struct{})
	var once sync.Once
	cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		for _, t := range req.(*kmsg.FetchRequest).Topics {
			if t.Topic == bl.topic {
				once.Do(func() { close(ch) })
				cluster.DropControl()
			}
		}
		return nil, nil, false // observe only: the broker handles it
	})
	return ch
}

func benchHeader(name, value string) sarama.RecordHeader {
	return sarama.RecordHeader{Key: []byte(name), Value: []byte(value)}
}

// checkDeadLetters fails unless the dead-letter topic holds want records,
// each the envelope of a distinct message meant to fail.
func (bl *benchBacklog) checkDeadLetters(b *testing.B, want int) {
	b.Helper()
	client, err := sarama.NewClient(bl.k.Brokers, bl.k.Config())
	if err != nil {
		b.Fatal(err)
	}
	defer client.Close()
	hwm, err := client.GetOffset(bl.dlq, 0, sarama.OffsetNewest)
	if err != nil {
		b.Fatal(err)
	}
	if hwm != int64(want) {
		b.Fatalf("the dead-letter topic holds %d records, want %d", hwm, want)
	}
	if want == 0 {
		return
	}
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	pc, err := c.ConsumePartition(bl.dlq, 0, sarama.OffsetOldest)
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	seen := map[string]bool{}
	for rec := range pc.Messages() {
		headers := make([]dlq.Header, len(rec.Headers))
		for i, h := range rec.Headers {
			headers[i] = dlq.Header{Key: h.Key, Value: h.Value}
		}
		env, err := dlq.Read(rec.Key, rec.Value, headers)
		if err != nil {
			b.Fatalf("dead letter at offset %d: %v", rec.Offset, err)
		}
		o, err := env.Original()
		if err != nil {
			b.Fatalf("dead letter at offset %d: %v", rec.Offset, err)
		}
		id := ""
		for _, h := range o.Headers {
			if string(h.Key) == producer.HeaderID {
				id = string(h.Value)
			}
		}
		if !bl.fail[id] || seen[id] {
			b.Fatalf("dead letter at offset %d is of message %q: not meant to fail, or twice", rec.Offset, id)
		}
		seen[id] = true
		if rec.Offset+1 >= hwm {
			break
		}
	}
}
