package dlq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/record"
)

// replayFixture is a main topic, its dead-letter topic and a producer to
// write dead letters with.
type replayFixture struct {
	k        *testkit.Kafka
	topic    string
	dlqTopic string
	producer sarama.SyncProducer
	group    string
}

func newReplayFixture(t *testing.T, partitions int32, opts ...testkit.KafkaOption) *replayFixture {
	t.Helper()
	k := testkit.NewKafka(t, opts...)
	f := &replayFixture{k: k, topic: k.Topic(t, partitions), group: "replay." + testkit.UniqueName(t, 100)}
	f.dlqTopic = dlq.Topic(f.topic, "")
	k.CreateTopic(t, f.dlqTopic, 1)
	f.producer = k.Producer(t)
	return f
}

// deadLetter writes the dead letter of o (in raw mode if raw) and returns
// its offset in the dead-letter topic.
func (f *replayFixture) deadLetter(t *testing.T, o dlq.Original, failure dlq.Failure, raw bool) int64 {
	t.Helper()
	if o.Topic == "" {
		o.Topic = f.topic
	}
	env, err := dlq.New(o, failure)
	if err != nil {
		t.Fatal(err)
	}
	writer, err := dlq.NewWriter(record.NewSyncPublisher(f.producer), dlq.WriterConfig{Raw: raw})
	if err != nil {
		t.Fatal(err)
	}
	w, err := writer.Write(context.Background(), env)
	if err != nil {
		t.Fatal(err)
	}
	return w.Offset
}

// failed dead-letters a plain record with key and error text.
func (f *replayFixture) failed(t *testing.T, key, errText string) int64 {
	t.Helper()
	return f.deadLetter(t, dlq.Original{Partition: 0, Offset: 1, Key: []byte(key), Value: []byte(`{"order":"` + key + `"}`)},
		dlq.Failure{Error: errText, Kind: dlq.KindRetriesExhausted}, false)
}

// refuseWrites makes the broker refuse, while refusing holds, the writes
// to the fixture's topic on the partitions refused selects (InvalidRecord:
// no retry helps). A request for none of them passes; the producer sends
// the records of a partition left out of an answer again.
func (f *replayFixture) refuseWrites(refusing func() bool, refused func(partition int32) bool) {
	f.k.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.k.Cluster.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if !refusing() || len(pr.Topics) == 0 || pr.Topics[0].Topic != f.topic {
			return nil, nil, false
		}
		resp := pr.ResponseKind().(*kmsg.ProduceResponse)
		refusedAny := false
		for _, topic := range pr.Topics {
			rt := kmsg.NewProduceResponseTopic()
			rt.Topic = topic.Topic
			for _, p := range topic.Partitions {
				if refused(p.Partition) {
					rp := kmsg.NewProduceResponseTopicPartition()
					rp.Partition, rp.ErrorCode = p.Partition, kerr.InvalidRecord.Code
					rt.Partitions, refusedAny = append(rt.Partitions, rp), true
				}
			}
			resp.Topics = append(resp.Topics, rt)
		}
		if !refusedAny {
			return nil, nil, false
		}
		return resp, nil, true
	})
}

// corrupt writes a record that is no dead letter to the dead-letter topic.
func (f *replayFixture) corrupt(t *testing.T, value string) int64 {
	t.Helper()
	_, offset, err := f.producer.SendMessage(&sarama.ProducerMessage{Topic: f.dlqTopic, Value: sarama.StringEncoder(value)})
	if err != nil {
		t.Fatal(err)
	}
	return offset
}

// replay runs dlq.Replay with the fixture's topic and group filled in and
// returns its report and the records it reported.
func (f *replayFixture) replay(t *testing.T, cfg dlq.ReplayConfig) (dlq.ReplayReport, []dlq.ReplayedRecord, error) {
	t.Helper()
	var mu sync.Mutex
	var records []dlq.ReplayedRecord
	cfg.Brokers, cfg.Sarama, cfg.Topic, cfg.Group = f.k.Brokers, f.k.Config(), f.dlqTopic, f.group
	cfg.OnRecord = func(r dlq.ReplayedRecord) {
		mu.Lock()
		defer mu.Unlock()
		records = append(records, r)
	}
	report, err := dlq.Replay(context.Background(), cfg)
	return report, records, err
}

func (f *replayFixture) mustReplay(t *testing.T, cfg dlq.ReplayConfig) (dlq.ReplayReport, []dlq.ReplayedRecord) {
	t.Helper()
	report, records, err := f.replay(t, cfg)
	if err != nil {
		t.Fatalf("Replay: %v (report %+v)", err, report)
	}
	return report, records
}

