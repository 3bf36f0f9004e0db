package record_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/IBM/sarama/mocks"

	"github.com/courierkit/courier/record"
)

func TestMessage(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 16, 9, 59, 58, 0, time.UTC)
	headers := []record.Header{
		{Key: []byte("ce_id"), Value: []byte("1")},
		{Key: []byte("x"), Value: nil},
		{Key: []byte("x"), Value: []byte{}},
		{Key: []byte("ce_id"), Value: []byte("2")},
	}
	for _, tc := range []struct {
		name string
		r    record.Record
	}{
		{"nil key, tombstone", record.Record{Topic: "t", Headers: headers}},
		{"empty key and value", record.Record{Topic: "t", Key: []byte{}, Value: []byte{}}},
		{"key, value, timestamp and partition", record.Record{Topic: "t", Key: []byte("k"), Value: []byte("v"), Timestamp: at, Partition: 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			msg := record.Message(&tc.r)
			if msg.Topic != tc.r.Topic || msg.Partition != tc.r.Partition || !msg.Timestamp.Equal(tc.r.Timestamp) {
				t.Errorf("message to %s/%d at %v, want %s/%d at %v", msg.Topic, msg.Partition, msg.Timestamp, tc.r.Topic, tc.r.Partition, tc.r.Timestamp)
			}
			checkBytes(t, "key", msg.Key, tc.r.Key)
			checkBytes(t, "value", msg.Value, tc.r.Value)
			if len(msg.Headers) != len(tc.r.Headers) {
				t.Fatalf("%d headers, want %d", len(msg.Headers), len(tc.r.Headers))
			}
			for i, h := range tc.r.Headers {
				got := msg.Headers[i]
				if !bytes.Equal(got.Key, h.Key) || !bytes.Equal(got.Value, h.Value) || (got.Value == nil) != (h.Value == nil) {
					t.Errorf("header %d = %q:%q (nil %t), want %q:%q (nil %t)", i, got.Key, got.Value, got.Value == nil, h.Key, h.Value, h.Value == nil)
				}
			}
		})
	}
}

// checkBytes checks that an encoder holds want, nil (no encoder) for nil.
func checkBytes(t *testing.T, what string, enc sarama.Encoder, want []byte) {
	t.Helper()
	if want == nil {
		if enc != nil {
			t.Errorf("%s is %v, want nil", what, enc)
		}
		return
	}
	if enc == nil {
		t.Errorf("%s is nil, want %q", what, want)
		return
	}
	got, _ := enc.Encode()
	if !bytes.Equal(got, want) || got == nil {
		t.Errorf("%s = %q, want %q", what, got, want)
	}
}

// fakeProducer answers like a Sarama SyncProducer: the messages fail
// reports in one sarama.ProducerErrors, the others acknowledged on
// partition 3 at increasing offsets. It records each SendMessages call.
type fakeProducer struct {
	sarama.SyncProducer // other methods are not called
	fail                func(*sarama.ProducerMessage) error

	mu     sync.Mutex
	sends  [][]string // the values of each call
	offset int64
	closed int
}

func (f *fakeProducer) SendMessages(msgs []*sarama.ProducerMessage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var values []string
	var errs sarama.ProducerErrors
	for _, m := range msgs {
		v, _ := m.Value.Encode()
		values = append(values, string(v))
		if err := f.fail(m); err != nil {
			errs = append(errs, &sarama.ProducerError{Msg: m, Err: err})
			continue
		}
		m.Partition, m.Offset = 3, f.offset
		f.offset++
	}
	f.sends = append(f.sends, values)
	if errs != nil {
		return errs
	}
	return nil
}

func (f *fakeProducer) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed++
	return nil
}

func rec(topic, key, value string) *record.Record {
	return &record.Record{Topic: topic, Key: []byte(key), Value: []byte(value), Partition: -1, Offset: -1}
}

func TestSyncPublisherKeepsKeyOrder(t *testing.T) {
	t.Parallel()
	f := &fakeProducer{fail: func(m *sarama.ProducerMessage) error {
		if v, _ := m.Value.Encode(); string(v) == "k2" {
			return sarama.ErrNotEnoughReplicas
		}
		return nil
	}}
	pub := record.NewSyncPublisher(f)
	records := []*record.Record{
		rec("a", "K", "k1"), rec("a", "L", "l1"), rec("a", "K", "k2"), rec("b", "K", "b1"),
		rec("a", "K", "k3"), rec("a", "L", "l2"),
	}
	errs := pub.Publish(context.Background(), records)
	if len(errs) != len(records) {
		t.Fatalf("%d errors for %d records", len(errs), len(records))
	}
	for i, r := range records {
		failed := string(r.Value) == "k2" || string(r.Value) == "k3"
		switch {
		case failed && !errors.Is(errs[i], sarama.ErrNotEnoughReplicas):
			t.Errorf("%s: %v, want the broker's error (k3 after k2 of its key failed)", r.Value, errs[i])
		case failed && r.Partition != -1:
			t.Errorf("%s failed but has partition %d", r.Value, r.Partition)
		case !failed && (errs[i] != nil || r.Partition != 3 || r.Offset < 0):
			t.Errorf("%s: %v at %d@%d, want acknowledged on partition 3", r.Value, errs[i], r.Partition, r.Offset)
		}
	}
	// The first of each topic and key together, then the second; k3 is
	// never sent once k2 of its key failed.
	want := [][]string{{"k1", "l1", "b1"}, {"k2", "l2"}}
	if !slices.EqualFunc(f.sends, want, slices.Equal) {
		t.Errorf("sends %q, want %q", f.sends, want)
	}
	if err := pub.Close(); err != nil || f.closed != 1 {
		t.Errorf("Close = %v and closed the producer %d times, want once", err, f.closed)
	}
}

func TestSyncPublisherCancelled(t *testing.T) {
	t.Parallel()
	f := &fakeProducer{fail: func(*sarama.ProducerMessage) error { return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	errs := record.NewSyncPublisher(f).Publish(ctx, []*record.Record{rec("a", "K", "1"), rec("a", "L", "2")})
	for i, err := range errs {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("record %d: %v, want context.Canceled", i, err)
		}
	}
	if len(errs) != 2 || len(f.sends) != 0 {
		t.Errorf("%d errors and sends %q, want 2 errors and nothing sent", len(errs), f.sends)
	}
}

// Sarama's mock SyncProducer fails a SendMessages with the error alone,
// not naming the message: every record of that send fails with it.
func TestSyncPublisherWithSaramaMocks(t *testing.T) {
	t.Parallel()
	cfg := mocks.NewTestConfig()
	cfg.Producer.Return.Successes = true
	p := mocks.NewSyncProducer(t, cfg)
	p.ExpectSendMessageAndSucceed()
	p.ExpectSendMessageAndFail(sarama.ErrMessageSizeTooLarge)
	pub := record.NewSyncPublisher(p)
	defer pub.Close()
	first, second := rec("a", "", "1"), &record.Record{Topic: "a", Value: []byte("2")}
	if errs := pub.Publish(context.Background(), []*record.Record{first}); len(errs) != 1 || errs[0] != nil || first.Offset < 0 || first.Partition < 0 {
		t.Errorf("Publish = %v, record at %d@%d; want acknowledged at a partition and offset", errs, first.Partition, first.Offset)
	}
	if errs := pub.Publish(context.Background(), []*record.Record{second}); len(errs) != 1 || !errors.Is(errs[0], sarama.ErrMessageSizeTooLarge) {
		t.Errorf("Publish = %v, want the producer's error", errs)
	}
}
