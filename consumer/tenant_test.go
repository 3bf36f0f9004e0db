package consumer_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
)

// TestTenantIDThroughRetryTierAndDeadLetter: a message with ce_tenantid
// has its TenantID on the main topic, in its retry tier and in
// OnDeadLetter, and its dead letter keeps the header, so a dead-letter
// filter of its tenant selects it and a replay writes it back.
func TestTenantIDThroughRetryTierAndDeadLetter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	var (
		mu      sync.Mutex
		tenants []string
		rounds  []int
	)
	cfg := f.config(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		tenants, rounds = append(tenants, m.TenantID), append(rounds, m.RetryRound)
		return errors.New("ledger down")
	}))
	f.withRetry(t, &cfg, 20*time.Millisecond)
	dead := make(chan string, 1)
	cfg.OnDeadLetter = func(_ context.Context, d consumer.DeadLetter) { dead <- d.Message.TenantID }
	m := record("k", "v")
	m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte("ce_tenantid"), Value: []byte("acme")})
	f.produce(t, f.topic, m)
	stop := run(t, newConsumer(t, cfg))
	testkit.WaitFor(t, 20*time.Second, "a dead letter", func() bool { return len(f.readAll(t, f.dlq)) == 1 })
	stop()

	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(rounds, []int{0, 1}) || !slices.Equal(tenants, []string{"acme", "acme"}) {
		t.Errorf("handled in rounds %v with tenants %q, want rounds [0 1] both of tenant acme", rounds, tenants)
	}
	select {
	case got := <-dead:
		if got != "acme" {
			t.Errorf("OnDeadLetter's message has TenantID %q, want acme", got)
		}
	default:
		t.Error("OnDeadLetter was not called")
	}
	rec := f.readAll(t, f.dlq)[0]
	env, err := dlq.Read(rec.Key, rec.Value, dlqHeaders(rec))
	if err != nil {
		t.Fatal(err)
	}
	if env.TenantID() != "acme" || !(dlq.Filter{TenantID: "acme"}).Match(dlq.Entry{Envelope: env}) {
		t.Errorf("dead letter of tenant %q, want acme and a match of the tenant's filter", env.TenantID())
	}
	o, err := env.Original()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(o.Headers, func(h dlq.Header) bool { return string(h.Key) == "ce_tenantid" && string(h.Value) == "acme" }) {
		t.Errorf("the record a replay writes has headers %q, without ce_tenantid: acme", o.Headers)
	}
}

// tenantOutcomes implements TenantMessageHook and MessageHook: it notes
// the tenant of each handled message, and counts the calls of Message.
type tenantOutcomes struct {
	mu      sync.Mutex
	tenants []string
	plain   int
}

func (h *tenantOutcomes) TenantMessage(_, tenant string, o consumer.Outcome) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if o == consumer.OutcomeHandled {
		h.tenants = append(h.tenants, tenant)
	}
}

func (h *tenantOutcomes) Message(string, consumer.Outcome) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.plain++
}

func (h *tenantOutcomes) handled() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.tenants)
}

// TestTenantMessageHookHearsTheTenant: a TenantMessageHook is told each
// outcome with the message's tenant ("" for none, or an invalid one); a
// hook implementing it and MessageHook is told once, through it, while a
// MessageHook alone is still told.
func TestTenantMessageHookHearsTheTenant(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	withTenant := func(key, tenant string) *sarama.ProducerMessage {
		m := record(key, key)
		m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte("ce_tenantid"), Value: []byte(tenant)})
		return m
	}
	f.produce(t, f.topic, withTenant("a", "acme"), record("b", "b"), withTenant("c", "bad\xff"), withTenant("d", "globex"))
	var (
		hook tenantOutcomes
		only handledOnly
	)
	cfg := f.config(t, consumer.HandlerFunc(func(context.Context, *consumer.Message) error { return nil }))
	cfg.Hooks = []consumer.Hook{&hook, &only}
	stop := run(t, newConsumer(t, cfg))
	defer stop()
	testkit.WaitFor(t, 10*time.Second, "four messages handled", func() bool { return len(hook.handled()) == 4 && only.handled.Load() == 4 })
	if got, want := hook.handled(), []string{"acme", "", "", "globex"}; !slices.Equal(got, want) {
		t.Errorf("the hook heard tenants %q, want %q", got, want)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if hook.plain != 0 {
		t.Errorf("Message of a TenantMessageHook was called %d times, want never", hook.plain)
	}
}
