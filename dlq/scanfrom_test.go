package dlq_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
)

// scanFromFixture is a dead-letter topic of two partitions, a producer
// and a client.
type scanFromFixture struct {
	k        *testkit.Kafka
	topic    string
	producer sarama.SyncProducer
	client   sarama.Client
}

func newScanFromFixture(t *testing.T) *scanFromFixture {
	t.Helper()
	k := testkit.NewKafka(t)
	f := &scanFromFixture{k: k, topic: k.Topic(t, 2) + dlq.DefaultSuffix, producer: k.Producer(t)}
	k.CreateTopic(t, f.topic, 2)
	client, err := sarama.NewClient(k.Brokers, k.Config())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	f.client = client
	return f
}

// write produces a dead letter whose error is text to partition p.
func (f *scanFromFixture) write(t *testing.T, p int32, text string) {
	t.Helper()
	env, err := dlq.New(dlq.Original{Topic: "orders", Partition: 0, Offset: 1, Value: []byte(`{}`)},
		dlq.Failure{Error: text, Kind: dlq.KindPermanent})
	if err != nil {
		t.Fatal(err)
	}
	rec, err := env.Record()
	if err != nil {
		t.Fatal(err)
	}
	msg := &sarama.ProducerMessage{Topic: f.topic, Partition: p, Value: sarama.ByteEncoder(rec.Value)}
	for _, h := range rec.Headers {
		msg.Headers = append(msg.Headers, sarama.RecordHeader(h))
	}
	if _, _, err := f.producer.SendMessage(msg); err != nil {
		t.Fatal(err)
	}
}

// scan calls ScanFrom and returns the errors of the entries it read,
// sorted, after checking that each partition's came in offset order.
func (f *scanFromFixture) scan(t *testing.T, ctx context.Context, from map[int32]int64) ([]string, []dlq.Extent, error) {
	t.Helper()
	var texts []string
	next := map[int32]int64{}
	extents, err := dlq.ScanFrom(ctx, f.client, f.topic, from, func(e dlq.Entry) error {
		if e.Err != nil {
			t.Errorf("entry %d/%d: %v", e.Partition, e.Offset, e.Err)
		}
		if e.Offset < next[e.Partition] {
			t.Errorf("offset %d of partition %d came after %d", e.Offset, e.Partition, next[e.Partition]-1)
		}
		next[e.Partition] = e.Offset + 1
		texts = append(texts, e.Envelope.Error)
		return nil
	})
	slices.Sort(texts)
	return texts, extents, err
}

func TestScanFromReadsWhatWasAppendedSinceTheLastEnds(t *testing.T) {
	t.Parallel()
	f := newScanFromFixture(t)
	f.write(t, 0, "a")
	f.write(t, 0, "b")
	f.write(t, 1, "c")

	texts, extents, err := f.scan(t, context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []dlq.Extent{{Partition: 0, Oldest: 0, From: 0, End: 2}, {Partition: 1, Oldest: 0, From: 0, End: 1}}
	if !slices.Equal(texts, []string{"a", "b", "c"}) || !slices.Equal(extents, want) {
		t.Fatalf("first read: %q %+v, want [a b c] %+v", texts, extents, want)
	}

	f.write(t, 0, "d")
	texts, extents, err = f.scan(t, context.Background(), map[int32]int64{0: 2, 1: 1})
	if err != nil {
		t.Fatal(err)
	}
	want = []dlq.Extent{{Partition: 0, Oldest: 0, From: 2, End: 3}, {Partition: 1, Oldest: 0, From: 1, End: 1}}
	if !slices.Equal(texts, []string{"d"}) || !slices.Equal(extents, want) {
		t.Fatalf("second read: %q %+v, want [d] %+v", texts, extents, want)
	}
}

func TestScanFromStartsOverWhereItsOffsetIsGoneOrPastTheEnd(t *testing.T) {
	t.Parallel()
	f := newScanFromFixture(t)
	for _, text := range []string{"a", "b", "c"} {
		f.write(t, 0, text)
	}
	f.write(t, 1, "x")
	admin, err := sarama.NewClusterAdminFromClient(f.client)
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteRecords(f.topic, map[int32]int64{0: 2}); err != nil {
		t.Fatal(err)
	}

	// Partition 0 from offset 1, which retention deleted; partition 1 from
	// offset 7, past its end of 1.
	texts, extents, err := f.scan(t, context.Background(), map[int32]int64{0: 1, 1: 7})
	if err != nil {
		t.Fatal(err)
	}
	want := []dlq.Extent{{Partition: 0, Oldest: 2, From: 2, End: 3}, {Partition: 1, Oldest: 0, From: 0, End: 1}}
	if !slices.Equal(texts, []string{"c", "x"}) || !slices.Equal(extents, want) {
		t.Fatalf("read %q %+v, want [c x] %+v", texts, extents, want)
	}
}

func TestScanFromReturnsWhatItReadBeforeAnError(t *testing.T) {
	t.Parallel()
	f := newScanFromFixture(t)
	f.write(t, 0, "a")
	f.write(t, 0, "b")
	f.write(t, 1, "c")

	// fn stops at "b": the extent of partition 0 ends after "a", that of
	// partition 1 after what fn took of it, if anything.
	stop := errors.New("stop")
	took := map[int32]int64{}
	extents, err := dlq.ScanFrom(context.Background(), f.client, f.topic, nil, func(e dlq.Entry) error {
		if e.Envelope.Error == "b" {
			return stop
		}
		took[e.Partition] = e.Offset + 1
		return nil
	})
	want := []dlq.Extent{{Partition: 0, Oldest: 0, From: 0, End: 1}, {Partition: 1, Oldest: 0, From: 0, End: took[1]}}
	if !errors.Is(err, stop) || !slices.Equal(extents, want) || took[0] != 1 {
		t.Fatalf("ScanFrom stopped by fn: %+v, %v; want %+v, stop", extents, err, want)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := dlq.ScanFrom(ctx, f.client, f.topic, nil, func(dlq.Entry) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("ScanFrom with an ended context: %v, want context.Canceled", err)
	}
	if _, err := dlq.ScanFrom(context.Background(), f.client, "no.such.topic.dlq", nil, func(dlq.Entry) error { return nil }); !errors.Is(err, dlq.ErrNoTopic) {
		t.Errorf("ScanFrom of a missing topic: %v, want ErrNoTopic", err)
	}
}
