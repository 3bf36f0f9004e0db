package consumer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	courierrecord "github.com/courierkit/courier/record"
	"github.com/courierkit/courier/retrytopics"
)

// withRetry creates the retry topics of delays (as many partitions as the
// main topic) and sets them in cfg, with one attempt per tier.
func (f *fixture) withRetry(t *testing.T, cfg *consumer.Config, delays ...time.Duration) retrytopics.Topology {
	t.Helper()
	cfg.RetryTopics = retrytopics.Config{Delays: delays}
	cfg.MaxAttempts = 1
	topo, err := retrytopics.New(f.topic, cfg.RetryTopics, cfg.DeadLetterSuffix)
	if err != nil {
		t.Fatal(err)
	}
	for _, topic := range topo.Topics() {
		f.k.CreateTopic(t, topic, f.partitions)
	}
	return topo
}

// call is one handler call as a test records it.
type call struct {
	at      time.Time
	topic   string
	attempt int
	round   int
	origin  string
	key     string
	value   string
}

// calls records handler calls, safe for concurrent use.
type calls struct {
	mu   sync.Mutex
	list []call
}

func (c *calls) add(m *consumer.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.list = append(c.list, call{at: time.Now(), topic: m.Topic, attempt: m.Attempt, round: m.RetryRound,
		origin: m.OriginalTopic, key: string(m.Key), value: string(m.Value)})
}

func (c *calls) all() []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.list)
}

func (c *calls) count(value string) int {
	n := 0
	for _, got := range c.all() {
		if got.value == value {
			n++
		}
	}
	return n
}

// recording is a config for the fixture whose handler records each call
// in seen and succeeds.
func (f *fixture) recording(t *testing.T, seen *calls) consumer.Config {
	return f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		seen.add(m)
		return nil
	}))
}

// failingOnMain is a handler that records each call in seen and fails the
// messages whose value is one of values on their main topic (round 0), and
// only there.
func failingOnMain(seen *calls, values ...string) consumer.Handler {
	return consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		seen.add(m)
		if m.RetryRound == 0 && slices.Contains(values, string(m.Value)) {
			return fmt.Errorf("%s fails on its main topic", m.Value)
		}
		return nil
	})
}

