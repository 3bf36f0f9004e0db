package testkit

import (
	"go.uber.org/goleak"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/courierkit/courier/internal/kafkafloor"
	"github.com/courierkit/courier/internal/kfakefloor"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Kafka is the broker set a test talks to.
type Kafka struct {
	// Brokers are the bootstrap addresses.
	Brokers []string
	// Cluster is the in-process broker, for fault injection (Control,
	// ControlKey); nil when the test runs against a real cluster.
	Cluster *kfake.Cluster
}

// KafkaOption adjusts the in-process cluster; a real cluster ignores it.
type KafkaOption func(*kafkaConfig)

type kafkaConfig struct {
	brokers   int
	opts      []kfake.Opt
	inProcess bool
}

// InProcess always starts the in-process cluster, even when
// COURIER_TEST_KAFKA_BROKERS names a real one: for fault tests that must
// control the broker.
func InProcess() KafkaOption { return func(c *kafkaConfig) { c.inProcess = true } }

// Brokers sets the number of in-process brokers. Defaults to 1.
func Brokers(n int) KafkaOption { return func(c *kafkaConfig) { c.brokers = n } }

// KfakeOptions passes options through to kfake.NewCluster, e.g. kfake.EnableSASL.
func KfakeOptions(opts ...kfake.Opt) KafkaOption {
	return func(c *kafkaConfig) { c.opts = append(c.opts, opts...) }
}

// NewKafka returns the real cluster named by COURIER_TEST_KAFKA_BROKERS, or
// else (or with InProcess) starts an in-process kfake cluster that stops
// when the test ends. The in-process cluster refuses, as Kafka 4.0 does,
// every request version Kafka 4.0 removed, and fails the test naming it.
func NewKafka(t testing.TB, opts ...KafkaOption) *Kafka {
	t.Helper()
	cfg := kafkaConfig{brokers: 1}
	for _, o := range opts {
		o(&cfg)
	}
	if brokers := ParseBrokers(envOr(EnvKafkaBrokers, "")); len(brokers) > 0 && !cfg.inProcess {
		k := &Kafka{Brokers: brokers}
		admin, err := sarama.NewClusterAdmin(brokers, k.Config())
		if err != nil {
			unavailable(t, "Kafka", strings.Join(brokers, ","), err)
		}
		_ = admin.Close()
		return k
	}
	cluster, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(cfg.brokers)}, cfg.opts...)...)
	if err != nil {
		t.Fatalf("testkit: start kfake: %v", err)
	}
	t.Cleanup(cluster.Close)
	kfakefloor.Refuse(cluster, func(api string, version int16) {
		t.Errorf("testkit: the broker refused %s version %d, which Kafka 4.0 removed (KIP-896); a client is configured for a Kafka older than %s", api, version, kafkafloor.OldestKafka)
	})
	return &Kafka{Brokers: cluster.ListenAddrs(), Cluster: cluster}
}

// ParseBrokers splits a comma-separated broker list, dropping blanks.
func ParseBrokers(list string) []string {
	var out []string
	for b := range strings.SplitSeq(list, ",") {
		if b = strings.TrimSpace(b); b != "" {
			out = append(out, b)
		}
	}
	return out
}

// Config returns a Sarama configuration suited to the test brokers: a client
// id, acks from all in-sync replicas, and short timeouts so a test that goes
// wrong fails quickly.
func (k *Kafka) Config() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.ClientID = "courier-test"
	cfg.Net.DialTimeout = 5 * time.Second
	cfg.Metadata.Retry.Backoff = 50 * time.Millisecond
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Return.Successes = true
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	return cfg
}

// Topic creates a topic unique to the test with the given partition count
// and deletes it when the test ends.
func (k *Kafka) Topic(t testing.TB, partitions int32) string {
	t.Helper()
	name := "t." + UniqueName(t, 120)
	k.CreateTopic(t, name, partitions)
	return name
}

// CreateTopic creates the topic name with the given partition count and
// deletes it when the test ends, e.g. the dead-letter topic of a Topic.
func (k *Kafka) CreateTopic(t testing.TB, name string, partitions int32) {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Config())
	if err != nil {
		unavailable(t, "Kafka", strings.Join(k.Brokers, ","), err)
	}
	t.Cleanup(func() { _ = admin.Close() })
	detail := &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: 1}
	if err := admin.CreateTopic(name, detail, false); err != nil {
		t.Fatalf("testkit: create topic %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := admin.DeleteTopic(name); err != nil {
			t.Errorf("testkit: delete topic %s: %v", name, err)
		}
	})
}

// ReadAll returns every record of topic up to its high-water marks,
// partition by partition in offset order, committing nothing.
func (k *Kafka) ReadAll(t testing.TB, topic string) []*sarama.ConsumerMessage {
	t.Helper()
	client, err := sarama.NewClient(k.Brokers, k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	partitions, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var out []*sarama.ConsumerMessage
	for _, p := range partitions {
		hwm, err := client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if hwm == 0 {
			continue
		}
		pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		for m := range pc.Messages() {
			out = append(out, m)
			if m.Offset+1 >= hwm {
				break
			}
		}
		_ = pc.Close()
	}
	return out
}

// Producer returns a SyncProducer on the test brokers that writes each
// message to the partition it names (sarama.NewManualPartitioner). It is
// idempotent, so a produce request retried on a busy machine never writes
// a record twice and a test counts exactly what it sent. It is closed when
// the test ends.
func (k *Kafka) Producer(t testing.TB) sarama.SyncProducer {
	t.Helper()
	return k.producer(t, sarama.NewManualPartitioner)
}

// KeyedProducer is Producer partitioning by key (sarama.NewHashPartitioner),
// as the consumer writes its dead letters: a test's records spread over a
// topic's partitions.
func (k *Kafka) KeyedProducer(t testing.TB) sarama.SyncProducer {
	t.Helper()
	return k.producer(t, sarama.NewHashPartitioner)
}

func (k *Kafka) producer(t testing.TB, partitioner sarama.PartitionerConstructor) sarama.SyncProducer {
	t.Helper()
	cfg := k.Config()
	cfg.Producer.Partitioner = partitioner
	cfg.Producer.Idempotent = true
	cfg.Net.MaxOpenRequests = 1
	p, err := sarama.NewSyncProducer(k.Brokers, cfg)
	if err != nil {
		t.Fatalf("testkit: producer: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// KfakeConnections are the goleak options that ignore the goroutines an
// in-process broker serves a connection with (its reader, the reader's
// wait for the next request, its writer): they are the broker's, and serve
// a test's own clients a moment after those close.
func KfakeConnections() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).read"),
		goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).read.func1"),
		goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*clientConn).write"),
	}
}