func TestReplayRestoresRecordsByteForByte(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 3)
	originals := []dlq.Original{
		{ // binary key and value, repeated, null and binary headers, partition 2
			Partition: 2, Offset: 41, Key: []byte{0xff, 0x00, 'k'}, Value: []byte{0x00, 0x01, 0xfe},
			Headers: []dlq.Header{{Key: []byte("ce_id"), Value: []byte("evt-1")}, {Key: []byte("x"), Value: []byte("1")},
				{Key: []byte("x"), Value: []byte("2")}, {Key: []byte("null"), Value: nil}, {Key: []byte("bin"), Value: []byte{0xc3, 0x28}}},
		},
		{ // JSON value kept as JSON in the envelope, no headers, partition 1
			Partition: 1, Offset: 7, Key: []byte("order-7"), Value: []byte(`{"amount":1999,"note":"<&>"}`),
		},
		{ // a tombstone without key, dead-lettered by the relay (no partition)
			Partition: dlq.NoPartition, Offset: dlq.NoOffset,
		},
		{ // replayed twice before: its replay_count header is replaced
			Partition: 0, Offset: 3, Key: []byte("order-3"), Value: []byte("again"),
			Headers: []dlq.Header{{Key: []byte("replay_count"), Value: []byte("2")}, {Key: []byte("ce_id"), Value: []byte("evt-3")}},
		},
	}
	for i, o := range originals {
		failure := dlq.Failure{Error: "boom", Kind: dlq.KindRetriesExhausted, ReplayCount: dlq.ReplayCount(o.Headers)}
		f.deadLetter(t, o, failure, i%2 == 1) // envelope and raw mode
	}

	report, records := f.mustReplay(t, dlq.ReplayConfig{})
	if report.Moved != len(originals) || report.Total != int64(len(originals)) || report.Corrupt+report.Refused+report.NotSelected != 0 {
		t.Fatalf("report = %+v, want %d moved", report, len(originals))
	}
	got := f.k.ReadAll(t, f.topic)
	if len(got) != len(originals) {
		t.Fatalf("the topic holds %d records, want %d", len(got), len(originals))
	}
	for _, o := range originals {
		m := findRecord(got, o)
		if m == nil {
			t.Errorf("no replayed record has key %q and value %q", o.Key, o.Value)
			continue
		}
		if o.Partition >= 0 && m.Partition != o.Partition {
			t.Errorf("key %q went to partition %d, want its original %d", o.Key, m.Partition, o.Partition)
		}
		want := []dlq.Header{}
		for _, h := range o.Headers {
			if string(h.Key) != dlq.ReplayCountHeader {
				want = append(want, h)
			}
		}
		want = append(want, dlq.Header{Key: []byte("replay_count"), Value: []byte(strconv.Itoa(dlq.ReplayCount(o.Headers) + 1))})
		if !sameHeaders(m.Headers, want) {
			t.Errorf("key %q: headers %s, want %s", o.Key, showHeaders(m.Headers), showDLQHeaders(want))
		}
	}
	for _, r := range records {
		if r.Action != dlq.ActionMoved || r.To != f.topic || r.ToOffset < 0 {
			t.Errorf("reported %+v, want moved to %s", r, f.topic)
		}
	}

	again, _ := f.mustReplay(t, dlq.ReplayConfig{})
	if again.Moved != 0 || again.Total != 0 {
		t.Errorf("a second replay: %+v, want nothing to move", again)
	}
}

// findRecord returns the record with o's key and value (nil and empty
// distinct).
func findRecord(msgs []*sarama.ConsumerMessage, o dlq.Original) *sarama.ConsumerMessage {
	for _, m := range msgs {
		if sameBytes(m.Key, o.Key) && sameBytes(m.Value, o.Value) {
			return m
		}
	}
	return nil
}

func sameHeaders(got []*sarama.RecordHeader, want []dlq.Header) bool {
	if len(got) != len(want) {
		return false
	}
	for i, h := range got {
		if !sameBytes(h.Key, want[i].Key) || !sameBytes(h.Value, want[i].Value) {
			return false
		}
	}
	return true
}

func showHeaders(hs []*sarama.RecordHeader) string {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "%q:%q(nil=%v) ", h.Key, h.Value, h.Value == nil)
	}
	return b.String()
}

func showDLQHeaders(hs []dlq.Header) string {
	var b strings.Builder
	for _, h := range hs {
		fmt.Fprintf(&b, "%q:%q(nil=%v) ", h.Key, h.Value, h.Value == nil)
	}
	return b.String()
}

func TestReplayDryRunMovesNothing(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	for i := range 3 {
		f.failed(t, fmt.Sprint("order-", i), "psp timeout")
	}
	report, records := f.mustReplay(t, dlq.ReplayConfig{DryRun: true})
	if !report.DryRun || report.Moved != 3 || len(records) != 3 || records[0].Action != dlq.ActionWouldMove || records[0].ToOffset != -1 {
		t.Fatalf("dry run: %+v %+v, want 3 would_move", report, records)
	}
	if n := len(f.k.ReadAll(t, f.topic)); n != 0 {
		t.Fatalf("a dry run wrote %d records", n)
	}
	if report, _ := f.mustReplay(t, dlq.ReplayConfig{}); report.Moved != 3 {
		t.Fatalf("the replay after a dry run moved %d, want 3 (a dry run commits nothing)", report.Moved)
	}
}

func TestReplayLeavesWhatTheFiltersLeaveOutForALaterRun(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	for i := range 6 {
		errText := "invalid amount"
		if i%2 == 1 {
			errText = "PSP timeout after 30s"
		}
		f.failed(t, fmt.Sprint("order-", i), errText)
	}
	first, _ := f.mustReplay(t, dlq.ReplayConfig{Filter: dlq.Filter{ErrorContains: "timeout"}})
	if first.Moved != 3 || first.NotSelected != 3 {
		t.Fatalf("replay of the timeouts: %+v, want 3 moved and 3 left", first)
	}
	second, _ := f.mustReplay(t, dlq.ReplayConfig{Filter: dlq.Filter{ErrorContains: "invalid"}})
	if second.Moved != 3 || second.AlreadyReplayed != 3 {
		t.Fatalf("replay of the rest: %+v, want 3 moved and 3 already replayed", second)
	}
	third, _ := f.mustReplay(t, dlq.ReplayConfig{})
	if third.Moved != 0 || third.Total != 0 {
		t.Fatalf("a third replay: %+v, want nothing left", third)
	}
	keys := map[string]int{}
	for _, m := range f.k.ReadAll(t, f.topic) {
		keys[string(m.Key)]++
	}
	for i := range 6 {
		if keys[fmt.Sprint("order-", i)] != 1 {
			t.Errorf("order-%d replayed %d times, want once", i, keys[fmt.Sprint("order-", i)])
		}
	}
}

