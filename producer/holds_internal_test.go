package producer

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/backoff"
)

// listingHook asks the holds for their list from each hook call, as a
// hook calling Relay.Held would: it must not deadlock.
type listingHook struct {
	h     *holds
	heard []int
}

func (l *listingHook) Held(string, int32, time.Time) { l.heard = append(l.heard, len(l.h.list())) }
func (l *listingHook) Unheld(string, int32)          { l.heard = append(l.heard, len(l.h.list())) }

// TestHoldsStepEndAndTellOutsideTheirLock: a hold steps its backoff once
// per failure after it is up, whose event is the step's probe while the
// others of the step sleep; a record it kept unsent sleeps, and neither
// steps it nor starts one again; an acknowledgement on a partition ends that partition's
// hold, and a whole topic's only when the topic was said not to exist; the
// hooks are told with the lock released.
func TestHoldsStepEndAndTellOutsideTheirLock(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	hook := &listingHook{}
	hs, err := newHooks([]Hook{hook})
	if err != nil {
		t.Fatal(err)
	}
	h := newHolds(func() time.Time { return now }, backoff.Backoff{Base: time.Second, Factor: 2, Max: time.Minute}, slog.New(slog.DiscardHandler), &hs)
	hook.h = h
	whole := topicPartition{"orders", anyPartition}

	if d, role := h.fail(whole, now, sarama.ErrNotLeaderForPartition); d != time.Second || role != heldProbe {
		t.Fatalf("first failure waits %v as %v, want Backoff.Base as the probe", d, role)
	}
	if d, role := h.fail(whole, now.Add(500*time.Millisecond), sarama.ErrNotLeaderForPartition); d != 500*time.Millisecond || role != heldAsleep {
		t.Fatalf("a failure within the hold waits %v as %v, want the rest of it (500ms), asleep", d, role)
	}
	h.published(topicPartition{"orders", 2})
	now = now.Add(time.Second)
	if d, role := h.fail(whole, now, sarama.ErrNotLeaderForPartition); d != 2*time.Second || role != heldProbe {
		t.Fatalf("after an ack on partition 2, the whole topic's hold stepped to %v (%v), want 2s with a new probe: a partition's ack does not end it", d, role)
	}
	unsent := heldError{whole, sarama.ErrNotLeaderForPartition}
	if d, role := h.fail(whole, now.Add(time.Second), unsent); d != time.Second || role != heldAsleep {
		t.Fatalf("a record kept unsent waits %v as %v, want the rest of its hold (1s), asleep", d, role)
	}
	if got := h.list(); len(got) != 1 || got[0].Until != now.Add(2*time.Second) {
		t.Fatalf("holds %+v after an unsent record, want one, not stepped", got)
	}

	missing := topicPartition{"later", anyPartition}
	h.fail(missing, now, sarama.ErrUnknownTopicOrPartition)
	h.published(topicPartition{"later", 0})
	if got := h.list(); len(got) != 1 || got[0].Topic != "orders" {
		t.Fatalf("holds %+v, want the missing topic's ended by an acknowledgement on it", got)
	}
	if d, role := h.fail(missing, now, heldError{missing, sarama.ErrUnknownTopicOrPartition}); d != 0 || role != heldNoLonger || len(h.list()) != 1 {
		t.Fatalf("an unsent record of an ended hold waits %v as %v and holds are %+v; want it tried again at once, no hold started", d, role, h.list())
	}
	// held orders (1), held later (2), ended later (1)
	if want := []int{1, 2, 1}; !slices.Equal(hook.heard, want) {
		t.Errorf("the hooks saw %v holds as they were told, want %v", hook.heard, want)
	}
}