// keyOrder is a Redis key order on the test's own key prefix, scoped to the
// fixture's group.
func (f *fixture) keyOrder(t *testing.T, r *testkit.Redis) *retrytopics.RedisKeyOrder {
	t.Helper()
	order, err := retrytopics.NewRedisKeyOrder(r.Client, retrytopics.RedisKeyOrderConfig{Scope: f.group, Prefix: r.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	return order
}

// retryRecord is a record as a retry tier holds it: key k, value, a ce_id
// and the retry headers of info.
func retryRecord(value string, info retrytopics.Info) *sarama.ProducerMessage {
	m := record("k", value)
	for _, h := range retrytopics.Headers(nil, info) {
		m.Headers = append(m.Headers, sarama.RecordHeader(h))
	}
	return m
}

// courierHeaders are the headers of a record read back, as courier's
// headers: the same structs, not copies.
func courierHeaders(hs []*sarama.RecordHeader) []*courierrecord.Header {
	out := make([]*courierrecord.Header, len(hs))
	for i, h := range hs {
		out[i] = (*courierrecord.Header)(h)
	}
	return out
}

func TestRetryTopicsHandleOnAttempt3NeverEarly(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	var seen calls
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		seen.add(m)
		if m.Attempt < 3 {
			return fmt.Errorf("psp 503 on attempt %d", m.Attempt)
		}
		return nil
	}))
	topo := f.withRetry(t, &cfg, time.Second, 2*time.Second)
	if got := topo.Topics(); !slices.Equal(got, []string{f.topic + ".retry.1s", f.topic + ".retry.2s"}) {
		t.Fatalf("retry topics %q", got)
	}
	f.produce(t, f.topic, awkward())
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "attempt 3", func() bool { return len(seen.all()) == 3 })
	stop()

	got := seen.all()
	for i, want := range []struct {
		topic string
		round int
		wait  time.Duration
	}{{f.topic, 0, 0}, {f.topic + ".retry.1s", 1, time.Second}, {f.topic + ".retry.2s", 2, 2 * time.Second}} {
		c := got[i]
		if c.topic != want.topic || c.attempt != i+1 || c.round != want.round || c.origin != f.topic {
			t.Errorf("call %d: topic %s attempt %d round %d original %s; want %s, %d, %d, %s", i, c.topic, c.attempt, c.round, c.origin,
				want.topic, i+1, want.round, f.topic)
		}
		// retry_not_before has millisecond precision.
		if i > 0 && c.at.Sub(got[i-1].at) < want.wait-time.Millisecond {
			t.Errorf("call %d came %v after the failure before it, before its tier's delay of %v", i, c.at.Sub(got[i-1].at), want.wait)
		}
	}
	if n := len(f.readAll(t, f.dlq)); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
	// The records in the tiers: the original key, value and headers, then
	// the retry headers, once each.
	for i, topic := range topo.Topics() {
		recs := f.readAll(t, topic)
		if len(recs) != 1 {
			t.Fatalf("%s holds %d records, want 1", topic, len(recs))
		}
		rec := recs[0]
		want := awkward()
		key, _ := want.Key.Encode()
		value, _ := want.Value.Encode()
		if !bytes.Equal(rec.Key, key) || !bytes.Equal(rec.Value, value) {
			t.Errorf("%s: key %q value %q, want the original", topic, rec.Key, rec.Value)
		}
		for j, h := range want.Headers {
			if !bytes.Equal(rec.Headers[j].Key, h.Key) || !bytes.Equal(rec.Headers[j].Value, h.Value) {
				t.Errorf("%s: header %d is %q=%q, want the original %q=%q", topic, j, rec.Headers[j].Key, rec.Headers[j].Value, h.Key, h.Value)
			}
		}
		names := map[string]int{}
		for _, h := range rec.Headers[len(want.Headers):] {
			names[string(h.Key)]++
		}
		for _, name := range []string{retrytopics.HeaderAttempt, retrytopics.HeaderOriginalTopic, retrytopics.HeaderNotBefore,
			retrytopics.HeaderFirstFailedAt, retrytopics.HeaderLastError, retrytopics.HeaderFailedAttempts} {
			if names[name] != 1 {
				t.Errorf("%s: %d %s headers, want 1 (replaced, never appended)", topic, names[name], name)
			}
		}
		info, _, err := retrytopics.Parse(courierHeaders(rec.Headers))
		if err != nil {
			t.Fatal(err)
		}
		if info.Round != i+1 || info.FailedAttempts != i+1 || info.OriginalTopic != f.topic || info.OriginalOffset != 0 ||
			info.LastError != fmt.Sprintf("psp 503 on attempt %d", i+1) || info.ConsumerGroup != f.group {
			t.Errorf("%s: retry headers %+v", topic, info)
		}
	}
}

