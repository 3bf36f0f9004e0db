package consumer_test

// A consumer process killed with SIGKILL in the middle of its work, and
// started again: guarantee 2 of DESIGN.md (at-least-once under consumer
// crash) on what the handlers actually saw. The child is this test binary
// running TestConsumerChildProcess, as producer/relay_fault_test.go does
// for the relay.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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
	var children []*child
	for i := range kills {
		c := startChild(t, env)
		children = append(children, c)
		target := (i + 1) * total / (kills + 2)
		waitFor(t, 30*time.Second, fmt.Sprintf("child %d to handle %d messages", i+1, target), func() bool {
			return len(handledIDs(t, logPath)) >= target
		})
		c.kill(t)
		t.Logf("kill %d: SIGKILL after %d distinct messages handled", i+1, len(handledIDs(t, logPath)))
	}
	last := startChild(t, env)
	children = append(children, last)
	waitFor(t, 60*time.Second, "every message handled", func() bool { return len(handledIDs(t, logPath)) == total })
	waitFor(t, 30*time.Second, "every offset committed", func() bool {
		var sum int64
		for p := range int32(partitions) {
			sum += max(f.committed(t, p), 0)
		}
		return sum == total
	})
	last.stop(t)

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
		c.checkOutput(t)
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	out, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
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

// child is a consumer running in a child process.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    bytes.Buffer // stdout and stderr; read only after the child is reaped
	reaped bool
}

func startChild(t *testing.T, env []string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^TestConsumerChildProcess$")}
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start the consumer child: %v", err)
	}
	t.Cleanup(func() {
		if !c.reaped {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
			c.reaped = true
		}
		if t.Failed() {
			t.Logf("output of consumer child %d (%v):\n%s", c.cmd.Process.Pid, c.cmd.ProcessState, c.out.String())
		}
	})
	return c
}

// kill SIGKILLs the child, which must still be running, and reaps it.
func (c *child) kill(t *testing.T) {
	t.Helper()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill consumer child %d: %v", c.cmd.Process.Pid, err)
	}
	err := c.cmd.Wait()
	c.reaped = true
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && !(ws.Signaled() && ws.Signal() == syscall.SIGKILL) {
		t.Fatalf("consumer child %d ended before it was killed (%v):\n%s", c.cmd.Process.Pid, err, c.out.String())
	}
}

// stop closes the child's stdin, which cancels its Run, and waits for a
// clean exit.
func (c *child) stop(t *testing.T) {
	t.Helper()
	_ = c.stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	select {
	case err := <-exited:
		c.reaped = true
		if err != nil {
			t.Errorf("consumer child %d did not exit cleanly: %v\n%s", c.cmd.Process.Pid, err, c.out.String())
		}
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-exited
		c.reaped = true
		t.Fatalf("consumer child %d did not stop within 30s of its stdin closing:\n%s", c.cmd.Process.Pid, c.out.String())
	}
}

// checkOutput fails the test if the reaped child reported a data race or
// panicked.
func (c *child) checkOutput(t *testing.T) {
	t.Helper()
	out := c.out.String()
	for _, bad := range []string{"WARNING: DATA RACE", "panic:"} {
		if strings.Contains(out, bad) {
			t.Errorf("consumer child %d printed %q:\n%s", c.cmd.Process.Pid, bad, out)
		}
	}
}
