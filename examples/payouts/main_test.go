package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/sony/gobreaker/v2"
	"go.uber.org/goleak"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/examples/payouts/psp"
	"github.com/courierkit/courier/internal/testkit"
)

// TestPayoutsSurviveAnOutage runs the worker against a PSP that is down
// when the orders arrive and comes back once the breaker has opened: every
// valid order is paid exactly once (one of them is delivered twice), the
// poison ones land in the dead-letter topic, and no valid order is
// dead-lettered. Its probes answer 200 once it consumes, the PSP's outage
// included.
func TestPayoutsSurviveAnOutage(t *testing.T) {
	k := testkit.NewKafka(t)
	rdb := testkit.NewRedis(t)
	stub, err := psp.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stub.Close)
	stub.SetMode(psp.ModeFail)

	topic := k.Topic(t, 2)
	cfg, err := parseConfig(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	metrics := &recorder{}
	cfg.Brokers = k.Brokers
	cfg.Topic = topic
	cfg.Group = testkit.UniqueName(t, 60)
	cfg.RedisURL = testkit.RedisURL()
	cfg.RedisPrefix = rdb.Prefix
	cfg.PSPURL = stub.URL()
	cfg.RetryDelays = []time.Duration{time.Second, 2 * time.Second}
	cfg.Backoff = 10 * time.Millisecond
	cfg.BreakerOpenFor = 100 * time.Millisecond
	cfg.Logger = testkit.Logger(t, "circuit breaker changed", "psp: 503")
	cfg.Hooks = []consumer.Hook{metrics}
	if cfg.HealthListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	probes := "http://" + cfg.HealthListener.Addr().String()
	if k.Cluster == nil { // a real cluster: remove the topics the worker creates
		t.Cleanup(func() { deleteTopics(t, k, topic+".retry.1s", topic+".retry.2s", topic+".dlq") })
	}

	// The orders, as the outbox relay publishes them; order-1 twice, as a
	// relay that crashed after publishing would.
	valid := []string{"order-1", "order-2", "order-3", "order-4", "order-5", "order-6"}
	poison := map[string]string{"order-zero": `"amount_cents":0`, "order-negative": `"amount_cents":-250`}
	p := k.Producer(t)
	send := func(partition int32, id, value string) {
		t.Helper()
		_, _, err := p.SendMessage(&sarama.ProducerMessage{
			Topic: topic, Partition: partition, Key: sarama.StringEncoder(id), Value: sarama.StringEncoder(value),
			Headers: []sarama.RecordHeader{
				{Key: []byte("ce_id"), Value: []byte("evt-" + id)},
				{Key: []byte("ce_type"), Value: []byte("OrderCreated")},
			},
		})
		if err != nil {
			t.Fatalf("produce %s: %v", id, err)
		}
	}
	for i, id := range valid {
		send(int32(i%2), id, fmt.Sprintf(`{"order_id":%q,"amount_cents":%d,"currency":"EUR"}`, id, 1000+i))
	}
	send(0, "order-1", `{"order_id":"order-1","amount_cents":1000,"currency":"EUR"}`)
	for id, amount := range poison {
		send(1, id, fmt.Sprintf(`{"order_id":%q,%s,"currency":"EUR"}`, id, amount))
	}

	before := goleak.IgnoreCurrent()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()
	stopped := false
	stopRun := func() {
		if !stopped {
			stopped = true
			stop()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	}
	t.Cleanup(stopRun)

	testkit.WaitFor(t, 30*time.Second, "the PSP breaker to open", func() bool { return metrics.opened() > 0 })
	if got := stub.Paid(); got != 0 {
		t.Fatalf("Paid() = %d while the PSP was down", got)
	}
	checkProbes(t, probes, "while the PSP is down") // in its group: the PSP's outage is not the consumer's
	stub.SetMode(psp.ModeOK)
	testkit.WaitFor(t, 30*time.Second, "every valid order paid and every poison order dead-lettered", func() bool {
		return stub.Paid() == len(valid) && metrics.count(consumer.OutcomeDeadLettered) == len(poison)
	})
	testkit.WaitFor(t, 30*time.Second, "the duplicate of order-1 skipped", func() bool {
		return metrics.count(consumer.OutcomeDeduplicated) == 1
	})

	checkProbes(t, probes, "once the orders are paid")

	for _, id := range valid {
		if _, ok := stub.PaidPayout("evt-" + id); !ok {
			t.Errorf("%s was not paid", id)
		}
	}
	if got := stub.Duplicates(); got != 0 {
		t.Errorf("the PSP was asked %d times to pay an order paid already; dedupe should have skipped the duplicate", got)
	}
	if got := metrics.count(consumer.OutcomeSentToRetry); got != 0 {
		t.Errorf("%d messages went to a retry topic; the open breaker should have paused them", got)
	}

	var dead []string
	for _, r := range k.ReadAll(t, topic+".dlq") {
		env, err := dlq.Read(r.Key, r.Value, headers(r.Headers))
		if err != nil {
			t.Fatalf("dead letter at offset %d: %v", r.Offset, err)
		}
		dead = append(dead, string(r.Key))
		if env.ErrorKind != "permanent" {
			t.Errorf("%s dead-lettered as %q, want permanent (the PSP refused it)", r.Key, env.ErrorKind)
		}
	}
	slices.Sort(dead)
	if want := []string{"order-negative", "order-zero"}; !slices.Equal(dead, want) {
		t.Errorf("dead letters %v, want only the poison orders %v", dead, want)
	}

	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Config())
	if err != nil {
		t.Fatal(err)
	}
	topics, err := admin.ListTopics()
	_ = admin.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{topic + ".retry.1s", topic + ".retry.2s", topic + ".dlq"} {
		if _, ok := topics[want]; !ok {
			t.Errorf("topic %s was not created on start", want)
		}
	}

	stopRun()
	// kfake serves the connections the test's own clients opened.
	goleak.VerifyNone(t, append(testkit.KfakeConnections(), before)...)
}

