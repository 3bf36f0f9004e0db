package producer_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// tenantLog implements the tenant's variants of the hooks and the plain
// PublishedHook too, noting each call.
type tenantLog struct {
	mu    sync.Mutex
	calls []string
	plain int
}

func (l *tenantLog) note(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *tenantLog) TenantPublished(topic, tenant string, _ time.Duration) {
	l.note("published " + topic + " " + tenant)
}
func (l *tenantLog) TenantPublishFailed(topic, tenant, reason string) {
	l.note("failed " + topic + " " + tenant + " " + reason)
}
func (l *tenantLog) TenantDeadLettered(topic, tenant string) { l.note("dead " + topic + " " + tenant) }

func (l *tenantLog) Published(string, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.plain++
}

// TestTenantHooksHearTheTenant: the tenant's variants of the hooks hear
// each event's TenantID ("" for none); a hook implementing a variant and
// the plain interface hears of a measurement once, through the variant
// (and hears of it without a hook of the plain interface beside it).
func TestTenantHooksHearTheTenant(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	ev := func(key, tenant string) producer.Event {
		e := orderCreated(key)
		e.TenantID = tenant
		return e
	}
	enqueue(t, pg, out, ev("o-1", "acme"))
	poison := enqueue(t, pg, out, ev("o-2", "globex"))
	flaky := enqueue(t, pg, out, ev("o-3", ""))
	pub := &fakePublisher{}
	pub.setFail(func(m *record.Record) error {
		switch recordHeader(m, producer.HeaderID) {
		case poison.String():
			return sarama.ErrMessageSizeTooLarge
		case flaky.String():
			return sarama.ErrInvalidMessage
		}
		return nil
	})
	log := &tenantLog{}
	runOnce(t, newRelay(t, pg, nil, producer.RelayConfig{Publisher: pub, Now: newFakeClock().Now, Hooks: []producer.Hook{log}}))
	slices.Sort(log.calls)
	want := []string{"dead orders globex", "failed orders  refused", "failed orders globex permanent", "published orders acme"}
	if !slices.Equal(log.calls, want) {
		t.Errorf("the tenant hooks heard %q, want %q", log.calls, want)
	}
	if log.plain != 0 {
		t.Errorf("Published of a hook implementing TenantPublished was called %d times, want never", log.plain)
	}
}
