package record_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/record"
)

// TestSyncPublisherRoundTrip writes records through a real producer and
// reads them back as written: nil key and tombstone nil, empty ones empty,
// headers in order with duplicates and null values, at the partition and
// offset Publish reported.
func TestSyncPublisherRoundTrip(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 3)
	p, err := sarama.NewSyncProducer(k.Brokers, k.Config())
	if err != nil {
		t.Fatal(err)
	}
	pub := record.NewSyncPublisher(p)
	defer pub.Close()
	headers := []record.Header{{Key: []byte("h"), Value: []byte("1")}, {Key: []byte("n"), Value: nil}, {Key: []byte("h"), Value: []byte("2")}}
	records := []*record.Record{
		{Topic: topic, Key: []byte("k"), Value: []byte("v"), Headers: headers},
		{Topic: topic, Key: []byte("k")}, // a tombstone
		{Topic: topic, Value: []byte("no key")},
		{Topic: topic, Key: []byte{}, Value: []byte{}},
		{Topic: topic, Key: []byte("k"), Value: []byte("after the tombstone")},
	}
	for i, err := range pub.Publish(context.Background(), records) {
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
	}
	got := map[[2]int64]*sarama.ConsumerMessage{}
	for _, m := range k.ReadAll(t, topic) {
		got[[2]int64{int64(m.Partition), m.Offset}] = m
	}
	if len(got) != len(records) {
		t.Fatalf("read %d records, want %d", len(got), len(records))
	}
	for i, r := range records {
		m := got[[2]int64{int64(r.Partition), r.Offset}]
		if m == nil {
			t.Errorf("record %d: nothing at the %d@%d Publish reported", i, r.Partition, r.Offset)
			continue
		}
		if !same(m.Key, r.Key) || !same(m.Value, r.Value) || len(m.Headers) != len(r.Headers) {
			t.Errorf("record %d read back as %q=%q (nil %t/%t) with %d headers, want %q=%q (nil %t/%t) with %d",
				i, m.Key, m.Value, m.Key == nil, m.Value == nil, len(m.Headers), r.Key, r.Value, r.Key == nil, r.Value == nil, len(r.Headers))
			continue
		}
		for j, h := range r.Headers {
			if !bytes.Equal(m.Headers[j].Key, h.Key) || !same(m.Headers[j].Value, h.Value) {
				t.Errorf("record %d header %d = %q:%q, want %q:%q", i, j, m.Headers[j].Key, m.Headers[j].Value, h.Key, h.Value)
			}
		}
	}
	if a, b := records[0], records[4]; a.Partition != b.Partition || a.Offset >= b.Offset {
		t.Errorf("key k at %d@%d then %d@%d, want one partition in order", a.Partition, a.Offset, b.Partition, b.Offset)
	}
}

// same compares bytes with nil distinct from empty.
func same(a, b []byte) bool { return bytes.Equal(a, b) && (a == nil) == (b == nil) }
