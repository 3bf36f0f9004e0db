package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/record"
)

// binary runs the built courier binary and returns its exit code and
// output.
func binary(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := exec.Command(testkit.CourierBinary(t), args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("run courier %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// dlqFixture is a topic with its dead-letter topic on a test broker.
type dlqFixture struct {
	k              *testkit.Kafka
	topic, dlqName string
	brokers        string
	producer       sarama.SyncProducer
}

func newDLQFixture(t *testing.T, partitions int32) *dlqFixture {
	t.Helper()
	k := testkit.NewKafka(t)
	f := &dlqFixture{k: k, topic: k.Topic(t, partitions), brokers: strings.Join(k.Brokers, ",")}
	f.dlqName = dlq.Topic(f.topic, "")
	k.CreateTopic(t, f.dlqName, 1)
	f.producer = k.Producer(t)
	return f
}

// deadLetters writes n dead letters of keys order-0… to the dead-letter
// topic, as a consumer would, with a ce_id header and extra.
func (f *dlqFixture) deadLetters(t *testing.T, n int, errText string, extra ...dlq.Header) {
	t.Helper()
	pub, err := dlq.NewWriter(record.NewSyncPublisher(f.producer), dlq.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		env, err := dlq.New(dlq.Original{
			Topic: f.topic, Partition: 0, Offset: int64(i), Key: fmt.Appendf(nil, "order-%d", i), Value: fmt.Appendf(nil, `{"n":%d}`, i),
			Headers: append([]dlq.Header{{Key: []byte("ce_id"), Value: fmt.Appendf(nil, "evt-%d", i)}}, extra...),
		}, dlq.Failure{Error: errText, Kind: dlq.KindRetriesExhausted, ConsumerGroup: "payouts"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pub.Write(context.Background(), env); err != nil {
			t.Fatal(err)
		}
	}
}

// send writes a record to topic.
func (f *dlqFixture) send(t *testing.T, m *sarama.ProducerMessage) {
	t.Helper()
	if _, _, err := f.producer.SendMessage(m); err != nil {
		t.Fatal(err)
	}
}

// args prefixes the broker flag.
func (f *dlqFixture) args(args ...string) []string {
	return append(args, "--brokers", f.brokers)
}

// TestDLQInspectAndReplayEndToEnd runs the operator's path through the
// built binary: a consumer dead-letters a message, dlq list shows it, a dry
// run moves nothing, replay moves it back byte for byte, the fixed consumer
// handles it, and a second replay finds nothing.
func TestDLQInspectAndReplayEndToEnd(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t, 3)
	original := &sarama.ProducerMessage{
		Topic: f.topic, Partition: 2, Key: sarama.ByteEncoder([]byte{'o', 0xff, '7'}), Value: sarama.ByteEncoder([]byte(`{"amount":-5}`)),
		Headers: []sarama.RecordHeader{{Key: []byte("ce_id"), Value: []byte("evt-7")}, {Key: []byte("x"), Value: []byte{0x00, 0xfe}}, {Key: []byte("x"), Value: nil}},
	}
	f.send(t, original)

	var mu sync.Mutex
	fixed := false
	var handled []*consumer.Message
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	c, err := consumer.New(consumer.Config{
		Brokers: f.k.Brokers, Sarama: f.k.Config(), Group: "payouts." + testkit.UniqueName(t, 60), Topics: []string{f.topic},
		Handler: consumer.HandlerFunc(func(_ context.Context, m *consumer.Message) error {
			mu.Lock()
			defer mu.Unlock()
			if !fixed {
				return consumer.Permanent(errors.New("invalid amount -5"))
			}
			handled = append(handled, m)
			return nil
		}),
		Logger: testkit.Logger(t, `msg="message dead-lettered"`),
	})
	if err != nil {
		t.Fatal(err)
	}
	runErr := make(chan error, 1)
	go func() { runErr <- c.Run(ctx) }()
	defer func() {
		stop()
		if err := <-runErr; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	testkit.WaitFor(t, 30*time.Second, "the dead letter", func() bool { return len(f.k.ReadAll(t, f.dlqName)) == 1 })

	code, out, errOut := binary(t, f.args("dlq", "list", f.dlqName)...)
	if code != exitOK || !strings.Contains(out, "invalid amount -5") || !strings.Contains(out, f.topic+"[2]@0") {
		t.Fatalf("dlq list: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = binary(t, f.args("dlq", "show", f.dlqName, "--partition", "0", "--offset", "0", "--output", "json")...)
	var shown dlqEntryJSON
	if err := json.Unmarshal([]byte(out), &shown); err != nil || code != exitOK || shown.Original == nil || *shown.Original.Value != `{"amount":-5}` {
		t.Fatalf("dlq show --output json: exit %d, %v\n%s", code, err, out)
	}

	code, out, _ = binary(t, f.args("dlq", "replay", f.dlqName, "--dry-run")...)
	if code != exitOK || !strings.Contains(out, "would_move") || !strings.Contains(out, "dry run: 1 record(s)") {
		t.Fatalf("dlq replay --dry-run: exit %d\n%s", code, out)
	}
	if n := len(f.k.ReadAll(t, f.topic)); n != 1 {
		t.Fatalf("after the dry run the topic holds %d records, want the 1 original", n)
	}

	mu.Lock()
	fixed = true
	mu.Unlock()
	code, out, errOut = binary(t, f.args("dlq", "replay", f.dlqName)...)
	if code != exitOK || !strings.Contains(out, "moved 1 record(s)") {
		t.Fatalf("dlq replay: exit %d\n%s\n%s", code, out, errOut)
	}
	testkit.WaitFor(t, 30*time.Second, "the fixed consumer handles the replayed message", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 1
	})
	m := handled[0]
	key, _ := original.Key.Encode()
	value, _ := original.Value.Encode()
	if m.Partition != 2 || !bytes.Equal(m.Key, key) || !bytes.Equal(m.Value, value) || m.ID != "evt-7" {
		t.Errorf("handled %d %q=%q (id %s), want partition 2 %q=%q", m.Partition, m.Key, m.Value, m.ID, key, value)
	}
	want := append(original.Headers, sarama.RecordHeader{Key: []byte("replay_count"), Value: []byte("1")})
	if len(m.Headers) != len(want) {
		t.Fatalf("replayed headers %v, want %v", m.Headers, want)
	}
	for i, h := range m.Headers {
		if !bytes.Equal(h.Key, want[i].Key) || !bytes.Equal(h.Value, want[i].Value) || (h.Value == nil) != (want[i].Value == nil) {
			t.Errorf("header %d = %q:%q, want %q:%q", i, h.Key, h.Value, want[i].Key, want[i].Value)
		}
	}

	code, out, _ = binary(t, f.args("dlq", "replay", f.dlqName)...)
	if code != exitOK || !strings.Contains(out, "nothing to replay") {
		t.Fatalf("second replay: exit %d\n%s", code, out)
	}
}

func TestDLQReplayReportsCorruptRecordsAndGoesOn(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t, 1)
	f.deadLetters(t, 2, "boom")
	f.send(t, &sarama.ProducerMessage{Topic: f.dlqName, Value: sarama.StringEncoder(`{"not":"an envelope"}`)})
	f.deadLetters(t, 1, "boom")

	code, out, errOut := binary(t, f.args("dlq", "replay", f.dlqName)...)
	if code != exitOK || !strings.Contains(out, "corrupt") || !strings.Contains(out, f.dlqName+" 0@2") || !strings.Contains(out, "moved 3 record(s)") {
		t.Fatalf("replay past a corrupt record: exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, _ = binary(t, f.args("dlq", "list", f.dlqName, "--output", "json")...)
	var list struct {
		DeadLetters []dlqEntryJSON `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil || code != exitOK || len(list.DeadLetters) != 4 || list.DeadLetters[2].Corrupt == "" {
		t.Fatalf("dlq list --output json: exit %d, %v\n%s", code, err, out)
	}
}

func TestDLQStatsCountsByTopicAndError(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t, 1)
	f.deadLetters(t, 3, "psp timeout after 30s")
	f.deadLetters(t, 2, "invalid amount")
	code, out, _ := courier(t, f.args("dlq", "stats", f.dlqName, "--output", "json")...)
	var stats dlqStats
	if err := json.Unmarshal([]byte(out), &stats); err != nil || code != exitOK {
		t.Fatalf("dlq stats: exit %d, %v\n%s", code, err, out)
	}
	if stats.Total != 5 || len(stats.Groups) != 2 || stats.Groups[0].Count != 3 || stats.Groups[0].Error != "psp timeout after 30s" || stats.Groups[1].Count != 2 {
		t.Fatalf("stats = %+v", stats)
	}
	code, out, _ = courier(t, f.args("dlq", "stats", f.dlqName, "--error", "invalid")...)
	if code != exitOK || !strings.Contains(out, "2 dead letter(s)") || strings.Contains(out, "psp") {
		t.Fatalf("dlq stats --error invalid: exit %d\n%s", code, out)
	}
}

func TestDLQCommandErrors(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t, 1)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"missing topic argument", f.args("dlq", "list"), exitUsage, "accepts 1 arg"},
		{"bad time", f.args("dlq", "list", f.dlqName, "--since", "yesterday"), exitUsage, "--since"},
		{"bad offsets", f.args("dlq", "replay", f.dlqName, "--from-offset", "9", "--until-offset", "3"), exitUsage, "--until-offset"},
		{"bad rate", f.args("dlq", "replay", f.dlqName, "--rate", "-1"), exitUsage, "--rate"},
		{"show without place", f.args("dlq", "show", f.dlqName), exitUsage, "partition"},
		{"no such topic", f.args("dlq", "list", "nope.dlq"), exitFailure, `topic "nope.dlq" does not exist`},
		{"no such record", f.args("dlq", "show", f.dlqName, "--partition", "0", "--offset", "99"), exitFailure, "no record at that place"},
		{"unreachable broker", []string{"dlq", "stats", f.dlqName, "--brokers", "127.0.0.1:1"}, exitFailure, "cannot reach Kafka"},
		{"replay to itself", f.args("dlq", "replay", f.dlqName, "--to", f.dlqName), exitUsage, "feed it back"},
	} {
		code, _, errOut := courier(t, tc.args...)
		if code != tc.code || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d (want %d)\n%s", tc.name, code, tc.code, errOut)
		}
	}
}

// TestDLQTextOutputEscapesControlCharacters: a key, header or value with
// a terminal escape sequence is shown quoted or in base64, never raw.
func TestDLQTextOutputEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t, 1)
	pub, err := dlq.NewWriter(record.NewSyncPublisher(f.producer), dlq.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	evil := "\x1b]0;pwned\x07\x1b[31m"
	env, err := dlq.New(dlq.Original{Topic: f.topic, Key: []byte("k" + evil), Value: []byte(`{"v":"` + evil + `"}`),
		Headers: []dlq.Header{{Key: []byte("h"), Value: []byte(evil)}}}, dlq.Failure{Error: "bad" + evil, Kind: dlq.KindPermanent})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Write(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"dlq", "list", f.dlqName}, {"dlq", "stats", f.dlqName}, {"dlq", "show", f.dlqName, "--partition", "0", "--offset", "0"},
		{"dlq", "replay", f.dlqName, "--dry-run"},
	} {
		code, out, errOut := courier(t, f.args(args...)...)
		if code != exitOK || strings.ContainsAny(out+errOut, "\x1b\x07") {
			t.Errorf("courier %v: exit %d, output with control characters: %q", args, code, out)
		}
	}
}
