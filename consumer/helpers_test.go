package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/sony/gobreaker/v2"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
)

// fixture is a test's broker, topic (with its dead-letter topic) and group.
type fixture struct {
	k          *testkit.Kafka
	topic      string
	dlq        string
	group      string
	partitions int32
}

func newFixture(t *testing.T, partitions int32, opts ...testkit.KafkaOption) *fixture {
	t.Helper()
	k := testkit.NewKafka(t, opts...)
	f := &fixture{k: k, topic: k.Topic(t, partitions), group: "g." + testkit.UniqueName(t, 100), partitions: partitions}
	f.dlq = dlq.Topic(f.topic, dlq.DefaultSuffix)
	k.CreateTopic(t, f.dlq, 1)
	return f
}

// config is a consumer config for the fixture with test-sized waits.
func (f *fixture) config(t *testing.T, h consumer.Handler) consumer.Config {
	return consumer.Config{
		Brokers:         f.k.Brokers,
		Sarama:          f.saramaConfig(),
		Group:           f.group,
		Topics:          []string{f.topic},
		Handler:         h,
		Backoff:         backoff.Backoff{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond},
		AttemptTimeout:  5 * time.Second,
		ShutdownTimeout: 5 * time.Second,
		Logger:          testkit.Logger(t),
	}
}

// saramaConfig commits offsets often so tests see them soon.
func (f *fixture) saramaConfig() *sarama.Config {
	cfg := f.k.Config()
	cfg.Consumer.Offsets.AutoCommit.Interval = 50 * time.Millisecond
	cfg.Consumer.Group.Heartbeat.Interval = 200 * time.Millisecond
	cfg.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	cfg.Producer.Retry.Backoff = 20 * time.Millisecond
	return cfg
}

// produce writes records to topic, each to the partition of its key.
func (f *fixture) produce(t *testing.T, topic string, msgs ...*sarama.ProducerMessage) {
	t.Helper()
	f.send(t, f.k.Config(), topic, msgs)
}

// produceTo writes records to one partition of the fixture's topic.
func (f *fixture) produceTo(t *testing.T, partition int32, msgs ...*sarama.ProducerMessage) {
	t.Helper()
	cfg := f.k.Config()
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	for _, m := range msgs {
		m.Partition = partition
	}
	f.send(t, cfg, f.topic, msgs)
}

// send writes msgs to topic with an idempotent producer, so a produce
// request retried on a busy machine never writes a record twice: a test
// counting records settled sees exactly those it sent.
func (f *fixture) send(t *testing.T, cfg *sarama.Config, topic string, msgs []*sarama.ProducerMessage) {
	t.Helper()
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	if !cfg.Version.IsAtLeast(sarama.V0_11_0_0) {
		cfg.Version = sarama.V0_11_0_0
	}
	p, err := sarama.NewSyncProducer(f.k.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for _, m := range msgs {
		m.Topic = topic
	}
	if err := p.SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
}

// record builds a record with a key, a value and a ce_id.
func record(key, value string) *sarama.ProducerMessage {
	return &sarama.ProducerMessage{
		Key:     sarama.StringEncoder(key),
		Value:   sarama.StringEncoder(value),
		Headers: []sarama.RecordHeader{{Key: []byte("ce_id"), Value: []byte("id-" + value)}},
	}
}

// committed returns the group's committed offset of partition, -1 for none.
func (f *fixture) committed(t *testing.T, partition int32) int64 {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(f.k.Brokers, f.k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	resp, err := admin.ListConsumerGroupOffsets(f.group, map[string][]int32{f.topic: {partition}})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		return -1 // the group has not joined yet
	}
	if err != nil {
		t.Fatal(err)
	}
	if b := resp.GetBlock(f.topic, partition); b != nil {
		return b.Offset
	}
	return -1
}

// readAll returns every record of topic up to its high-water marks.
func (f *fixture) readAll(t *testing.T, topic string) []*sarama.ConsumerMessage {
	t.Helper()
	return f.k.ReadAll(t, topic)
}

// commits records the offsets the group commits, through the in-process
// broker.
type commits struct {
	mu       sync.Mutex
	offsets  []int64     // partition 0 only, in commit order
	onCommit func(int64) // called on the broker's goroutine, if set
}

func (f *fixture) watchCommits(t *testing.T) *commits {
	t.Helper()
	if f.k.Cluster == nil {
		t.Fatal("watchCommits needs the in-process broker (testkit.InProcess)")
	}
	c := &commits{}
	f.k.Cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		commit := req.(*kmsg.OffsetCommitRequest)
		for _, topic := range commit.Topics {
			for _, p := range topic.Partitions {
				if commit.Group == f.group && topic.Topic == f.topic && p.Partition == 0 {
					c.mu.Lock()
					c.offsets = append(c.offsets, p.Offset)
					onCommit := c.onCommit
					c.mu.Unlock()
					if onCommit != nil {
						onCommit(p.Offset)
					}
				}
			}
		}
		return nil, nil, false // observe only: the broker handles it
	})
	return c
}

func (c *commits) list() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.offsets...)
}

// run runs c until the test ends, then checks that Run returns nil within
// 15s. The returned function stops it early.
func run(t *testing.T, c *consumer.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("Run did not return within 15s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func newConsumer(t *testing.T, cfg consumer.Config) *consumer.Consumer {
	t.Helper()
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// counter counts calls per key, safe for concurrent use.
type counter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *counter) add(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
	return c.n[key]
}

func (c *counter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

func (c *counter) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.n)
}

// recorder is a consumer.Hook implementing every hook interface, that remembers what it was told.
type recorder struct {
	mu       sync.Mutex
	outcomes map[consumer.Outcome]int
	lags     []int64
	released int
	// releasedOf counts the releases of each partition, by "topic/partition".
	releasedOf map[string]int
	inflight   int
	states     map[string]map[gobreaker.State]time.Time // first time each state was reported
}

func (r *recorder) Message(_ string, o consumer.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outcomes == nil {
		r.outcomes = map[consumer.Outcome]int{}
	}
	r.outcomes[o]++
}

func (r *recorder) HandlerDuration(string, time.Duration) {}

func (r *recorder) InFlight(_ string, delta int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight += delta
}

func (r *recorder) BreakerChanged(name string, s gobreaker.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.states == nil {
		r.states = map[string]map[gobreaker.State]time.Time{}
	}
	if r.states[name] == nil {
		r.states[name] = map[gobreaker.State]time.Time{}
	}
	if _, seen := r.states[name][s]; !seen {
		r.states[name][s] = time.Now()
	}
}

func (r *recorder) Lag(_ string, _ int32, lag int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lags = append(r.lags, lag)
}

func (r *recorder) Released(topic string, partition int32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.released++
	if r.releasedOf == nil {
		r.releasedOf = map[string]int{}
	}
	r.releasedOf[fmt.Sprint(topic, "/", partition)]++
}

// releasesOf is how many times the consumer released one partition.
func (r *recorder) releasesOf(topic string, partition int32) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.releasedOf[fmt.Sprint(topic, "/", partition)]
}

func (r *recorder) releases() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.released
}

func (r *recorder) count(o consumer.Outcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcomes[o]
}

func (r *recorder) marks() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.lags)
}

func (r *recorder) firstState(name string, s gobreaker.State) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.states[name][s]
}

// counting is a handler that counts its calls in n and succeeds.
func counting(n *atomic.Int32) consumer.Handler {
	return consumer.HandlerFunc(func(context.Context, *consumer.Message) error {
		n.Add(1)
		return nil
	})
}
