package consumer

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/testkit"
)

// TestRevocationFeedEndsTheClaimWhileThePartitionWaits: under cooperative
// rebalancing the partition's claim context ends as soon as Sarama closes
// the claim's messages, though the partition reads none of them (it is
// waiting); meanwhile the feed hands the messages on in order, pausing
// the partition while more than ChannelBufferSize wait unread and
// resuming it once half of them are taken.
func TestRevocationFeedEndsTheClaimWhileThePartitionWaits(t *testing.T) {
	t.Parallel()
	sc := NewSaramaConfig()
	sc.Version = sarama.V2_4_0_0
	sc.ChannelBufferSize = 2
	sc.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{sarama.NewBalanceStrategyCooperativeSticky()}
	c, err := New(Config{Brokers: []string{"localhost:9092"}, Sarama: sc, Group: "g", Topics: []string{"orders"},
		Handler: HandlerFunc(func(context.Context, *Message) error { return nil })})
	if err != nil {
		t.Fatal(err)
	}
	sess := &countingSession{ctx: t.Context()}
	messages := make(chan *sarama.ConsumerMessage, 8)
	group := &pauseRecorder{}
	p := newPartition(&groupHandler{c: c, group: group}, sess, feedClaim{messages: messages})
	defer p.close()

	for i := range 3 {
		messages <- &sarama.ConsumerMessage{Topic: "orders", Offset: int64(i)}
	}
	testkit.WaitFor(t, 5*time.Second, "the partition paused with 3 messages unread (more than ChannelBufferSize 2)", func() bool { return group.counts() == [2]int{1, 0} })
	for want := range int64(2) {
		if m := <-p.messages; m.Offset != want {
			t.Fatalf("took offset %d, want %d: the feed keeps the order", m.Offset, want)
		}
	}
	testkit.WaitFor(t, 5*time.Second, "the partition resumed with 1 message unread", func() bool { return group.counts() == [2]int{1, 1} })

	messages <- &sarama.ConsumerMessage{Topic: "orders", Offset: 3}
	close(messages) // Sarama revokes the partition
	select {
	case <-p.claimCtx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the claim context did not end within 5s of the claim's messages closing, while the partition read none")
	}
	if sess.Context().Err() != nil {
		t.Error("the session's context ended; only the partition's claim should")
	}
}

// feedClaim is a claim of "orders" whose messages the test sends.
type feedClaim struct {
	countingClaim
	messages chan *sarama.ConsumerMessage
}

func (c feedClaim) Messages() <-chan *sarama.ConsumerMessage { return c.messages }

// pauseRecorder is a consumer group that counts Pause and Resume calls.
type pauseRecorder struct {
	sarama.ConsumerGroup // nil: the methods not used panic
	mu                   sync.Mutex
	paused, resumed      int
}

func (g *pauseRecorder) Pause(map[string][]int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paused++
}

func (g *pauseRecorder) Resume(map[string][]int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.resumed++
}

func (g *pauseRecorder) counts() [2]int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return [2]int{g.paused, g.resumed}
}
