package consumer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/dedupe"
)

// TestMarkDoneMarksEachIDUnderItsOwner: a batch of marks spanning the
// claims of several calls marks each id under the owner that claimed it,
// one Done call per owner in the order they first come, and goes on past
// an owner whose call fails.
func TestMarkDoneMarksEachIDUnderItsOwner(t *testing.T) {
	mk := func(owner, id string) mark {
		return mark{d: &delivery{tracking: &tracking{id: id, dedupeClaim: dedupeClaim{owner: owner, claimed: true}}}}
	}
	batch := []mark{mk("a", "1"), mk("b", "2"), mk("a", "3"), mk("c", "4"), mk("b", "5")}
	boom := errors.New("boom")
	store := &doneRecorder{fail: "b", err: boom}
	err := markDone(context.Background(), store, batch)
	if !errors.Is(err, boom) {
		t.Errorf("markDone = %v, want the failed owner's error", err)
	}
	want := []string{"a:1,3", "b:2,5", "c:4"}
	if !slices.Equal(store.calls, want) {
		t.Errorf("Done calls %v, want %v", store.calls, want)
	}
}

// doneRecorder is a dedupe.Store that records its Done calls as
// "owner:id,id", failing those of owner fail with err.
type doneRecorder struct {
	calls []string
	fail  string
	err   error
}

func (s *doneRecorder) Done(_ context.Context, owner string, ids []string) error {
	s.calls = append(s.calls, owner+":"+strings.Join(ids, ","))
	if owner == s.fail {
		return s.err
	}
	return nil
}

func (s *doneRecorder) Claim(context.Context, string, []string, time.Duration) ([]dedupe.Status, error) {
	return nil, nil
}
func (s *doneRecorder) Extend(context.Context, string, []string, time.Duration) error { return nil }
func (s *doneRecorder) Release(context.Context, string, []string) error               { return nil }
