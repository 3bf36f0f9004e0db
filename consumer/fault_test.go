package consumer_test

// A consumer process killed with SIGKILL in the middle of its work, and
// started again: guarantee 2 of ARCHITECTURE.md (at least once: nothing
// lost when a consumer is killed) on what the handlers actually saw. The child is this test binary
// running TestConsumerChildProcess (see testkit.StartChild).

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/internal/testkit"
)

// The environment of TestConsumerChildProcess. The log file also tells it
// that it is a child: without it the test does nothing.
const (
	childLog     = "COURIER_CONSUMER_CHILD_LOG"
	childBrokers = "COURIER_CONSUMER_CHILD_BROKERS"
	childTopic   = "COURIER_CONSUMER_CHILD_TOPIC"
	childGroup   = "COURIER_CONSUMER_CHILD_GROUP"
)

func TestConsumerKilledMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	const total, partitions, kills = 3000, 3, 3
	f := newFixture(t, partitions)
	var msgs []*sarama.ProducerMessage
	for i := range total {
		msgs = append(msgs, record(fmt.Sprint("key-", i%50), fmt.Sprint(i)))
	}
	f.produce(t, f.topic, msgs...)

	logPath := filepath.Join(t.TempDir(), "handled")
	env := []string{
		childLog + "=" + logPath,
		childBrokers + "=" + strings.Join(f.k.Brokers, ","),
		childTopic + "=" + f.topic,
		childGroup + "=" + f.group,
	}
	var children []*testkit.Child
	for i := range kills {
		c := testkit.StartChild(t, "TestConsumerChildProcess", env)
		children = append(children, c)
		target := (i + 1) * total / (kills + 2)
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("child %d to handle %d messages", i+1, target), func() bool {
			return len(handledIDs(t, logPath)) >= target
		})
		c.Kill(t)
		t.Logf("kill %d: SIGKILL after %d distinct messages handled", i+1, len(handledIDs(t, logPath)))
	}
	last := testkit.StartChild(t, "TestConsumerChildProcess", env)
	children = append(children, last)
	testkit.WaitFor(t, 60*time.Second, "every message handled", func() bool { return len(handledIDs(t, logPath)) == total })
	testkit.WaitFor(t, 30*time.Second, "every offset committed", func() bool {
		var sum int64
		for p := range int32(partitions) {
			sum += max(f.committed(t, p), 0)
		}
		return sum == total
	})
	last.Stop(t)

	seen := handledIDs(t, logPath)
	lines := 0
	for i := range total {
		if n := seen[fmt.Sprint("id-", i)]; n == 0 {
			t.Errorf("message %d was never handled", i)
		}
	}
	for _, n := range seen {
		lines += n
	}
	t.Logf("%d handler calls for %d messages: %d duplicates after %d kills", lines, total, lines-total, kills)
	for _, c := range children {
		c.CheckOutput(t)
	}
}

// TestConsumerChildProcess is the consumer process that
// TestConsumerKilledMidBatchLosesNothing starts and kills; run directly, it
// does nothing. It appends the ce_id of every message it handles to the log
// file, and runs until it is killed or its stdin closes.
func TestConsumerChildProcess(t *testing.T) {
	logPath := os.Getenv(childLog)
	if logPath == "" {
		return
	}
	ctx, cancel := testkit.UntilStdinCloses()
	defer cancel()
	out := appendLog(t, logPath)
	k := &testkit.Kafka{Brokers: testkit.ParseBrokers(os.Getenv(childBrokers))}
	cfg := k.Config()
	cfg.Consumer.Offsets.AutoCommit.Interval = 50 * time.Millisecond
	// Static membership: a restarted child takes over the killed one's
	// place at once instead of waiting for its session to time out.
	cfg.Consumer.Group.InstanceId = "child"
	c, err := consumer.New(consumer.Config{
		Brokers: k.Brokers,
		Sarama:  cfg,
		Group:   os.Getenv(childGroup),
		Topics:  []string{os.Getenv(childTopic)},
		Workers: 4,
		Handler: consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
			time.Sleep(200 * time.Microsecond)     // some work, so the kill lands mid-batch
			_, err := out.WriteString(m.ID + "\n") // one write(2): in the file even if killed right after
			return err
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatalf("Run returned %v", err)
	}
}

// appendLog opens a children's log of handled ids for appending, until the
// test ends. A child writes each line with one write(2): in the file even
// if the child is killed right after.
func appendLog(t *testing.T, path string) *os.File {
	t.Helper()
	out, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = out.Close() })
	return out
}

// handledIDs counts the ce_ids in the children's log. A line cut short by
// a kill is ignored.
func handledIDs(t *testing.T, path string) map[string]int {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	data = data[:bytes.LastIndexByte(data, '\n')+1] // drop a line cut short by a kill
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		seen[sc.Text()]++
	}
	return seen
}