// checkProbes fails the test unless GET /livez and /readyz at base answer
// 200 with a JSON body saying live and ready.
func checkProbes(t *testing.T, base, when string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for path, want := range map[string]string{"/livez": `"status":"live"`, "/readyz": `"status":"ready"`} {
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s %s: %v", path, when, err)
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) || resp.Header.Get("Content-Type") != "application/json" {
			t.Errorf("GET %s %s: %d %s, want 200 with %s", path, when, resp.StatusCode, body, want)
		}
	}
}

func TestParseConfig(t *testing.T) {
	if cfg, err := parseConfig(nil, func(string) string { return "" }); err != nil || cfg.HealthAddr != ":8081" {
		t.Errorf("parseConfig(no flags) = %+v, %v; want the probes on :8081", cfg, err)
	}
	env := map[string]string{"COURIER_BROKERS": "k1:9092,k2:9092", "COURIER_HEALTH_ADDR": "127.0.0.1:9191"}
	cfg, err := parseConfig([]string{"--retry-delays", "1s,1m", "--psp-fail-for", "10s"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Brokers, []string{"k1:9092", "k2:9092"}) || cfg.RedisURL != "redis://127.0.0.1:6379/0" ||
		cfg.Topic != "orders" || cfg.Group != "payouts" || cfg.DedupeScope != "payouts" ||
		!slices.Equal(cfg.RetryDelays, []time.Duration{time.Second, time.Minute}) || cfg.PSPFailFor != 10*time.Second ||
		cfg.MaxAttempts <= cfg.BreakerFailures || cfg.HealthAddr != "127.0.0.1:9191" {
		t.Errorf("parseConfig = %+v", cfg)
	}
	for _, args := range [][]string{
		{"--retry-delays", "5s,soon"},
		{"--psp-url", "http://psp:8080", "--psp-fail-for", "10s"},
		{"--no-such-flag"},
	} {
		if _, err := parseConfig(args, func(string) string { return "" }); err == nil {
			t.Errorf("parseConfig(%q) succeeded, want an error", args)
		}
	}
}

// recorder is a consumer.Hook counting outcomes and breaker openings.
type recorder struct {
	mu       sync.Mutex
	outcomes map[consumer.Outcome]int
	openings int
}

func (r *recorder) Message(_ string, o consumer.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.outcomes == nil {
		r.outcomes = map[consumer.Outcome]int{}
	}
	r.outcomes[o]++
}

func (r *recorder) BreakerChanged(_ string, s gobreaker.State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s == gobreaker.StateOpen {
		r.openings++
	}
}

func (r *recorder) HandlerDuration(string, time.Duration) {}
func (r *recorder) InFlight(string, int)                  {}
func (r *recorder) Lag(string, int32, int64)              {}
func (r *recorder) Released(string, int32)                {}

func (r *recorder) count(o consumer.Outcome) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.outcomes[o]
}

func (r *recorder) opened() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.openings
}

func headers(hs []*sarama.RecordHeader) []dlq.Header {
	out := make([]dlq.Header, len(hs))
	for i, h := range hs {
		out[i] = dlq.Header{Key: h.Key, Value: h.Value}
	}
	return out
}

func deleteTopics(t *testing.T, k *testkit.Kafka, topics ...string) {
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Config())
	if err != nil {
		t.Errorf("delete topics: %v", err)
		return
	}
	defer admin.Close()
	for _, topic := range topics {
		_ = admin.DeleteTopic(topic)
	}
}
