package integration_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/retrytopics"
)

// stack is a test's slice of Kafka: a topic, its dead-letter topic and a
// consumer group of its own.
type stack struct {
	k          *testkit.Kafka
	topic      string
	deadLetter string
	group      string
	partitions int32
	// version is the Sarama Version of the stack's relay, consumer and
	// replay; zero: Sarama's default.
	version sarama.KafkaVersion
}

// saramaConfig is the stack's Sarama config for courier's clients: the
// test kit's, at the stack's version.
func (s *stack) saramaConfig() *sarama.Config {
	cfg := s.k.Config()
	if s.version != (sarama.KafkaVersion{}) {
		cfg.Version = s.version
	}
	return cfg
}

func newStack(t *testing.T, partitions int32) *stack {
	t.Helper()
	k := testkit.NewKafka(t)
	s := &stack{k: k, topic: k.Topic(t, partitions), group: "g." + testkit.UniqueName(t, 100), partitions: partitions}
	s.deadLetter = dlq.Topic(s.topic, "")
	k.CreateTopic(t, s.deadLetter, 1)
	return s
}

// outbox migrates a PostgreSQL schema of the test's own and returns it
// with an Outbox writing to it.
func outbox(t *testing.T) (*testkit.PG, *producer.Outbox) {
	t.Helper()
	pg := testkit.Postgres(t)
	pg.Migrate(t)
	out, err := producer.NewOutbox(producer.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	return pg, out
}

// relay is a relay of pg's outbox publishing to the stack's brokers.
func (s *stack) relay(t *testing.T, pg *testkit.PG, cfg producer.RelayConfig) *producer.Relay {
	t.Helper()
	cfg.Schema, cfg.Brokers, cfg.Logger = pg.Schema, s.k.Brokers, testkit.Logger(t)
	if cfg.Sarama == nil && s.version != (sarama.KafkaVersion{}) {
		cfg.Sarama = producer.NewSaramaConfig()
		cfg.Sarama.Version = s.version
	}
	r, err := producer.NewRelay(pg.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// consumerConfig is a config of the stack's group on its topic, with
// test-sized waits and offsets committed often, so that a test sees them
// soon.
func (s *stack) consumerConfig(t *testing.T, h consumer.Handler) consumer.Config {
	sc := s.saramaConfig()
	sc.Consumer.Offsets.AutoCommit.Interval = 50 * time.Millisecond
	sc.Consumer.Group.Heartbeat.Interval = 200 * time.Millisecond
	sc.Consumer.Group.Rebalance.Timeout = 10 * time.Second
	sc.Producer.Retry.Backoff = 20 * time.Millisecond
	return consumer.Config{
		Brokers: s.k.Brokers, Sarama: sc, Group: s.group, Topics: []string{s.topic}, Handler: h,
		Backoff:        backoff.Backoff{Base: 5 * time.Millisecond, Max: 50 * time.Millisecond},
		AttemptTimeout: 5 * time.Second, ShutdownTimeout: 5 * time.Second,
		// The handlers fail on purpose: their retries are no news.
		Logger: testkit.Logger(t, `msg="handler failed; retrying"`, `msg="message sent to a retry topic"`, `msg="message dead-lettered"`),
	}
}

// retryTiers gives cfg retry tiers of delays, whose topics it creates with
// the main topic's partitions.
func (s *stack) retryTiers(t *testing.T, cfg *consumer.Config, delays ...time.Duration) {
	t.Helper()
	cfg.RetryTopics = retrytopics.Config{Delays: delays}
	topology, err := retrytopics.New(s.topic, cfg.RetryTopics, cfg.DeadLetterSuffix)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range topology.Topics() {
		s.k.CreateTopic(t, topic, s.partitions)
	}
}

// redisDedupe is a Redis dedupe store on r's key prefix, scoped to the
// stack's group.
func (s *stack) redisDedupe(t *testing.T, r *testkit.Redis) *dedupe.Redis {
	t.Helper()
	store, err := dedupe.NewRedis(r.Client, dedupe.RedisConfig{Scope: s.group, Prefix: r.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// settled reports whether the group committed every partition of the
// stack's topic up to its high-water mark: every record on it, duplicates
// and replays included, was handled, skipped or dead-lettered.
func (s *stack) settled(t *testing.T) bool {
	t.Helper()
	client, err := sarama.NewClient(s.k.Brokers, s.k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	partitions := make([]int32, s.partitions)
	for p := range partitions {
		partitions[p] = int32(p)
	}
	offsets, err := admin.ListConsumerGroupOffsets(s.group, map[string][]int32{s.topic: partitions})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		return false // the group has not joined yet
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range partitions {
		end, err := client.GetOffset(s.topic, p, sarama.OffsetNewest)
		if err != nil {
			t.Fatal(err)
		}
		if b := offsets.GetBlock(s.topic, p); end > 0 && (b == nil || b.Offset != end) {
			return false
		}
	}
	return true
}

// start runs run (a relay's or a consumer's Run) until the test ends or
// the returned function is called, and then fails the test unless run
// returns nil within 15s of its context ending.
func start(t *testing.T, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		timeout := time.NewTimer(15 * time.Second)
		defer timeout.Stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-timeout.C:
			t.Errorf("Run did not return within 15s of its context ending")
		}
	})
	t.Cleanup(stop)
	return stop
}

// runConsumer builds a consumer of cfg and starts it (see start).
func runConsumer(t *testing.T, cfg consumer.Config) (stop func()) {
	t.Helper()
	c, err := consumer.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return start(t, c.Run)
}

// tool returns the path of a command-line client a test reads courier's
// wire format with. A machine without it skips the test with a hint, and
// fails it under CI=true: CI never passes by skipping.
func tool(t *testing.T, name, install string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("%s is not installed (%s, or `make services`): %v", name, install, err)
	}
	t.Skipf("%s is not installed (%s, or `make services`): %v; under CI=true this fails", name, install, err)
	return ""
}

// lookKcat returns kcat's path (see tool).
func lookKcat(t *testing.T) string {
	t.Helper()
	return tool(t, "kcat", "apt-get install kcat")
}

// runTool runs the command-line client at path (see tool) with args and
// stdin and returns what it printed; output that is not plain text is
// logged quoted.
func runTool(t *testing.T, path, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	var out, errOut bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(stdin), &out, &errOut
	name := filepath.Base(path)
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strconv.Quote(strings.Join(args, " ")), err, printable(out.String()), printable(errOut.String()))
	}
	t.Logf("%s %s printed:\n%s", name, strconv.Quote(strings.Join(args, " ")), printable(out.String()))
	return out.String()
}

// printable is s as it is when it is text of printable lines, else quoted.
func printable(s string) string {
	for _, r := range s {
		if r != '\n' && r != '\t' && !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// containsAll fails the test for each of want that got lacks.
func containsAll(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q", what, w)
		}
	}
}
