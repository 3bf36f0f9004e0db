package integration_test

// Kill tests that span packages: a process SIGKILLed part way through work
// another package left it, and what the next run must make good.

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// courierProcess is the built courier binary running as a child process.
type courierProcess struct {
	cmd      *exec.Cmd
	out      bytes.Buffer // stdout and stderr; read only once exited is closed
	exited   chan struct{}
	waitErr  error
	signaled bool
}

// startCourier runs `courier args…`. It is killed when the test ends, and
// its output logged if the test failed.
func startCourier(t *testing.T, args ...string) *courierProcess {
	t.Helper()
	p := &courierProcess{cmd: exec.Command(testkit.CourierBinary(t), args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("courier %s (%v):\n%s", strings.Join(args, " "), p.waitErr, p.out.String())
		}
	})
	return p
}

// signal sends sig and waits up to 30s for the process to exit; it returns
// how the process ended (nil for exit 0).
func (p *courierProcess) signal(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	return p.wait(t)
}

// wait waits up to 30s for the process to exit and returns how it ended.
func (p *courierProcess) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-p.exited:
		return p.waitErr
	case <-time.After(30 * time.Second):
		t.Fatalf("courier %v did not exit within 30s", p.cmd.Args[1:])
		return nil
	}
}

// TestDLQReplayKilledMidRunLosesNothing writes dead letters as a consumer
// would (package dlq), kills `courier dlq replay` with SIGKILL part way and
// runs it again: every dead letter reaches the topic, and none twice beyond
// the batch that was in flight in each partition of the dead-letter topic
// (which the replay goes through at once).
func TestDLQReplayKilledMidRunLosesNothing(t *testing.T) {
	t.Parallel()
	for _, partitions := range []int32{1, 4} {
		t.Run(fmt.Sprintf("%d partitions", partitions), func(t *testing.T) {
			t.Parallel()
			replayKilledMidRun(t, partitions)
		})
	}
}