func TestReplayReportsAndSkipsCorruptRecords(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	f.failed(t, "order-0", "boom")
	notJSON := f.corrupt(t, "not an envelope")
	f.failed(t, "order-2", "boom")
	newer := f.corrupt(t, `{"envelope_version":2,"original_topic":"x"}`)
	f.failed(t, "order-4", "boom")

	report, records := f.mustReplay(t, dlq.ReplayConfig{})
	if report.Moved != 3 || report.Corrupt != 2 {
		t.Fatalf("report = %+v, want 3 moved and 2 corrupt", report)
	}
	var corrupt []dlq.ReplayedRecord
	for _, r := range records {
		if r.Action == dlq.ActionCorrupt {
			corrupt = append(corrupt, r)
		}
	}
	if len(corrupt) != 2 || corrupt[0].Entry.Offset != notJSON || corrupt[1].Entry.Offset != newer {
		t.Fatalf("corrupt records reported: %+v, want offsets %d and %d", corrupt, notJSON, newer)
	}
	if !errors.Is(corrupt[0].Entry.Err, dlq.ErrCorruptEnvelope) || !errors.Is(corrupt[1].Entry.Err, dlq.ErrUnsupportedVersion) ||
		!strings.Contains(corrupt[1].Reason, "upgrade courier") {
		t.Errorf("errors %v and %v, want corrupt and unsupported version", corrupt[0].Entry.Err, corrupt[1].Entry.Err)
	}
	// Reported once, then passed: a second run has nothing to read.
	again, _ := f.mustReplay(t, dlq.ReplayConfig{})
	if again.Moved != 0 || again.Corrupt != 0 || again.Total != 0 {
		t.Errorf("a second replay: %+v, want nothing left to read", again)
	}
}

func TestReplayRefusesRecordsReplayedTooOften(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	o := dlq.Original{Partition: 0, Offset: 9, Key: []byte("loop"), Value: []byte("v"),
		Headers: []dlq.Header{{Key: []byte("replay_count"), Value: []byte("3")}}}
	f.deadLetter(t, o, dlq.Failure{Error: "still broken", Kind: dlq.KindPermanent, ReplayCount: 3}, false)

	report, records := f.mustReplay(t, dlq.ReplayConfig{})
	if report.Refused != 1 || report.Moved != 0 || records[0].Action != dlq.ActionRefused || !strings.Contains(records[0].Reason, "replayed 3 times") {
		t.Fatalf("default MaxReplays 3: %+v %+v, want the record refused", report, records)
	}
	report, _ = f.mustReplay(t, dlq.ReplayConfig{MaxReplays: 5})
	if report.Moved != 1 {
		t.Fatalf("MaxReplays 5: %+v, want it moved", report)
	}
	got := f.k.ReadAll(t, f.topic)
	if len(got) != 1 || len(got[0].Headers) != 1 || string(got[0].Headers[0].Value) != "4" {
		t.Fatalf("replayed %d records, headers %s; want one with replay_count 4", len(got), showHeaders(got[0].Headers))
	}
}

func TestReplayStopsAtMaxAndTheNextRunGoesOn(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	for i := range 5 {
		f.failed(t, fmt.Sprint("order-", i), "boom")
	}
	report, _ := f.mustReplay(t, dlq.ReplayConfig{Max: 2})
	if report.Moved != 2 || !report.StoppedAtMax {
		t.Fatalf("Max 2: %+v", report)
	}
	report, _ = f.mustReplay(t, dlq.ReplayConfig{})
	if report.Moved != 3 {
		t.Fatalf("the next run moved %d, want the other 3", report.Moved)
	}
}

func TestReplayRateSpacesTheWrites(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	for i := range 5 {
		f.failed(t, fmt.Sprint("order-", i), "boom")
	}
	report, _ := f.mustReplay(t, dlq.ReplayConfig{Rate: 50})
	// 5 records at 50/s: the 5th may go 80ms after the run started, no
	// earlier.
	if report.Moved != 5 || report.Elapsed < 80*time.Millisecond {
		t.Fatalf("Rate 50: moved %d in %v, want 5 in at least 80ms", report.Moved, report.Elapsed)
	}
}

func TestReplayWriteFailureCommitsNothingOfTheBatch(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1, testkit.InProcess()) // the broker fails produce requests
	for i := range 6 {
		f.failed(t, fmt.Sprint("order-", i), "boom")
	}
	// Once the first batch's position is committed (the run's second
	// commit: the first renews the position it starts from), every write
	// to the topic fails.
	var commits atomic.Int32
	var healed atomic.Bool
	f.k.Cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.k.Cluster.KeepControl()
		if req.(*kmsg.OffsetCommitRequest).Group == f.group {
			commits.Add(1)
		}
		return nil, nil, false
	})
	f.refuseWrites(func() bool { return !healed.Load() && commits.Load() >= 2 }, func(int32) bool { return true })
	report, _, err := f.replay(t, dlq.ReplayConfig{BatchSize: 2})
	if err == nil || report.Moved != 2 {
		t.Fatalf("with the second batch failing: moved %d, err %v; want 2 moved and an error", report.Moved, err)
	}
	healed.Store(true)
	report, _ = f.mustReplay(t, dlq.ReplayConfig{BatchSize: 2})
	if report.Moved != 4 {
		t.Fatalf("the run after the failure moved %d, want the 4 not acknowledged before", report.Moved)
	}
	keys := map[string]int{}
	got := f.k.ReadAll(t, f.topic)
	for _, m := range got {
		keys[string(m.Key)]++
	}
	if len(keys) != 6 || len(got) != 6 {
		t.Fatalf("the topic holds %d records, %d distinct, want each of the 6 once: %v", len(got), len(keys), keys)
	}
}

