package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/record"
)

// TestSequencesWrap: Kafka's sequence numbers go from math.MaxInt32 to 0.
func TestSequencesWrap(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		seq  int32
		n    int
		want int32
	}{
		{0, 5, 5}, {math.MaxInt32 - 5, 5, math.MaxInt32}, {math.MaxInt32, 1, 0}, {math.MaxInt32 - 2, 10, 7},
	} {
		if got := addSequence(c.seq, c.n); got != c.want {
			t.Errorf("addSequence(%d, %d) = %d, want %d", c.seq, c.n, got, c.want)
		}
	}
}

// TestWhichFailuresMayHideAnAppend: a broker's refusal before appending
// frees the batch's sequence numbers; a timeout, an append short of
// replicas, an unknown error or no answer at all may hide an append.
func TestWhichFailuresMayHideAnAppend(t *testing.T) {
	t.Parallel()
	for err, want := range map[error]bool{
		sarama.ErrNotLeaderForPartition:                         true,
		sarama.ErrLeaderNotAvailable:                            true,
		sarama.ErrNotEnoughReplicas:                             true,
		sarama.ErrOutOfOrderSequenceNumber:                      true,
		fmt.Errorf("%w: detail", sarama.ErrMessageSizeTooLarge): true,
		sarama.ErrRequestTimedOut:                               false,
		sarama.ErrNotEnoughReplicasAfterAppend:                  false,
		sarama.ErrUnknown:                                       false,
		io.EOF:                                                  false,
	} {
		if got := refusedUnwritten(err); got != want {
			t.Errorf("refusedUnwritten(%v) = %v, want %v", err, got, want)
		}
	}
}

// TestADuplicateAnswerIsAnAcknowledgement: an older broker's
// DUPLICATE_SEQUENCE_NUMBER means it had the batch: the records are
// acknowledged, with no offset.
func TestADuplicateAnswerIsAnAcknowledgement(t *testing.T) {
	t.Parallel()
	resp := &sarama.ProduceResponse{}
	resp.AddTopicPartition("t", 0, sarama.ErrDuplicateSequenceNumber)
	resp.GetBlock("t", 0).Offset = -1
	if err := blockError(resp, nil, "t", 0); err != nil {
		t.Fatalf("blockError = %v, want an acknowledgement", err)
	}
	records := []*record.Record{{Topic: "t"}, {Topic: "t"}}
	out := newOutcome(records)
	out.ack([]int{0, 1}, 0, -1)
	for i, r := range records {
		if r.Offset != -1 {
			t.Errorf("record %d: offset %d, want -1 (unknown)", i, r.Offset)
		}
	}
}

// TestAnUnsureBatchLeavesItsSessionUnused: a write that gives up on a batch
// whose fate is unknown (the broker appended it and answered
// REQUEST_TIMED_OUT, and no try's answer could come before the context's
// deadline) says so, and does not put its session back: the next write
// starts a new one. Were the old one used again, its next batch would carry the
// unsure batch's sequence numbers, and the broker would take it for that
// batch and drop it: a loss.
func TestAnUnsureBatchLeavesItsSessionUnused(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 1)
	cfg := NewSaramaConfig()
	cfg.Producer.Retry.Max, cfg.Producer.Retry.Backoff = 0, 5*time.Millisecond
	pub, err := NewSaramaPublisher(k.Brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := pub.(*batchPublisher)
	defer p.Close()
	timedOut := k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.RequestTimedOut, Count: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	for i, err := range p.Publish(ctx, []*record.Record{{Topic: topic, Value: []byte("unsure")}}) {
		if !errors.As(err, new(fateUnknownError)) || !errors.Is(err, sarama.ErrRequestTimedOut) {
			t.Fatalf("record %d: %v, want its fate unknown after REQUEST_TIMED_OUT", i, err)
		}
	}
	p.inflight.Wait() // the cut write has ended
	timedOut.Remove()
	if s := p.sessions.take(); s != nil {
		t.Fatalf("session %d is idle again after an unsure batch, want it dropped", s.id)
	}
	for i, err := range p.Publish(context.Background(), []*record.Record{{Topic: topic, Value: []byte("next")}}) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	client, err := sarama.NewClient(k.Brokers, k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if hwm, err := client.GetOffset(topic, 0, sarama.OffsetNewest); err != nil || hwm != 2 {
		t.Fatalf("high watermark %d (%v), want 2: the unsure record once and the next one", hwm, err)
	}
}