// replayKilledMidRun is TestDLQReplayKilledMidRunLosesNothing with a
// dead-letter topic of partitions partitions (the dead letters spread over
// them by key, as the consumer writes them).
func replayKilledMidRun(t *testing.T, partitions int32) {
	const n, batch = 60, 5
	s := newStack(t, 1)
	producer, deadLetters, suffix := s.k.Producer, s.deadLetter, dlq.DefaultSuffix
	if partitions > 1 {
		suffix = ".wide-dlq"
		deadLetters = s.topic + suffix
		s.k.CreateTopic(t, deadLetters, partitions)
		producer = s.k.KeyedProducer
	}
	pub, err := dlq.NewWriter(record.NewSyncPublisher(producer(t)), dlq.WriterConfig{Suffix: suffix})
	if err != nil {
		t.Fatal(err)
	}
	used := map[int32]bool{}
	for i := range n {
		original := dlq.Original{Topic: s.topic, Partition: 0, Offset: int64(i), Key: fmt.Appendf(nil, "order-%d", i),
			Value: fmt.Appendf(nil, `{"n":%d}`, i), Headers: []dlq.Header{{Key: []byte("ce_id"), Value: fmt.Appendf(nil, "evt-%d", i)}}}
		env, err := dlq.New(original, dlq.Failure{Error: "psp timeout", Kind: dlq.KindRetriesExhausted, ConsumerGroup: "payouts"})
		var w dlq.Written
		if err == nil {
			w, err = pub.Write(context.Background(), env)
		}
		if err != nil {
			t.Fatal(err)
		}
		used[w.Partition] = true
	}
	if len(used) != int(partitions) {
		t.Fatalf("the dead letters went to partitions %v of %d", used, partitions)
	}
	replay := func(extra ...string) *courierProcess {
		args := []string{"dlq", "replay", deadLetters, "--brokers", strings.Join(s.k.Brokers, ","), "--batch-size", fmt.Sprint(batch)}
		return startCourier(t, append(args, extra...)...)
	}

	killed := replay("--rate", "40")
	testkit.WaitFor(t, 30*time.Second, "the replay to move a few batches", func() bool { return len(s.k.ReadAll(t, s.topic)) >= 3*batch })
	_ = killed.signal(t, syscall.SIGKILL)
	before := len(s.k.ReadAll(t, s.topic))
	if before >= n {
		t.Fatalf("the replay finished (%d records) before it was killed; slow it down", before)
	}

	again := replay()
	if err := again.wait(t); err != nil {
		t.Fatalf("replay after the kill: %v\n%s", err, again.out.String())
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
	if dups := len(got) - n; dups > batch*int(partitions) {
		t.Errorf("%d records replayed twice, more than the batch of %d in flight in each of %d partitions", dups, batch, partitions)
	}
	t.Logf("killed after %d of %d records; %d written twice", before, n, len(got)-n)
}

// TestRelayKilledBeforeItsSettleIsHandledOnce SIGKILLs `courier relay`
// after the broker acknowledged its batch and before it recorded it (its
// settle waits behind a table lock the test holds). The relay run again
// publishes the batch a second time, and a consumer with Redis dedupe
// handles every event once by its effect: at-least-once publishing and
// dedupe make each event's effect happen once.
func TestRelayKilledBeforeItsSettleIsHandledOnce(t *testing.T) {
	t.Parallel()
	const events = 30
	ctx := context.Background()
	pg, out := outbox(t)
	s := newStack(t, 2)
	var batch []producer.Event
	for i := range events {
		batch = append(batch, producer.Event{Topic: s.topic, Key: fmt.Sprintf("order-%d", i%7), Type: "OrderCreated", Payload: fmt.Appendf(nil, `{"n":%d}`, i)})
	}
	if _, err := out.EnqueueBatch(ctx, pg.Pool, batch); err != nil {
		t.Fatal(err)
	}
	app := pg.Schema + "_relay"
	dbURL, err := url.Parse(pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	query := dbURL.Query()
	query.Set("application_name", app)
	dbURL.RawQuery = query.Encode()
	relay := func() *courierProcess {
		return startCourier(t, "relay", "--database-url", dbURL.String(), "--schema", pg.Schema, "--brokers", strings.Join(s.k.Brokers, ","),
			"--workers", "1", "--batch-size", "100")
	}
	sessions := func(where string) int {
		var n int
		if err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1 || '%' AND ("+where+")", app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	published := func() int {
		var n int
		if err := pg.Pool.QueryRow(ctx, "SELECT count(*) FROM courier_events WHERE status = 'published'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// A SHARE lock lets the relay claim and publish, and holds the DELETE
	// that records its batch.
	freeze, err := pg.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = freeze.Rollback(ctx) }()
	if _, err := freeze.Exec(ctx, "SET LOCAL lock_timeout = '30s'; LOCK TABLE courier_outbox IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	first := relay()
	testkit.WaitFor(t, 30*time.Second, "the relay to publish its batch and wait to record it", func() bool {
		return len(s.k.ReadAll(t, s.topic)) == events && sessions(`wait_event_type = 'Lock' AND query LIKE '%DELETE FROM%'`) > 0
	})
	_ = first.signal(t, syscall.SIGKILL)
	// The settle and its COMMIT went out together: the lock stays until
	// the killed relay's sessions are gone, so that they roll back.
	testkit.WaitFor(t, 15*time.Second, "the killed relay's sessions to end", func() bool { return sessions("true") == 0 })
	if err := freeze.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := published(); n != 0 {
		t.Fatalf("%d events recorded as published by the killed relay, want none: the kill came too late", n)
	}

	second := relay()
	testkit.WaitFor(t, 30*time.Second, "the relay run again to publish and record every event", func() bool { return published() == events })
	if err := second.signal(t, syscall.SIGTERM); err != nil {
		t.Errorf("the relay run again exited with %v after SIGTERM, want 0", err)
	}
	if n := len(s.k.ReadAll(t, s.topic)); n != 2*events {
		t.Fatalf("the topic holds %d records, want each of the %d events twice", n, events)
	}

	r := testkit.NewRedis(t)
	var mu sync.Mutex
	effects := map[string]int{} // ce_id → successful handlings
	cfg := s.consumerConfig(t, consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		mu.Lock()
		defer mu.Unlock()
		effects[m.ID]++
		return nil
	}))
	cfg.Workers = 4
	cfg.Dedupe = consumer.DedupeConfig{Store: s.redisDedupe(t, r), Lease: 10 * time.Second}
	runConsumer(t, cfg)
	testkit.WaitFor(t, 30*time.Second, "every record handled or skipped, and committed", func() bool { return s.settled(t) })

	mu.Lock()
	defer mu.Unlock()
	if len(effects) != events {
		t.Errorf("%d distinct events handled, want %d", len(effects), events)
	}
	for id, n := range effects {
		if n != 1 {
			t.Errorf("event %s handled %d times, want once", id, n)
		}
	}
}