func TestReplayConfigErrors(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]dlq.ReplayConfig{
		"no brokers":      {Topic: "orders.dlq"},
		"no topic":        {Brokers: []string{"127.0.0.1:1"}},
		"to itself":       {Brokers: []string{"127.0.0.1:1"}, Topic: "orders.dlq", To: "orders.dlq"},
		"negative rate":   {Brokers: []string{"127.0.0.1:1"}, Topic: "orders.dlq", Rate: -1},
		"bad topic name":  {Brokers: []string{"127.0.0.1:1"}, Topic: "orders dlq"},
		"empty offsets":   {Brokers: []string{"127.0.0.1:1"}, Topic: "orders.dlq", Filter: dlq.Filter{FromOffset: 5, UntilOffset: 5}},
		"negative expect": {Brokers: []string{"127.0.0.1:1"}, Topic: "orders.dlq", Expect: -1},
		"rate too small":  {Brokers: []string{"127.0.0.1:1"}, Topic: "orders.dlq", Rate: 1e-10},
	} {
		if _, err := dlq.Replay(context.Background(), cfg); !errors.Is(err, dlq.ErrInvalidReplayConfig) {
			t.Errorf("%s: err %v, want ErrInvalidReplayConfig", name, err)
		}
	}
}

func TestScanAndGetReadWithoutCommitting(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	f.failed(t, "order-0", "boom")
	bad := f.corrupt(t, "{")
	f.failed(t, "order-2", "psp timeout")

	client, err := sarama.NewClient(f.k.Brokers, f.k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var seen []dlq.Entry
	if err := dlq.Scan(context.Background(), client, f.dlqTopic, dlq.Filter{}, func(e dlq.Entry) error {
		seen = append(seen, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 3 || seen[1].Offset != bad || seen[1].Err == nil || seen[2].Envelope.Error != "psp timeout" {
		t.Fatalf("scanned %+v", seen)
	}
	timeouts := dlq.Filter{ErrorContains: "TIMEOUT"}
	if timeouts.Match(seen[0]) || !timeouts.Match(seen[2]) || timeouts.Match(seen[1]) {
		t.Errorf("ErrorContains matched the wrong entries")
	}
	if !(dlq.Filter{}).Match(seen[1]) {
		t.Errorf("an empty filter left the corrupt entry out")
	}

	e, err := dlq.Get(context.Background(), client, f.dlqTopic, 0, 2)
	if err != nil || *e.Envelope.OriginalKey != "order-2" {
		t.Fatalf("Get(0, 2) = %+v, %v", e, err)
	}
	if _, err := dlq.Get(context.Background(), client, f.dlqTopic, 0, 3); !errors.Is(err, dlq.ErrNotFound) {
		t.Errorf("Get past the end: %v, want ErrNotFound", err)
	}
	if err := dlq.Scan(context.Background(), client, "no.such.topic", dlq.Filter{}, func(dlq.Entry) error { return nil }); !errors.Is(err, dlq.ErrNoTopic) {
		t.Errorf("Scan of a missing topic: %v, want ErrNoTopic", err)
	}
	// Reading committed nothing: a replay still moves both dead letters.
	if report, _ := f.mustReplay(t, dlq.ReplayConfig{}); report.Moved != 2 {
		t.Errorf("replay after Scan moved %d, want 2", report.Moved)
	}
}

// TestReplayRenewsItsPositionWithNothingToMove: Kafka forgets a memberless
// group's offsets some days after its last commit, so every run commits
// its position again, even when it moves nothing.
func TestReplayRenewsItsPositionWithNothingToMove(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1, testkit.InProcess()) // the broker counts the commits
	f.failed(t, "order-0", "boom")
	f.mustReplay(t, dlq.ReplayConfig{})
	var commits atomic.Int32
	f.k.Cluster.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.k.Cluster.KeepControl()
		if req.(*kmsg.OffsetCommitRequest).Group == f.group {
			commits.Add(1)
		}
		return nil, nil, false
	})
	if report, _ := f.mustReplay(t, dlq.ReplayConfig{}); report.Moved != 0 || commits.Load() != 1 {
		t.Fatalf("a run with nothing to move: moved %d, %d commits; want 0 and 1", report.Moved, commits.Load())
	}
	if _, _ = f.mustReplay(t, dlq.ReplayConfig{DryRun: true}); commits.Load() != 1 {
		t.Errorf("a dry run committed")
	}
}

// txDeadLetters writes n dead letters, each in a transaction of its own,
// so that every record is followed by a transaction marker: offsets that
// hold no record, the last one included.
func (f *replayFixture) txDeadLetters(t *testing.T, n int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.k.Brokers...), kgo.TransactionalID("tx-"+f.group),
		kgo.DefaultProduceTopic(f.dlqTopic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	for i := range n {
		env, err := dlq.New(dlq.Original{Topic: f.topic, Partition: 0, Offset: int64(i), Key: fmt.Appendf(nil, "order-%d", i), Value: []byte("{}")},
			dlq.Failure{Error: "boom", Kind: dlq.KindRetriesExhausted})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := env.Record()
		if err != nil {
			t.Fatal(err)
		}
		kr := &kgo.Record{Key: rec.Key, Value: rec.Value}
		for _, h := range rec.Headers {
			kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: string(h.Key), Value: h.Value})
		}
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, kr).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReplayPassesOffsetsWithoutRecords: a dead-letter topic written in
// transactions ends on a marker no consumer delivers; reading stops at it
// instead of hanging, and the markers settle, so the position ends at the
// topic's end with nothing left in its metadata.
func TestReplayPassesOffsetsWithoutRecords(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1, testkit.InProcess())
	const n = 300
	f.txDeadLetters(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang fails the test
	defer cancel()
	client, err := sarama.NewClient(f.k.Brokers, f.k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	scanned := 0
	if err := dlq.Scan(ctx, client, f.dlqTopic, dlq.Filter{}, func(dlq.Entry) error { scanned++; return nil }); err != nil || scanned != n {
		t.Fatalf("Scan: %d records, %v; want %d", scanned, err, n)
	}
	cfg := dlq.ReplayConfig{Brokers: f.k.Brokers, Sarama: f.k.Config(), Topic: f.dlqTopic, Group: f.group}
	report, err := dlq.Replay(ctx, cfg)
	if err != nil || report.Moved != n {
		t.Fatalf("Replay: moved %d, %v; want %d", report.Moved, err, n)
	}
	admin, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	offsets, err := admin.ListConsumerGroupOffsets(f.group, map[string][]int32{f.dlqTopic: {0}})
	if err != nil {
		t.Fatal(err)
	}
	end, _ := client.GetOffset(f.dlqTopic, 0, sarama.OffsetNewest)
	if b := offsets.GetBlock(f.dlqTopic, 0); b == nil || b.Offset != end || strings.Contains(b.Metadata, "done=") {
		t.Errorf("committed %+v, want offset %d (the end, past the last marker) and no offsets in the metadata", b, end)
	}
	if again, err := dlq.Replay(ctx, cfg); err != nil || again.Total != 0 {
		t.Errorf("a second replay: %+v, %v; want nothing to read", again, err)
	}
}

// TestConcurrentReplaysOfOneGroupWriteAtMostABatchTwice: two runs of one
// group at once; the one that finds the position moved under it stops.
func TestConcurrentReplaysOfOneGroupWriteAtMostABatchTwice(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	const n, batch = 200, 10
	for i := range n {
		f.failed(t, fmt.Sprint("order-", i), "boom")
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { _, _, errs[i] = f.replay(t, dlq.ReplayConfig{BatchSize: batch, Rate: 1000}) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, dlq.ErrConcurrentReplay) {
			t.Fatalf("a run failed otherwise: %v", err)
		}
	}
	f.mustReplay(t, dlq.ReplayConfig{}) // whatever the stopped run left
	got := f.k.ReadAll(t, f.topic)
	keys := map[string]bool{}
	for _, m := range got {
		keys[string(m.Key)] = true
	}
	if len(keys) != n || len(got) > n+batch {
		t.Fatalf("%d records, %d distinct; want all %d, at most %d written twice (errors %v)", len(got), len(keys), n, batch, errs)
	}
	t.Logf("written twice: %d; errors: %v", len(got)-n, errs)
}

// TestReplayCommitsThePartOfABatchThatWasWritten: the broker refuses the
// records of one partition; those of the other are committed, and only the
// refused ones are written again.
func TestReplayCommitsThePartOfABatchThatWasWritten(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 2, testkit.InProcess())
	for i := range 6 {
		f.deadLetter(t, dlq.Original{Partition: int32(i % 2), Offset: int64(i), Key: fmt.Appendf(nil, "order-%d", i), Value: []byte("{}")},
			dlq.Failure{Error: "boom", Kind: dlq.KindRetriesExhausted}, false)
	}
	var healed atomic.Bool
	f.refuseWrites(func() bool { return !healed.Load() }, func(p int32) bool { return p == 1 })
	report, _, err := f.replay(t, dlq.ReplayConfig{})
	if err == nil || report.Moved != 3 {
		t.Fatalf("with partition 1 refused: moved %d, err %v; want the 3 of partition 0 and an error", report.Moved, err)
	}
	healed.Store(true)
	if report, _ := f.mustReplay(t, dlq.ReplayConfig{}); report.Moved != 3 {
		t.Fatalf("the next run: %+v, want the 3 refused moved, and none of the others", report)
	}
	if got := f.k.ReadAll(t, f.topic); len(got) != 6 {
		t.Fatalf("the topic holds %d records, want each of the 6 once", len(got))
	}
}

