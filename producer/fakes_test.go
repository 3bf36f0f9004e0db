package producer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// fakePublisher stands in for Kafka: fail decides each record's fate, and
// like any Publisher it fails the records of a key behind one that failed.
type fakePublisher struct {
	mu    sync.Mutex
	fail  func(*record.Record) error
	acked []*record.Record
	calls int
}

func (f *fakePublisher) Publish(_ context.Context, records []*record.Record) []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	errs := make([]error, len(records))
	failed := map[[2]string]error{}
	for i, r := range records {
		var key [2]string
		if r.Key != nil {
			key = [2]string{r.Topic, string(r.Key)}
		}
		switch {
		case r.Key != nil && failed[key] != nil:
			errs[i] = failed[key]
		case f.fail != nil:
			errs[i] = f.fail(r)
		}
		if errs[i] != nil && r.Key != nil {
			failed[key] = errs[i]
		}
		if errs[i] == nil {
			f.acked = append(f.acked, r)
		}
	}
	return errs
}

func (f *fakePublisher) Close() error { return nil }

func (f *fakePublisher) setFail(fn func(*record.Record) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = fn
}

// ackedIDs lists the ce_ids acknowledged on topic, in order.
func (f *fakePublisher) ackedIDs(topic string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, r := range f.acked {
		if r.Topic == topic {
			ids = append(ids, recordHeader(r, producer.HeaderID))
		}
	}
	return ids
}

func (f *fakePublisher) ackedOn(topic string) []*record.Record {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*record.Record
	for _, r := range f.acked {
		if r.Topic == topic {
			out = append(out, r)
		}
	}
	return out
}

func recordHeader(r *record.Record, name string) string {
	for _, h := range r.Headers {
		if string(h.Key) == name {
			return string(h.Value)
		}
	}
	return ""
}

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// recordedMetrics keeps what the relay reported.
type recordedMetrics struct {
	mu       sync.Mutex
	claims   []int
	states   []producer.BreakerState
	events   []string // "claim", "open", "half-open", "closed" in order
	dead     int
	failures map[string]int
	backlog  []int64
	held     []string // "held topic/partition", "unheld topic/partition" in order
}

func (m *recordedMetrics) Held(topic string, partition int32, _ time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held = append(m.held, fmt.Sprintf("held %s/%d", topic, partition))
}

func (m *recordedMetrics) Unheld(topic string, partition int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held = append(m.held, fmt.Sprintf("unheld %s/%d", topic, partition))
}

// holds returns what the HeldHook heard, in order.
func (m *recordedMetrics) holds() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.held)
}

func (m *recordedMetrics) Claimed(n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.claims = append(m.claims, n)
	m.events = append(m.events, "claim")
}

func (m *recordedMetrics) Published(string, time.Duration) {}

func (m *recordedMetrics) PublishFailed(_, reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failures == nil {
		m.failures = map[string]int{}
	}
	m.failures[reason]++
}

func (m *recordedMetrics) DeadLettered(string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dead++
}

func (m *recordedMetrics) BreakerChanged(s producer.BreakerState) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.states = append(m.states, s)
	m.events = append(m.events, s.String())
}

func (m *recordedMetrics) Backlog(waiting int64, _ time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.backlog = append(m.backlog, waiting)
}

func (m *recordedMetrics) snapshot() (claims []int, events []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int(nil), m.claims...), append([]string(nil), m.events...)
}
