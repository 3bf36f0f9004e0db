package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/retrytopics"
)

// committedOf returns group's committed offset of topic's partition, -1 for
// none.
func (f *fixture) committedOf(t *testing.T, group, topic string, partition int32) int64 {
	t.Helper()
	admin, err := sarama.NewClusterAdmin(f.k.Brokers, f.k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	resp, err := admin.ListConsumerGroupOffsets(group, map[string][]int32{topic: {partition}})
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		return -1
	}
	if err != nil {
		t.Fatal(err)
	}
	if b := resp.GetBlock(topic, partition); b != nil {
		return b.Offset
	}
	return -1
}

// TestReplayToGroupReachesOnlyTheGroupThatFailed: two groups read one topic
// with the same retry tiers. Group A fails a message through every tier
// and dead-letters it; group B handles it at once. Replayed with
// retrytopics.ReplayRoute, the dead letter lands in the first tier naming
// A, and only A handles it, as a message back from its first tier with its
// attempts counted on: failing again, it goes on through the second tier
// to the dead-letter topic (replay_count 1); replayed once more after the
// fix, A handles it once. B reads past both without handling them.
func TestReplayToGroupReachesOnlyTheGroupThatFailed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 2)
	groupA, groupB := f.group+".a", f.group+".b"
	var fixed atomic.Bool
	var seenA, seenB, handledA calls
	cfgA := f.config(t, consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) error {
		seenA.add(m)
		if string(m.Value) == "poison" && !fixed.Load() {
			return errors.New("psp rejects poison")
		}
		handledA.add(m)
		return nil
	}))
	cfgA.Group = groupA
	topo := f.withRetry(t, &cfgA, 10*time.Millisecond, 20*time.Millisecond)
	cfgB := f.recording(t, &seenB)
	cfgB.Group, cfgB.RetryTopics, cfgB.MaxAttempts = groupB, cfgA.RetryTopics, cfgA.MaxAttempts

	f.produceTo(t, 1, record("k1", "fine"), record("k2", "poison"))
	run(t, newConsumer(t, cfgA))
	run(t, newConsumer(t, cfgB))
	testkit.WaitFor(t, 30*time.Second, "A's dead letter and B's two messages", func() bool {
		return len(f.readAll(t, f.dlq)) == 1 && seenB.count("poison") == 1 && seenB.count("fine") == 1
	})
	if n := seenA.count("poison"); n != 3 {
		t.Fatalf("A tried poison %d times before dead-lettering it, want 3 (main topic and two tiers)", n)
	}

	replay := func() dlq.ReplayedRecord {
		t.Helper()
		var moved []dlq.ReplayedRecord
		report, err := dlq.Replay(context.Background(), dlq.ReplayConfig{
			Brokers: f.k.Brokers, Sarama: f.k.Config(), Topic: f.dlq, Group: "replay." + f.group,
			Filter:   dlq.Filter{ConsumerGroup: groupA},
			Route:    retrytopics.ReplayRoute(cfgA.RetryTopics),
			OnRecord: func(r dlq.ReplayedRecord) { moved = append(moved, r) },
		})
		if err != nil || report.Moved != 1 || len(moved) != 1 {
			t.Fatalf("Replay: %+v %+v, %v; want one dead letter moved", report, moved, err)
		}
		if to := moved[0]; to.To != topo.Tiers[0].Topic || to.ToPartition != 1 {
			t.Fatalf("replayed to %s/%d, want the first tier %s on the original partition 1", to.To, to.ToPartition, topo.Tiers[0].Topic)
		}
		return moved[0]
	}

	// Still broken: A fails it in both tiers again and dead-letters it with
	// its whole history.
	replay()
	testkit.WaitFor(t, 30*time.Second, "A dead-letters the replayed message again", func() bool { return len(f.readAll(t, f.dlq)) == 2 })
	letters := f.readAll(t, f.dlq)
	again, err := dlq.Read(letters[1].Key, letters[1].Value, dlqHeaders(letters[1]))
	if err != nil {
		t.Fatal(err)
	}
	if again.Attempts != 5 || again.ReplayCount != 1 || again.ConsumerGroup != groupA || again.OriginalTopic != f.topic || again.OriginalPartition != 1 {
		t.Errorf("second dead letter: %d attempts, replay_count %d, group %s, from %s/%d; want 5, 1, %s, %s/1",
			again.Attempts, again.ReplayCount, again.ConsumerGroup, again.OriginalTopic, again.OriginalPartition, groupA, f.topic)
	}

	fixed.Store(true)
	to := replay()
	testkit.WaitFor(t, 30*time.Second, "A handles the replayed message", func() bool { return handledA.count("poison") == 1 })
	for group, name := range map[string]string{groupA: "A", groupB: "B"} {
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%s's committed offset of %s/1 past %d", name, to.To, to.ToOffset), func() bool {
			return f.committedOf(t, group, to.To, 1) > to.ToOffset
		})
	}
	if n := seenB.count("poison"); n != 1 {
		t.Errorf("B handled poison %d times, want 1: its original delivery only", n)
	}
	if n := handledA.count("poison"); n != 1 {
		t.Errorf("A handled the replayed poison %d times, want once", n)
	}
	got := handledA.all()
	last := got[len(got)-1]
	if last.value != "poison" || last.topic != to.To || last.round != 1 || last.attempt != 6 || last.origin != f.topic {
		t.Errorf("A handled %+v, want poison from %s in round 1, attempt 6 (after 5 failed), of %s", last, to.To, f.topic)
	}
	if n := len(f.readAll(t, f.dlq)); n != 2 {
		t.Errorf("the dead-letter topic holds %d records, want the 2 replayed", n)
	}
}
