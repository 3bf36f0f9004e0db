package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"go.uber.org/goleak"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/record"
)

// TestReplayJobMovesOnlyRecentTimeouts fills a dead-letter topic with
// timeouts, invalid amounts, an old timeout, a timeout replayed too often
// and a corrupt record, runs the job once and checks that only the recent
// timeouts reached the orders topic, on their partition with key, value and
// headers byte for byte plus replay_count 1, and that every other record
// stays; then runs it on a schedule, whose runs move nothing, and stops it.
func TestReplayJobMovesOnlyRecentTimeouts(t *testing.T) {
	k := testkit.NewKafka(t)
	orders := k.Topic(t, 2)
	dead := orders + ".dlq"
	k.CreateTopic(t, dead, 1)

	now := time.Now()
	letters := []letter{
		{key: "order-1", partition: 1, err: "psp timeout after 30s", kind: dlq.KindRetriesExhausted, failedAt: now.Add(-time.Hour), moves: true},
		{key: "order-2", partition: 0, err: "permanent: invalid amount: must be positive", kind: dlq.KindPermanent, failedAt: now.Add(-time.Hour)},
		{key: "order-3", partition: 0, err: "PSP Timeout (gateway)", kind: dlq.KindRetriesExhausted, failedAt: now.Add(-time.Minute), moves: true},
		{corrupt: true},
		{key: "order-4", partition: 1, err: "permanent: invalid amount: must be positive", kind: dlq.KindPermanent, failedAt: now.Add(-time.Minute)},
		{key: "order-5", partition: 0, err: "psp timeout after 30s", kind: dlq.KindRetriesExhausted, failedAt: now.Add(-48 * time.Hour)}, // before --since
		{key: "order-6", partition: 1, err: "psp timeout after 30s", kind: dlq.KindRetriesExhausted, failedAt: now.Add(-time.Hour), replays: 3},
	}
	writeDeadLetters(t, k, orders, letters)

	logs := &logRecorder{}
	cfg, err := parseConfig([]string{"--once"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Brokers = k.Brokers
	cfg.Topic = dead
	cfg.Group = testkit.UniqueName(t, 60)
	cfg.Logger = slog.New(logs)

	before := goleak.IgnoreCurrent()
	if err := run(context.Background(), cfg); err != nil {
		t.Fatalf("run --once: %v", err)
	}

	// Only the recent timeouts are back, as they were, with replay_count 1.
	var want []letter
	for _, l := range letters {
		if l.moves {
			want = append(want, l)
		}
	}
	got := k.ReadAll(t, orders)
	if len(got) != len(want) {
		t.Fatalf("%d records on %s after the run, want %d (the recent timeouts)", len(got), orders, len(want))
	}
	for _, l := range want {
		i := slices.IndexFunc(got, func(m *sarama.ConsumerMessage) bool { return string(m.Key) == l.key })
		if i < 0 {
			t.Errorf("%s was not replayed", l.key)
			continue
		}
		m := got[i]
		wantHeaders := append(l.original().Headers, dlq.Header{Key: []byte("replay_count"), Value: []byte("1")})
		if m.Partition != l.partition || !bytes.Equal(m.Value, l.original().Value) || !sameHeaders(m.Headers, wantHeaders) {
			t.Errorf("%s replayed to partition %d with value %q and headers %s; want partition %d, value %q, headers %s",
				l.key, m.Partition, m.Value, showHeaders(m.Headers), l.partition, l.original().Value, showDLQHeaders(wantHeaders))
		}
	}
	if n := len(k.ReadAll(t, dead)); n != len(letters) {
		t.Errorf("%d records in %s after the run, want all %d: replay moves copies, and the others stay", n, dead, len(letters))
	}

	// The log names each record moved or refused, and sums the run up.
	if keys := logs.values("dead letter moved", "key"); !slices.Equal(keys, []string{"order-1", "order-3"}) {
		t.Errorf("logged moves %v, want order-1 then order-3 (in dead-letter order)", keys)
	}
	if keys := logs.values("dead letter refused; it stays", "key"); !slices.Equal(keys, []string{"order-6"}) {
		t.Errorf("logged refusals %v, want order-6 (replayed 3 times already)", keys)
	}
	summary := logs.find("replay run finished")
	if len(summary) != 1 || summary[0]["moved"] != "2" || summary[0]["refused"] != "1" || summary[0]["left_out"] != "3" || summary[0]["corrupt"] != "1" {
		t.Errorf("summaries %v, want one with 2 moved, 1 refused, 3 left out (2 invalid amounts, 1 too old) and the corrupt one reported", summary)
	}

	// On a schedule: the next runs find nothing more to move.
	cfg.Once = false
	cfg.Every = 10 * time.Millisecond
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()
	testkit.WaitFor(t, 30*time.Second, "two more runs", func() bool { return len(logs.find("replay run finished")) >= 3 })
	stop()
	if err := <-done; err != nil {
		t.Errorf("run returned %v after its context ended, want nil", err)
	}
	for _, s := range logs.find("replay run finished")[1:] {
		if s["moved"] != "0" {
			t.Errorf("a later run: %v, want nothing moved", s)
		}
	}
	if n := len(k.ReadAll(t, orders)); n != len(want) {
		t.Errorf("%d records on %s after the later runs, want still %d", n, orders, len(want))
	}
	if logs.find("replay job stopped") == nil {
		t.Error(`no "replay job stopped" logged`)
	}

	goleak.VerifyNone(t, append(testkit.KfakeConnections(), before,
		// kfake serves the connections the test's own clients opened, and
		// Sarama's metrics library keeps one ticker for the process.
		goleak.IgnoreAnyFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"),
	)...)
}

// TestReplayJobReportsCorruptRecords: a record that is no dead letter is
// logged as corrupt and passed; nothing is written.
func TestReplayJobReportsCorruptRecords(t *testing.T) {
	k := testkit.NewKafka(t)
	orders := k.Topic(t, 1)
	k.CreateTopic(t, orders+".dlq", 1)
	writeDeadLetters(t, k, orders, []letter{{corrupt: true}})

	logs := &logRecorder{}
	cfg, err := parseConfig([]string{"--once", "--error", "", "--since", "0"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Brokers, cfg.Topic, cfg.Group, cfg.Logger = k.Brokers, orders+".dlq", testkit.UniqueName(t, 60), slog.New(logs)
	if err := run(context.Background(), cfg); err != nil {
		t.Fatalf("run --once: %v", err)
	}
	if corrupt := logs.find("dead letter corrupt; passed (it stays in the topic)"); len(corrupt) != 1 || corrupt[0]["offset"] != "0" || corrupt[0]["reason"] == "" {
		t.Errorf("corrupt records logged: %v, want offset 0 with the reason", corrupt)
	}
	if n := len(k.ReadAll(t, orders)); n != 0 {
		t.Errorf("%d records on %s, want none", n, orders)
	}
}

// TestReplayJobOutlivesAFailedRun: a scheduled job whose runs fail
// (Kafka is not there) logs each failure, tries again at the next run, and
// stops cleanly.
func TestReplayJobOutlivesAFailedRun(t *testing.T) {
	const nothing = "127.0.0.1:1" // a port nothing listens on, unlike a closed listener's, which another test may take
	logs := &logRecorder{}
	cfg, err := parseConfig([]string{"--brokers", nothing, "--every", "10ms"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(logs)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, cfg) }()
	failed := "replay run failed; trying again at the next run"
	testkit.WaitFor(t, 30*time.Second, "two failed runs", func() bool { return len(logs.find(failed)) >= 2 })
	stop()
	if err := <-done; err != nil {
		t.Errorf("run returned %v after its context ended, want nil", err)
	}
	if e := logs.find(failed)[0]["error"]; !strings.Contains(e, nothing) || !strings.Contains(e, "courier dev") {
		t.Errorf("logged error %q, want the brokers and how to start one", e)
	}
}

// TestRunStopsOnAConfigError: a config Replay refuses ends a scheduled job
// at once, with the reason.
func TestRunStopsOnAConfigError(t *testing.T) {
	cfg, err := parseConfig([]string{"--topic", "orders dlq"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(&logRecorder{})
	if err := run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "orders dlq") {
		t.Errorf("run --topic 'orders dlq': %v, want an error naming the topic", err)
	}
}

// TestParseConfig: the defaults, flags over the environment, and bad
// values refused.
func TestParseConfig(t *testing.T) {
	cfg, err := parseConfig(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Brokers, []string{"127.0.0.1:9092"}) || cfg.Topic != "orders.dlq" || cfg.Group != "orders-replay-job" ||
		cfg.Error != "timeout" || cfg.Since != 24*time.Hour || cfg.Rate != 100 || cfg.Every != time.Minute || cfg.Once {
		t.Errorf("defaults: %+v", cfg)
	}
	env := map[string]string{"COURIER_BROKERS": "k1:9092,k2:9092"}
	cfg, err = parseConfig([]string{"--error", "", "--since", "0", "--rate", "5", "--once", "--every", "0"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.Brokers, []string{"k1:9092", "k2:9092"}) || cfg.Error != "" || cfg.Since != 0 || cfg.Rate != 5 || !cfg.Once {
		t.Errorf("from flags and env: %+v", cfg)
	}
	for _, args := range [][]string{{"--since", "-1h"}, {"--every", "0"}, {"--rate", "fast"}, {"--no-such-flag"}} {
		if _, err := parseConfig(args, func(string) string { return "" }); err == nil {
			t.Errorf("parseConfig(%q) succeeded, want an error", args)
		}
	}
}

// letter is a record of the test's dead-letter topic.
type letter struct {
	key       string
	partition int32 // of the original in the orders topic
	err       string
	kind      dlq.ErrorKind
	failedAt  time.Time
	replays   int  // replay_count of the envelope
	moves     bool // the job should replay it
	corrupt   bool // not a dead letter at all
}

// original is the record l was once: a key, a JSON value, and headers with
// a repeated name and bytes that are not UTF-8.
func (l letter) original() dlq.Original {
	return dlq.Original{
		Partition: l.partition, Offset: 7,
		Key:   []byte(l.key),
		Value: fmt.Appendf(nil, `{"order_id":%q, "amount_cents":1999,"currency":"EUR"}`, l.key),
		Headers: []dlq.Header{
			{Key: []byte("ce_id"), Value: []byte("evt-" + l.key)},
			{Key: []byte("ce_type"), Value: []byte("OrderCreated")},
			{Key: []byte("x-trace"), Value: []byte{0xff, 0x00, 0x01}},
			{Key: []byte("x-trace"), Value: nil},
		},
	}
}

// writeDeadLetters writes letters to topic's dead-letter topic, as the
// consumer does; a corrupt one is a record that is no envelope.
func writeDeadLetters(t *testing.T, k *testkit.Kafka, topic string, letters []letter) {
	t.Helper()
	p := k.Producer(t)
	pub, err := dlq.NewWriter(record.NewSyncPublisher(p), dlq.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range letters {
		if l.corrupt {
			if _, _, err := p.SendMessage(&sarama.ProducerMessage{Topic: dlq.Topic(topic, ""), Key: sarama.StringEncoder("order-x"),
				Value: sarama.StringEncoder("not an envelope")}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		o := l.original()
		o.Topic = topic
		env, err := dlq.New(o, dlq.Failure{Error: l.err, Kind: l.kind, Attempts: 3, FailedAt: l.failedAt,
			ConsumerGroup: "payouts", ReplayCount: l.replays})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pub.Write(context.Background(), env); err != nil {
			t.Fatal(err)
		}
	}
}

// sameHeaders reports whether got holds want, in order, telling null
// header values from empty ones.
func sameHeaders(got []*sarama.RecordHeader, want []dlq.Header) bool {
	return slices.EqualFunc(got, want, func(g *sarama.RecordHeader, w dlq.Header) bool {
		return bytes.Equal(g.Key, w.Key) && bytes.Equal(g.Value, w.Value) && (g.Value == nil) == (w.Value == nil)
	})
}

// showHeaders prints headers for a failure message.
func showHeaders(hs []*sarama.RecordHeader) string {
	out := make([]dlq.Header, len(hs))
	for i, h := range hs {
		out[i] = dlq.Header{Key: h.Key, Value: h.Value}
	}
	return showDLQHeaders(out)
}

// showDLQHeaders prints headers for a failure message; a null value shows
// as null.
func showDLQHeaders(hs []dlq.Header) string {
	var b strings.Builder
	for _, h := range hs {
		if h.Value == nil {
			fmt.Fprintf(&b, "[%q=null]", h.Key)
		} else {
			fmt.Fprintf(&b, "[%q=%q]", h.Key, h.Value)
		}
	}
	return b.String()
}

// logRecorder is a slog.Handler keeping each record's message and
// attributes (as text), for the test to read.
type logRecorder struct {
	mu    sync.Mutex
	lines []logLine
}

// logLine is one log record.
type logLine struct {
	msg   string
	attrs map[string]string
}

// Enabled keeps every level.
func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

// Handle keeps rec.
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	attrs := map[string]string{}
	rec.Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, logLine{msg: rec.Message, attrs: attrs})
	return nil
}

// WithAttrs and WithGroup return r: run logs nothing through With.
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }

// WithGroup returns r.
func (r *logRecorder) WithGroup(string) slog.Handler { return r }

// find returns the attributes of the records logged with msg, in order.
func (r *logRecorder) find(msg string) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, l := range r.lines {
		if l.msg == msg {
			out = append(out, l.attrs)
		}
	}
	return out
}

// values returns the attribute name of the records logged with msg.
func (r *logRecorder) values(msg, name string) []string {
	var out []string
	for _, attrs := range r.find(msg) {
		out = append(out, attrs[name])
	}
	return out
}