// TestReplayReportsCorruptRecordsWhateverTheFilters: a corrupt record has
// no envelope to filter on; a filtered run reports it too.
func TestReplayReportsCorruptRecordsWhateverTheFilters(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	f.failed(t, "order-0", "psp timeout")
	f.corrupt(t, "not an envelope")
	report, _ := f.mustReplay(t, dlq.ReplayConfig{Filter: dlq.Filter{ErrorContains: "timeout"}})
	if report.Moved != 1 || report.Corrupt != 1 || report.NotSelected != 0 {
		t.Fatalf("a filtered run: %+v, want 1 moved and the corrupt record reported", report)
	}
}

// TestReplayWithExpectRefusesASetThatChanged: a replay told to move the 3
// records its dry run showed, run after a fourth matching dead letter
// arrived, writes and commits nothing and says what it found; told the new
// count, it moves the 4, calling OnChecked once before its first write.
func TestReplayWithExpectRefusesASetThatChanged(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	timeouts := dlq.Filter{ErrorContains: "timeout"}
	for i := range 3 {
		f.failed(t, fmt.Sprint("order-", i), "psp timeout")
	}
	f.failed(t, "order-x", "invalid amount")
	dry, _ := f.mustReplay(t, dlq.ReplayConfig{Filter: timeouts, DryRun: true})
	if dry.Moved != 3 {
		t.Fatalf("dry run: %+v, want 3 would move", dry)
	}
	f.failed(t, "order-3", "psp timeout") // arrives after the dry run

	checked := 0
	report, records, err := f.replay(t, dlq.ReplayConfig{Filter: timeouts, Expect: dry.Moved,
		OnChecked: func(dlq.ReplayReport) error { checked++; return nil }})
	var changed *dlq.SetChangedError
	if !errors.Is(err, dlq.ErrSetChanged) || !errors.As(err, &changed) || changed.Expected != 3 || changed.Found != 4 {
		t.Fatalf("replay expecting 3 of 4: err %v, want a SetChangedError of 3 expected, 4 found", err)
	}
	if !report.DryRun || report.Moved != 4 || checked != 0 || len(records) != 0 {
		t.Errorf("refused replay: report %+v, OnChecked called %d times, %d records reported; want the check's report (4 would move), no call, no record",
			report, checked, len(records))
	}
	if n := len(f.k.ReadAll(t, f.topic)); n != 0 {
		t.Fatalf("a replay whose set changed wrote %d records", n)
	}

	report, _, err = f.replay(t, dlq.ReplayConfig{Filter: timeouts, Expect: 4, OnChecked: func(check dlq.ReplayReport) error {
		checked++
		if n := len(f.k.ReadAll(t, f.topic)); n != 0 || check.Moved != 4 {
			t.Errorf("OnChecked: %d records written already, check %+v; want none written, 4 to move", n, check)
		}
		return nil
	}})
	if err != nil || report.Moved != 4 || report.NotSelected != 1 || checked != 1 {
		t.Fatalf("replay expecting 4: %+v, %v, OnChecked called %d times; want 4 moved, 1 left out, one call", report, err, checked)
	}
	if n := len(f.k.ReadAll(t, f.topic)); n != 4 {
		t.Errorf("%d records on the topic, want the 4 timeouts", n)
	}
}

