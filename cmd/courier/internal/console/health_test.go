package console_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/cmd/courier/internal/console"
	"github.com/courierkit/courier/internal/testkit"
)

// TestHealthShowsGroupLagAndRelayBreakers: the health page gives a
// consumer group's lag per partition (5 records, 2 committed: lag 3) and
// each relay's breaker and held partitions as its /healthz says (the
// error's control bytes escaped), or that it is unreachable.
func TestHealthShowsGroupLagAndRelayBreakers(t *testing.T) {
	t.Parallel()
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"status":"ok","breaker":"open","held":[{"topic":"orders","partition":3,"since":"2026-12-01T10:00:00Z",` +
			`"until":"2026-12-01T10:00:30Z","error":"orders/3: NOT_ENOUGH_REPLICAS\u001b[2J"}]}`))
	}))
	defer relay.Close()
	const gone = "http://127.0.0.1:1" // a port no test takes, unlike a closed server's
	r := newRig(t, func(c *console.Config) { c.Relays = []string{relay.URL + "/healthz", gone + "/healthz"} })
	topic := r.kafka.Topic(t, 1)
	p := r.kafka.Producer(t)
	for range 5 {
		if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.StringEncoder("x")}); err != nil {
			t.Fatal(err)
		}
	}
	group := "g-" + testkit.UniqueName(t, 40)
	consumeTwoOfFive(t, r.kafka, group, topic)

	c := newClient(t, r.url)
	status, body := c.get("/health")
	row := regexp.MustCompile(`<td>` + regexp.QuoteMeta(topic) + `</td><td class="num">0</td><td class="num">2</td><td class="num">5</td><td class="num">3</td>`)
	if status != http.StatusOK || !strings.Contains(body, group) || !row.MatchString(body) {
		t.Errorf("the health page (%d) does not show %s at offset 2 of 5, lag 3:\n%s", status, group, body)
	}
	if !strings.Contains(body, `class="breaker-open">open<`) || !strings.Contains(body, "unreachable") {
		t.Errorf("the health page does not show one relay's open breaker and the other unreachable:\n%s", body)
	}
	if !strings.Contains(body, "<strong>orders/3</strong> since 2026-12-01") || !strings.Contains(body, "NOT_ENOUGH_REPLICAS") || strings.Contains(body, "\x1b") {
		t.Errorf("the health page does not show the relay's held partition, its error escaped:\n%s", body)
	}
}

// consumeTwoOfFive runs a consumer group over topic's five records that
// marks the first two only, and closes it, committing offset 2.
func consumeTwoOfFive(t *testing.T, k *testkit.Kafka, group, topic string) {
	t.Helper()
	cfg := k.Config()
	cfg.Consumer.Offsets.AutoCommit.Enable = false
	g, err := sarama.NewConsumerGroup(k.Brokers, group, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &markTwo{cancel: cancel}
	err = g.Consume(ctx, []string{topic}, h)
	if err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}

// markTwo marks the first two records of a claim and ends the session at
// the fifth.
type markTwo struct{ cancel context.CancelFunc }

func (*markTwo) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (*markTwo) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h *markTwo) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		if m.Offset < 2 {
			s.MarkMessage(m, "")
		}
		if m.Offset == 4 {
			s.Commit()
			h.cancel()
			return nil
		}
	}
	return nil
}
