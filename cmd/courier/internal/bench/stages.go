package bench

import (
	"fmt"
	"sync"
	"time"

	"github.com/courierkit/courier/producer"
)

// BatchStages is where the relay's batches spent their time, from its
// producer.BatchHook: the mean of each stage over the batches of a
// configuration's drains or phases, and their mean size. On a network the
// stages are mostly waiting: the claim and the settle are a round trip to
// PostgreSQL each, the publish waits for the brokers (acks=all).
type BatchStages struct {
	Batches        int     `json:"batches"`
	EventsPerBatch float64 `json:"events_per_batch"`
	ClaimMs        float64 `json:"claim_ms"`
	// PublishMs is the mean over the batches that published.
	PublishMs float64 `json:"publish_ms"`
	SettleMs  float64 `json:"settle_ms"`
}

// String is the stages as the reports show them.
func (s BatchStages) String() string {
	return fmt.Sprintf("batch of %.0f: claim %.1f + publish %.1f + settle %.1f ms", s.EventsPerBatch, s.ClaimMs, s.PublishMs, s.SettleMs)
}

// stageSums is a producer.BatchHook that adds up the stages of the batches
// it hears of.
type stageSums struct {
	mu                      sync.Mutex
	batches, published      int
	events                  int
	claim, publish, settled time.Duration
}

func (s *stageSums) Batch(events int, st producer.BatchStages) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.batches++
	s.events += events
	s.claim += st.Claim
	s.settled += st.Settle
	if st.Publish > 0 {
		s.published++
		s.publish += st.Publish
	}
}

// means is the stages' means so far; nil before any batch.
func (s *stageSums) means() *BatchStages {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.batches == 0 {
		return nil
	}
	ms := func(d time.Duration, n int) float64 {
		return float64(d) / float64(time.Millisecond) / float64(max(n, 1))
	}
	return &BatchStages{Batches: s.batches, EventsPerBatch: float64(s.events) / float64(s.batches),
		ClaimMs: ms(s.claim, s.batches), PublishMs: ms(s.publish, s.published), SettleMs: ms(s.settled, s.batches)}
}