// TestReplayWithExpectMovesOnlyWhatItChecked: a dead letter whose target
// topic is created between the check and the writes could move now, but
// was not in the checked count: it is skipped and stays, so the run moves
// exactly the count it was given; the next run moves it. An error of
// OnChecked ends a run before anything is written.
func TestReplayWithExpectMovesOnlyWhatItChecked(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	late := f.topic + ".late"
	for i := range 2 {
		f.failed(t, fmt.Sprint("order-", i), "boom")
	}
	env, err := dlq.New(dlq.Original{Topic: late, Partition: 0, Offset: 1, Key: []byte("late"), Value: []byte(`{}`)},
		dlq.Failure{Error: "boom", Kind: dlq.KindRetriesExhausted})
	if err != nil {
		t.Fatal(err)
	}
	value, err := dlq.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.producer.SendMessage(&sarama.ProducerMessage{Topic: f.dlqTopic, Value: sarama.ByteEncoder(value)}); err != nil {
		t.Fatal(err)
	}

	stop := errors.New("the operator's audit row could not be written")
	if _, _, err := f.replay(t, dlq.ReplayConfig{Expect: 2, OnChecked: func(dlq.ReplayReport) error { return stop }}); !errors.Is(err, stop) {
		t.Fatalf("OnChecked failing: err %v, want its error", err)
	}
	if n := len(f.k.ReadAll(t, f.topic)); n != 0 {
		t.Fatalf("a run whose OnChecked failed wrote %d records", n)
	}

	report, records, err := f.replay(t, dlq.ReplayConfig{Expect: 2, OnChecked: func(check dlq.ReplayReport) error {
		if check.Moved != 2 || check.Skipped != 1 {
			t.Errorf("check %+v: want 2 to move and the one for %s skipped", check, late)
		}
		f.k.CreateTopic(t, late, 1)
		return nil
	}})
	if err != nil || report.Moved != 2 || report.Skipped != 1 {
		t.Fatalf("replay expecting 2: %+v, %v; want 2 moved, the late one skipped", report, err)
	}
	for _, r := range records {
		if r.Action == dlq.ActionSkipped && !strings.Contains(r.Reason, "checked its set") {
			t.Errorf("skipped for %q, want the reason that it was not in the checked count", r.Reason)
		}
	}
	if n := len(f.k.ReadAll(t, late)); n != 0 {
		t.Errorf("%d records moved to %s, which the check did not count", n, late)
	}
	if next, _ := f.mustReplay(t, dlq.ReplayConfig{}); next.Moved != 1 || len(f.k.ReadAll(t, late)) != 1 {
		t.Errorf("the next run: %+v, want the late one moved", next)
	}
}