func TestRetryTopicsAlwaysFailingReachesTheDeadLetterTopicWithItsHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	var seen calls
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		seen.add(m)
		return errors.New("psp timeout after 30s")
	}))
	f.withRetry(t, &cfg, 50*time.Millisecond, 100*time.Millisecond)
	cfg.MaxAttempts = 2 // two attempts per tier: six in all
	f.produce(t, f.topic, awkward())
	start := time.Now()
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "a dead letter", func() bool { return len(f.readAll(t, f.dlq)) == 1 })
	testkit.WaitFor(t, 10*time.Second, "offset 1 committed", func() bool { return f.committed(t, 0) == 1 })
	stop()

	var attempts []int
	for _, c := range seen.all() {
		attempts = append(attempts, c.attempt)
	}
	if !slices.Equal(attempts, []int{1, 2, 3, 4, 5, 6}) {
		t.Errorf("attempts %v, want 1 to 6 (two per topic)", attempts)
	}
	// The envelope holds the record as it was on the main topic, and the
	// whole history.
	_, env := f.onlyDeadLetter(t)
	if env.Attempts != 6 || env.ErrorKind != dlq.KindRetriesExhausted || env.Error != "psp timeout after 30s" {
		t.Errorf("envelope retry count %d kind %s error %q, want 6 retries_exhausted", env.Attempts, env.ErrorKind, env.Error)
	}
	first := seen.all()[0].at
	if env.FirstFailedAt.Before(start.Truncate(time.Millisecond)) || env.FirstFailedAt.After(first.Add(time.Millisecond)) ||
		!env.FailedAt.After(env.FirstFailedAt) {
		t.Errorf("first failed at %v (first attempt at %v), failed at %v", env.FirstFailedAt, first, env.FailedAt)
	}
}

func TestSlowRetryTierDoesNotSlowTheMainTopic(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	var seen calls
	cfg := f.config(t, failingOnMain(&seen, "poison"))
	const delay = time.Minute
	f.withRetry(t, &cfg, delay)
	f.produce(t, f.topic, record("k", "poison"))
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "the poison message in its tier", func() bool {
		return len(f.readAll(t, f.topic+".retry.1m")) == 1
	})
	var msgs []*sarama.ProducerMessage
	for i := range 200 {
		msgs = append(msgs, record("key-"+strconv.Itoa(i%7), "v"+strconv.Itoa(i)))
	}
	f.produce(t, f.topic, msgs...)
	// The deadline, a third of the tier's delay, is the assertion: the main
	// topic does not wait for the parked message.
	testkit.WaitFor(t, delay/3, "200 main-topic messages handled", func() bool { return f.committed(t, 0) == 201 })
	stop()
	if n := seen.count("poison"); n != 1 {
		t.Errorf("poison handled %d times while it waits out its minute, want 1", n)
	}
}

func TestRetryTopicRecordsOfAnotherGroupAreLeftAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	var seen calls
	cfg := f.recording(t, &seen)
	f.withRetry(t, &cfg, time.Millisecond)
	info := func(group string) retrytopics.Info {
		return retrytopics.Info{Round: 1, FailedAttempts: 1, OriginalTopic: f.topic, NotBefore: time.Now(), ConsumerGroup: group}
	}
	f.produce(t, f.topic+".retry.1ms", retryRecord("theirs", info("another-group")), retryRecord("ours", info(f.group)))
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "our retry record handled", func() bool { return seen.count("ours") == 1 })
	stop()
	if n := seen.count("theirs"); n != 0 {
		t.Errorf("another group's retry record handled %d times", n)
	}
}

