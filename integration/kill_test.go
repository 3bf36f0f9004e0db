package integration_test

// Kill tests that span packages: a process SIGKILLed part way through work
// another package left it, and what the next run must make good.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
)

// TestDLQReplayKilledMidRunLosesNothing writes dead letters as a consumer
// would (package dlq), kills `courier dlq replay` with SIGKILL part way and
// runs it again: every dead letter reaches the topic, and none twice beyond
// the batch that was in flight.
func TestDLQReplayKilledMidRunLosesNothing(t *testing.T) {
	t.Parallel()
	const n, batch = 60, 5
	s := newStack(t, 1)
	pub, err := dlq.NewPublisher(s.k.Producer(t), dlq.PublisherConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		original := dlq.Original{Topic: s.topic, Partition: 0, Offset: int64(i), Key: fmt.Appendf(nil, "order-%d", i),
			Value: fmt.Appendf(nil, `{"n":%d}`, i), Headers: []dlq.Header{{Key: []byte("ce_id"), Value: fmt.Appendf(nil, "evt-%d", i)}}}
		env, err := dlq.New(original, dlq.Failure{Error: "psp timeout", Kind: dlq.KindRetriesExhausted, ConsumerGroup: "payouts"})
		if err == nil {
			_, err = pub.Publish(context.Background(), env)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	replay := func(extra ...string) *exec.Cmd {
		args := append([]string{"dlq", "replay", s.deadLetter, "--brokers", strings.Join(s.k.Brokers, ","), "--batch-size", fmt.Sprint(batch)}, extra...)
		return exec.Command(testkit.CourierBinary(t), args...)
	}

	killed := replay("--rate", "40")
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "the replay to move a few batches", func() bool { return len(s.k.ReadAll(t, s.topic)) >= 3*batch })
	if err := killed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = killed.Wait()
	before := len(s.k.ReadAll(t, s.topic))
	if before >= n {
		t.Fatalf("the replay finished (%d records) before it was killed; slow it down", before)
	}

	again := replay()
	var out, errOut bytes.Buffer
	again.Stdout, again.Stderr = &out, &errOut
	if err := again.Run(); err != nil {
		t.Fatalf("replay after the kill: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	seen := map[string]int{}
	got := s.k.ReadAll(t, s.topic)
	for _, m := range got {
		seen[string(m.Key)]++
	}
	for i := range n {
		if seen[fmt.Sprint("order-", i)] == 0 {
			t.Errorf("order-%d was lost", i)
		}
	}
	if dups := len(got) - n; dups > batch {
		t.Errorf("%d records replayed twice, more than the batch of %d in flight", dups, batch)
	}
	t.Logf("killed after %d of %d records; %d written twice", before, n, len(got)-n)
}