// TestReplayWithExpectSetRefusesOtherRecordsOfTheSameCount: a dry run
// shows a and b. Another run of the group then replays a, and c arrives:
// the set holds 2 records still, but not those, so a replay given the dry
// run's Set (and count) writes nothing; nor does one that would send the
// same records elsewhere (To). Given the Set of a new dry run, it moves b
// and c, and its report's Set is that dry run's.
func TestReplayWithExpectSetRefusesOtherRecordsOfTheSameCount(t *testing.T) {
	t.Parallel()
	f := newReplayFixture(t, 1)
	f.k.CreateTopic(t, f.topic+".elsewhere", 1)
	f.failed(t, "a", "boom")
	f.failed(t, "b", "boom")
	dry, _ := f.mustReplay(t, dlq.ReplayConfig{DryRun: true})
	if dry.Moved != 2 || len(dry.Set) != 32 {
		t.Fatalf("dry run: %+v, want 2 would move and a Set of 32 hex digits", dry)
	}
	if again, _ := f.mustReplay(t, dlq.ReplayConfig{DryRun: true}); again.Set != dry.Set {
		t.Fatalf("two dry runs of the same records: Sets %s and %s", dry.Set, again.Set)
	}
	if _, _, err := f.replay(t, dlq.ReplayConfig{To: f.topic + ".elsewhere", Expect: 2, ExpectSet: dry.Set}); !errors.Is(err, dlq.ErrSetChanged) {
		t.Errorf("the same records to another topic: err %v, want ErrSetChanged", err)
	}
	if report, _ := f.mustReplay(t, dlq.ReplayConfig{Max: 1}); report.Moved != 1 { // another run replays a
		t.Fatalf("the other run: %+v", report)
	}
	f.failed(t, "c", "boom")

	_, _, err := f.replay(t, dlq.ReplayConfig{Expect: 2, ExpectSet: dry.Set})
	var changed *dlq.SetChangedError
	if !errors.As(err, &changed) || !changed.OtherRecords || changed.Found != 2 || !strings.Contains(err.Error(), "not the ones its dry run showed") {
		t.Fatalf("2 other records: err %v, want a SetChangedError of other records", err)
	}
	if keys := f.keys(t); len(keys) != 1 {
		t.Fatalf("a refused replay wrote: the topic holds %v, want the other run's a only", keys)
	}
	now, _ := f.mustReplay(t, dlq.ReplayConfig{DryRun: true})
	report, _ := f.mustReplay(t, dlq.ReplayConfig{ExpectSet: now.Set})
	if report.Moved != 2 || report.Set != now.Set {
		t.Errorf("the replay of the new dry run's Set: %+v, want b and c moved, its Set %s", report, now.Set)
	}
	if _, err := dlq.Replay(context.Background(), dlq.ReplayConfig{Brokers: f.k.Brokers, Topic: f.dlqTopic, ExpectSet: "not-a-set"}); !errors.Is(err, dlq.ErrInvalidReplayConfig) {
		t.Errorf("ExpectSet not-a-set: err %v, want ErrInvalidReplayConfig", err)
	}
}

// keys are the keys of the records on the fixture's topic, in order.
func (f *replayFixture) keys(t *testing.T) []string {
	t.Helper()
	var keys []string
	for _, m := range f.k.ReadAll(t, f.topic) {
		keys = append(keys, string(m.Key))
	}
	return keys
}

// wideDeadLetters dead-letters n records of the fixture's topic into a
// dead-letter topic of its own with partitions partitions (by key, as the
// consumer writes them) and returns its name and how many dead letters
// each of its partitions holds.
func (f *replayFixture) wideDeadLetters(t *testing.T, partitions int32, n int) (string, map[int32]int) {
	t.Helper()
	const suffix = ".wide-dlq"
	wide := f.topic + suffix
	f.k.CreateTopic(t, wide, partitions)
	writer, err := dlq.NewWriter(record.NewSyncPublisher(f.k.KeyedProducer(t)), dlq.WriterConfig{Suffix: suffix})
	if err != nil {
		t.Fatal(err)
	}
	written := map[int32]int{}
	for i := range n {
		key := "order-" + strconv.Itoa(i)
		env, err := dlq.New(dlq.Original{Topic: f.topic, Partition: int32(i) % 4, Offset: int64(i), Key: []byte(key), Value: []byte(`{"order":"` + key + `"}`)},
			dlq.Failure{Error: "psp timeout", Kind: dlq.KindRetriesExhausted})
		if err != nil {
			t.Fatal(err)
		}
		w, err := writer.Write(context.Background(), env)
		if err != nil {
			t.Fatal(err)
		}
		written[w.Partition]++
	}
	if len(written) < 2 {
		t.Fatalf("the dead letters all went to one partition (%v); the test needs several", written)
	}
	return wide, written
}

// holdFirstWrite makes the broker hold the first write to the fixture's
// topic until until is closed, or for 15 seconds (a replay that waits for
// that write before it goes on never closes it); released reports, once
// the write was answered, whether until let it go.
func (f *replayFixture) holdFirstWrite(until <-chan struct{}) (released func() bool) {
	var held, let atomic.Bool
	f.k.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.k.Cluster.KeepControl()
		pr := req.(*kmsg.ProduceRequest)
		if len(pr.Topics) == 0 || pr.Topics[0].Topic != f.topic || held.Swap(true) {
			return nil, nil, false
		}
		f.k.Cluster.SleepControl(func() {
			select {
			case <-until:
				let.Store(true)
			case <-time.After(15 * time.Second):
			}
		})
		return nil, nil, false
	})
	return let.Load
}

