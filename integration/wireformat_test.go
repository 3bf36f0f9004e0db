package integration_test

// The wire format, proven with clients nobody here wrote: kcat reads what
// the relay publishes, what the consumer leaves in a retry tier and in the
// dead-letter topic, and produces a record the consumer handles; redis-cli
// reads the dedupe marks. docs/wire-format.md documents each of these formats.

import (
	"context"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
)

// send writes records to partition 0 of the stack's topic.
func (s *stack) send(t *testing.T, msgs ...*sarama.ProducerMessage) {
	t.Helper()
	for _, m := range msgs {
		m.Topic = s.topic
	}
	if err := s.k.Producer(t).SendMessages(msgs); err != nil {
		t.Fatal(err)
	}
}

// payout is the record of payout p-<n>, key tx, with ce_id id and, when
// correlated, tx as its correlation id.
func payout(n int, tx, id string, correlated bool) *sarama.ProducerMessage {
	m := &sarama.ProducerMessage{
		Key:     sarama.StringEncoder(tx),
		Value:   sarama.StringEncoder(`{"payout_id":"p-` + strconv.Itoa(n) + `"}`),
		Headers: []sarama.RecordHeader{{Key: []byte("ce_id"), Value: []byte(id)}},
	}
	if correlated {
		m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte("ce_correlationid"), Value: []byte(tx)})
	}
	return m
}

// TestKcatReadsDeadLetters: the dead-letter topic a consumer writes is
// readable with kcat, which shows the key, the dlq_* headers and the JSON
// envelope as documented, and the value kcat printed decodes with dlq.
func TestKcatReadsDeadLetters(t *testing.T) {
	t.Parallel()
	kc := lookKcat(t)
	s := newStack(t, 1)
	s.send(t, payout(1, "tx_xyz", "id-1", true))
	runConsumer(t, s.consumerConfig(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		return errors.New("psp timeout")
	})))
	testkit.WaitFor(t, 10*time.Second, "offset 1 committed", func() bool { return s.settled(t) })

	out := runTool(t, kc, "", "-C", "-b", s.k.Brokers[0], "-t", s.deadLetter, "-e", "-q", "-f", "key=%k\\nheaders=%h\\nvalue=%s\\n")
	attempts := strconv.Itoa(consumer.DefaultMaxAttempts)
	containsAll(t, "kcat output", out,
		"key=tx_xyz\n",
		"dlq_envelope_version=1",
		"dlq_original_topic="+s.topic,
		"dlq_original_partition=0",
		"dlq_original_offset=0",
		"dlq_error=psp timeout",
		"dlq_error_kind=retries_exhausted",
		"dlq_retry_count="+attempts,
		"dlq_consumer_group="+s.group,
		"dlq_correlation_id=tx_xyz",
		"dlq_format=envelope",
		`value={"envelope_version":1,"original_topic":"`+s.topic+`","original_partition":0,"original_offset":0,`,
		`"original_key":"tx_xyz"`,
		`"original_headers":{"ce_correlationid":"tx_xyz","ce_id":"id-1"}`,
		`"original_message":{"payout_id":"p-1"},"original_message_base64":null,"error":"psp timeout","error_kind":"retries_exhausted","retry_count":`+attempts+`,`,
		`"correlation_id":"tx_xyz","consumer_group":"`+s.group+`","replay_count":0}`,
	)

	_, value, ok := strings.Cut(out, "\nvalue=")
	if !ok {
		t.Fatalf("kcat printed no value:\n%s", out)
	}
	env, err := dlq.Decode([]byte(strings.TrimSuffix(value, "\n")))
	if err != nil {
		t.Fatalf("dlq.Decode of the value kcat printed: %v", err)
	}
	if env.OriginalTopic != s.topic || env.OriginalKey == nil || *env.OriginalKey != "tx_xyz" || string(env.OriginalMessage) != `{"payout_id":"p-1"}` ||
		env.ErrorKind != dlq.KindRetriesExhausted || env.Attempts != consumer.DefaultMaxAttempts || env.ConsumerGroup != s.group {
		t.Errorf("decoded envelope %+v", env)
	}
}