func TestMalformedRetryHeadersAreDeadLetteredUnhandled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	var seen calls
	cfg := f.recording(t, &seen)
	f.withRetry(t, &cfg, time.Millisecond)
	bad := record("k", "bad")
	bad.Headers = append(bad.Headers,
		sarama.RecordHeader{Key: []byte(retrytopics.HeaderAttempt), Value: []byte("1")},
		sarama.RecordHeader{Key: []byte(retrytopics.HeaderOriginalTopic), Value: []byte(f.topic)},
		sarama.RecordHeader{Key: []byte(retrytopics.HeaderOriginalPartition), Value: []byte("0")},
		sarama.RecordHeader{Key: []byte(retrytopics.HeaderOriginalOffset), Value: []byte("7")},
		sarama.RecordHeader{Key: []byte(retrytopics.HeaderNotBefore), Value: []byte("soon")})
	bare := record("k", "bare") // on a retry topic without retry headers
	fine := retryRecord("fine", retrytopics.Info{Round: 1, OriginalTopic: f.topic, NotBefore: time.Now()})
	f.produce(t, f.topic+".retry.1ms", bad, bare, fine)
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "two dead letters", func() bool { return len(f.readAll(t, f.dlq)) == 2 })
	testkit.WaitFor(t, 10*time.Second, "the good retry record handled", func() bool { return len(seen.all()) == 1 })
	stop()
	if got := seen.all(); got[0].value != "fine" {
		t.Errorf("handled %q, want only the well-formed retry record", got[0].value)
	}
	for i, env := range f.deadLetters(t) {
		if env.ErrorKind != dlq.KindPermanent || env.OriginalTopic != f.topic || env.OriginalPartition != dlq.NoPartition {
			t.Errorf("dead letter %d: kind %s original %s/%d, want permanent from %s/-1", i, env.ErrorKind, env.OriginalTopic, env.OriginalPartition, f.topic)
		}
		o, err := env.Original()
		if err != nil {
			t.Fatal(err)
		}
		if len(o.Headers) != 1 || string(o.Headers[0].Key) != "ce_id" {
			t.Errorf("dead letter %d keeps headers %v, want only ce_id (the retry headers stripped)", i, o.Headers)
		}
	}
	if errText := f.deadLetters(t)[0].Error; !bytes.Contains([]byte(errText), []byte("retry_not_before")) {
		t.Errorf("error %q does not name the malformed header", errText)
	}
}

func TestRetryTopicsAreCreatedWithTheMainTopicsPartitions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 3, testkit.InProcess())
	var seen calls
	cfg := f.config(t, failingOnMain(&seen, "v"))
	cfg.MaxAttempts = 1
	cfg.RetryTopics = retrytopics.Config{Delays: []time.Duration{10 * time.Millisecond}, CreateTopics: true}
	f.produce(t, f.topic, record("k", "v"))
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "the retry handled", func() bool { return len(seen.all()) == 2 })
	stop()

	admin, err := sarama.NewClusterAdmin(f.k.Brokers, f.k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	topics, err := admin.ListTopics()
	if err != nil {
		t.Fatal(err)
	}
	if got := topics[f.topic+".retry.10ms"].NumPartitions; got != 3 {
		t.Errorf("the created retry topic has %d partitions, want the main topic's 3", got)
	}
}

func TestKeyOrderAcrossRetryTiers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	r := testkit.NewRedis(t)
	order := f.keyOrder(t, r)
	var seen calls
	failed := map[string]bool{}
	var mu sync.Mutex
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		seen.add(m)
		mu.Lock()
		defer mu.Unlock()
		// k1 and k4 fail once; everything else succeeds.
		if v := string(m.Value); (v == "k1" || v == "k4") && !failed[v] {
			failed[v] = true
			return errors.New("downstream 503")
		}
		return nil
	}))
	f.withRetry(t, &cfg, 300*time.Millisecond, 600*time.Millisecond)
	cfg.KeyOrder = order
	// k1, k2 and k3 come in one batch: k2 and k3 were free when the batch
	// was looked up, and must still follow k1 once it is parked.
	f.produce(t, f.topic, record("K", "k1"), record("K", "k2"), record("L", "l1"), record("K", "k3"))
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "k1, k2, k3 handled", func() bool {
		return seen.count("k2") == 1 && seen.count("k3") == 1 && seen.count("k1") == 2
	})
	// A message of K arriving later, while nothing of K is parked, is
	// handled at once; k4 fails and k5 follows it.
	f.produce(t, f.topic, record("K", "k4"), record("K", "k5"))
	testkit.WaitFor(t, 20*time.Second, "k4 and k5 handled", func() bool { return seen.count("k5") == 1 && seen.count("k4") == 2 })
	stop()

	var handledK []string
	var l1At, k1RetryAt time.Time
	for _, c := range seen.all() {
		switch {
		case c.value == "l1":
			l1At = c.at
		case c.key == "K" && c.round > 0 && c.value == "k1":
			k1RetryAt = c.at
		}
		if c.key == "K" {
			handledK = append(handledK, c.value)
		}
	}
	if want := []string{"k1", "k1", "k2", "k3", "k4", "k4", "k5"}; !slices.Equal(handledK, want) {
		t.Errorf("K handled in the order %q, want %q", handledK, want)
	}
	if !l1At.Before(k1RetryAt) {
		t.Errorf("l1 handled at %v, after k1's retry at %v: another key waited for K", l1At, k1RetryAt)
	}
	keys, err := r.Client.Keys(context.Background(), r.Prefix+"*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("Redis keeps %q (%v) after every message settled, want nothing parked", keys, err)
	}
}