// While a partition's batch waits for its acknowledgement, the replay
// reads the other partitions of the dead-letter topic: the broker holds
// the first write until it saw a read of every partition that holds dead
// letters (which a replay going one partition after the other never sends
// before that write is answered), and the replay still moves each dead
// letter once.
func TestReplayReadsOtherPartitionsWhileABatchWaits(t *testing.T) {
	f := newReplayFixture(t, 4)
	wide, written := f.wideDeadLetters(t, 4, 40)
	var mu sync.Mutex
	fetched := map[int32]bool{}
	allFetched := make(chan struct{})
	f.k.Cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		f.k.Cluster.KeepControl()
		mu.Lock()
		defer mu.Unlock()
		for _, topic := range req.(*kmsg.FetchRequest).Topics {
			for _, p := range topic.Partitions {
				if topic.Topic == wide && written[p.Partition] > 0 && !fetched[p.Partition] {
					if fetched[p.Partition] = true; len(fetched) == len(written) {
						close(allFetched)
					}
				}
			}
		}
		return nil, nil, false
	})
	readWhileHeld := f.holdFirstWrite(allFetched)
	report, err := dlq.Replay(context.Background(), dlq.ReplayConfig{Brokers: f.k.Brokers, Sarama: f.k.Config(), Topic: wide, Group: f.group, BatchSize: 3})
	if err != nil {
		t.Fatalf("Replay: %v (report %+v)", err, report)
	}
	if !readWhileHeld() {
		t.Errorf("while the first write waited, the replay did not read all %d partitions holding dead letters", len(written))
	}
	if report.Moved != 40 {
		t.Errorf("moved %d, want 40 (report %+v)", report.Moved, report)
	}
	seen := map[string]int{}
	for _, m := range f.k.ReadAll(t, f.topic) {
		seen[string(m.Key)]++
	}
	for i := range 40 {
		if key := "order-" + strconv.Itoa(i); seen[key] != 1 {
			t.Errorf("%s is in %s %d times, want once", key, f.topic, seen[key])
		}
	}
}

// With Concurrency 1 (as with Max) a replay goes through the partitions
// one after the other, in partition order, and its dry run's Set is the
// Set of the concurrent run: the partitions' interleaving does not change
// it.
func TestReplayWithConcurrencyOneGoesInPartitionOrder(t *testing.T) {
	f := newReplayFixture(t, 4)
	wide, _ := f.wideDeadLetters(t, 4, 40)
	var order []int32
	dry, err := dlq.Replay(context.Background(), dlq.ReplayConfig{Brokers: f.k.Brokers, Sarama: f.k.Config(), Topic: wide, Group: f.group,
		Concurrency: 1, DryRun: true, BatchSize: 3, OnRecord: func(r dlq.ReplayedRecord) { order = append(order, r.Entry.Partition) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(order) != 40 || !slices.IsSorted(order) {
		t.Errorf("dry run with Concurrency 1 reported the partitions %v; want 40 records in partition order", order)
	}
	report, err := dlq.Replay(context.Background(), dlq.ReplayConfig{Brokers: f.k.Brokers, Sarama: f.k.Config(), Topic: wide, Group: f.group,
		BatchSize: 3, ExpectSet: dry.Set})
	if err != nil {
		t.Fatalf("the concurrent replay refused the Set of the dry run that went one partition at a time: %v", err)
	}
	if report.Moved != 40 || report.Set != dry.Set {
		t.Errorf("moved %d with Set %s; want 40 with the dry run's %s", report.Moved, report.Set, dry.Set)
	}
}

// A partition's reads go on while its batch is written: the broker holds
// the first write until the replay reported the corrupt record that
// follows that batch (which a replay that reads only once its batch is
// acknowledged never reaches), and every dead letter still moves once.
func TestReplayReadsOnWhileItsBatchIsWritten(t *testing.T) {
	f := newReplayFixture(t, 1)
	for _, key := range []string{"a", "b", "c"} {
		f.failed(t, key, "psp timeout")
	}
	corruptAt := f.corrupt(t, "not an envelope")
	f.failed(t, "d", "psp timeout")
	corruptSeen := make(chan struct{})
	readWhileHeld := f.holdFirstWrite(corruptSeen)
	var once sync.Once
	report, err := dlq.Replay(context.Background(), dlq.ReplayConfig{Brokers: f.k.Brokers, Sarama: f.k.Config(), Topic: f.dlqTopic, Group: f.group,
		BatchSize: 3, OnRecord: func(r dlq.ReplayedRecord) {
			if r.Action == dlq.ActionCorrupt && r.Entry.Offset == corruptAt {
				once.Do(func() { close(corruptSeen) })
			}
		}})
	if err != nil {
		t.Fatalf("Replay: %v (report %+v)", err, report)
	}
	if !readWhileHeld() {
		t.Errorf("the replay reached the record after its first batch only once that batch was acknowledged")
	}
	if report.Moved != 4 || report.Corrupt != 1 {
		t.Errorf("moved %d, corrupt %d; want 4 and 1 (report %+v)", report.Moved, report.Corrupt, report)
	}
	seen := map[string]int{}
	for _, m := range f.k.ReadAll(t, f.topic) {
		seen[string(m.Key)]++
	}
	for _, key := range []string{"a", "b", "c", "d"} {
		if seen[key] != 1 {
			t.Errorf("%s is in %s %d times, want once", key, f.topic, seen[key])
		}
	}
}