// TestKcatAndRedisCliReadRetryState reads what the consumer leaves behind
// with real clients: kcat a record waiting in a retry tier, redis-cli the
// dedupe claim and mark of a handled message.
func TestKcatAndRedisCliReadRetryState(t *testing.T) {
	t.Parallel()
	kc := lookKcat(t)
	redisCli := tool(t, "redis-cli", "apt-get install redis-tools")
	s := newStack(t, 1)
	r := testkit.NewRedis(t)
	cfg := s.consumerConfig(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		if string(m.Key) == "tx_xyz" {
			return errors.New("psp timeout")
		}
		return nil
	}))
	s.retryTiers(t, &cfg, time.Minute)
	cfg.MaxAttempts = 1
	store := s.redisDedupe(t, r)
	cfg.Dedupe = consumer.DedupeConfig{Store: store, Lease: 10 * time.Second}
	s.send(t, payout(1, "tx_xyz", "id-1", true), payout(2, "tx_abc", "id-2", false))
	stop := runConsumer(t, cfg)
	testkit.WaitFor(t, 10*time.Second, "offset 2 committed", func() bool { return s.settled(t) })
	stop()

	out := runTool(t, kc, "", "-C", "-b", s.k.Brokers[0], "-t", s.topic+".retry.1m", "-e", "-q", "-f", "key=%k\\nheaders=%h\\nvalue=%s\\n")
	containsAll(t, "kcat output", out,
		"key=tx_xyz\n",
		"headers=ce_id=id-1,ce_correlationid=tx_xyz,retry_attempt=1,retry_failed_attempts=1,retry_original_topic="+s.topic+
			",retry_original_partition=0,retry_original_offset=0,retry_original_timestamp=",
		",retry_not_before=", ",retry_first_failed_at=", ",retry_last_error=psp timeout,retry_consumer_group="+s.group+"\n",
		`value={"payout_id":"p-1"}`,
	)

	opts := r.Client.Options()
	host, port, _ := strings.Cut(opts.Addr, ":")
	cli := func(args ...string) string {
		out, err := exec.Command(redisCli, append([]string{"-h", host, "-p", port, "-n", strconv.Itoa(opts.DB)}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	handled, failed := cli("GET", store.Key("id-2")), cli("EXISTS", store.Key("id-1"))
	t.Logf("redis-cli GET %s: %s; EXISTS %s: %s", store.Key("id-2"), handled, store.Key("id-1"), failed)
	token, ok := strings.CutPrefix(handled, "claim:")
	if !ok {
		t.Fatalf("the handled message's key holds %q, want claim:<token>", handled)
	}
	// The layout docs/wire-format.md documents: the owner's done set is
	// Prefix + ":" + Scope + ":done:" + token.
	doneSet := r.Prefix + ":" + s.group + ":done:" + token
	if member := cli("SISMEMBER", doneSet, "id-2"); member != "1" {
		t.Errorf("redis-cli SISMEMBER %s id-2 = %s, want 1: the handled message is in its claim's done set", doneSet, member)
	}
	for _, key := range []string{store.Key("id-2"), doneSet} {
		if ttl, _ := strconv.Atoi(cli("TTL", key)); ttl < int((23 * time.Hour).Seconds()) {
			t.Errorf("%s lives %ds, want the 24h window", key, ttl)
		}
	}
	if failed != "0" {
		t.Errorf("the failed message's claim is still there (EXISTS = %s); it must be released for its retry", failed)
	}
}

// TestConsumerHandlesARecordKcatProduced: a record another client produced,
// with the CloudEvents headers docs/wire-format.md documents, reaches the handler
// with its key, value, headers, id and correlation id.
func TestConsumerHandlesARecordKcatProduced(t *testing.T) {
	t.Parallel()
	kc := lookKcat(t)
	s := newStack(t, 1)
	runTool(t, kc, `order-7:{"amount_cents":500}`+"\n", "-P", "-b", strings.Join(s.k.Brokers, ","), "-t", s.topic, "-p", "0", "-K:",
		"-H", "ce_id=evt-kcat-7", "-H", "ce_correlationid=checkout-7", "-H", "x-region=eu")

	var mu sync.Mutex
	var got []consumer.Message
	runConsumer(t, s.consumerConfig(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, *m)
		return nil
	})))
	testkit.WaitFor(t, 10*time.Second, "the record kcat produced to be handled and committed", func() bool { return s.settled(t) })

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 {
		t.Fatalf("the handler saw %d messages, want the 1 kcat produced", len(got))
	}
	m := got[0]
	if m.Topic != s.topic || m.Partition != 0 || m.Offset != 0 || string(m.Key) != "order-7" || string(m.Value) != `{"amount_cents":500}` ||
		m.ID != "evt-kcat-7" || m.CorrelationID != "checkout-7" || m.Attempt != 1 || m.OriginalTopic != s.topic || m.RetryRound != 0 {
		t.Errorf("handled %s[%d]@%d key %q value %q id %q correlation %q attempt %d from %q round %d",
			m.Topic, m.Partition, m.Offset, m.Key, m.Value, m.ID, m.CorrelationID, m.Attempt, m.OriginalTopic, m.RetryRound)
	}
	var headers []string
	for _, h := range m.Headers {
		headers = append(headers, string(h.Key)+"="+string(h.Value))
	}
	if want := "ce_id=evt-kcat-7,ce_correlationid=checkout-7,x-region=eu"; strings.Join(headers, ",") != want {
		t.Errorf("headers %v, want %s", headers, want)
	}
}