func TestRunStopsWhileWaitingForRetryTopics(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error { return nil }))
	cfg.RetryTopics = retrytopics.Config{Delays: []time.Duration{time.Second}} // its topic is never created
	logs := &testkit.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "the missing retry topic reported", func() bool {
		return strings.Contains(logs.String(), "the retry topics are not ready") && strings.Contains(logs.String(), f.topic+".retry.1s")
	})
	stop() // fails the test unless Run returns within 15s
}

func TestRecordTooLargeForItsRetryTopicIsDeadLettered(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1, testkit.InProcess())
	r := testkit.NewRedis(t)
	order := f.keyOrder(t, r)
	var seen calls
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		seen.add(m)
		if len(m.Value) > 1000 {
			return errors.New("downstream 503")
		}
		return nil
	}))
	cfg.RetryTopics = retrytopics.Config{Delays: []time.Duration{10 * time.Millisecond}}
	cfg.MaxAttempts = 1
	cfg.KeyOrder = order
	// The retry topic takes smaller records than the main topic.
	admin, err := sarama.NewClusterAdmin(f.k.Brokers, f.k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	limit := "1500"
	if err := admin.CreateTopic(f.topic+".retry.10ms", &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: 1,
		ConfigEntries: map[string]*string{"max.message.bytes": &limit}}, false); err != nil {
		t.Fatal(err)
	}
	f.produce(t, f.topic, record("K", strings.Repeat("x", 1400)), record("K", "small"))
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "the dead letter and the next message of its key", func() bool {
		return len(f.readAll(t, f.dlq)) == 1 && seen.count("small") == 1
	})
	stop()
	env := f.deadLetters(t)[0]
	if env.ErrorKind != dlq.KindPermanent || !strings.Contains(env.Error, "downstream 503") || !strings.Contains(env.Error, "too large for retry topic") {
		t.Errorf("dead letter kind %s error %q, want permanent, naming both the failure and the size", env.ErrorKind, env.Error)
	}
	keys, err := r.Client.Keys(context.Background(), r.Prefix+"*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("Redis keeps %q (%v): the dead-lettered message still holds its key", keys, err)
	}
}

func TestRetryRecordDueFarAheadWaitsNoLongerThanItsTier(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	var seen calls
	cfg := f.recording(t, &seen)
	f.withRetry(t, &cfg, 200*time.Millisecond)
	tomorrow := time.Now().Add(24 * time.Hour)
	ahead := retryRecord("ahead", retrytopics.Info{Round: 1, OriginalTopic: f.topic, NotBefore: tomorrow})
	// Another group's, due far ahead: skipped at once.
	theirs := retryRecord("theirs", retrytopics.Info{Round: 1, OriginalTopic: f.topic, NotBefore: tomorrow, ConsumerGroup: "another-group"})
	written := time.Now()
	f.produce(t, f.topic+".retry.200ms", theirs, ahead)
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 10*time.Second, "the record due tomorrow handled after its tier's delay", func() bool { return seen.count("ahead") == 1 })
	stop()
	if at := seen.all()[0].at; at.Before(written.Add(200 * time.Millisecond)) {
		t.Errorf("handled %v after it was written, before its tier's delay", at.Sub(written))
	}
}
