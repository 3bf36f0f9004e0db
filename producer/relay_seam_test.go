package producer_test

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// TestRelayPublishesCourierRecordsThroughItsPublisher: a record.Publisher
// given as RelayConfig.Publisher receives courier's records (topic, key,
// payload as value, the ce_* headers and the event's own headers, in the
// relay's order), and the dead letter the relay writes in the same batch is
// exactly the record dlq.Writer.Record renders, with the relay's
// DeadLetterSuffix, for the envelope it holds.
func TestRelayPublishesCourierRecordsThroughItsPublisher(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	pub := &fakePublisher{}
	relay := newRelay(t, pg, nil, producer.RelayConfig{
		Publisher: pub, Source: "billing", PublishDeadLetters: true, DeadLetterSuffix: ".dead", MaxAttempts: 1,
	})
	ev := orderCreated("o-1")
	ev.CorrelationID, ev.TenantID = "corr-1", "tenant-1"
	ev.Headers = map[string]string{"x-b": "2", "x-a": "1"}
	ok := enqueue(t, pg, out, ev)
	poison := enqueue(t, pg, out, orderCreated("o-2"))
	pub.setFail(failID(poison, sarama.ErrInvalidMessage))

	if res := runOnce(t, relay); res.Published != 1 || res.DeadLettered != 1 {
		t.Fatalf("batch %+v, want one published and one dead-lettered", res)
	}

	published := pub.ackedOn("orders")
	if len(published) != 1 {
		t.Fatalf("%d records on orders, want 1", len(published))
	}
	got := published[0]
	if got.Topic != "orders" || string(got.Key) != "o-1" || !bytes.Equal(got.Value, ev.Payload) {
		t.Fatalf("record topic %q key %q value %q, want orders, o-1, %s", got.Topic, got.Key, got.Value, ev.Payload)
	}
	var names []string
	for _, h := range got.Headers {
		names = append(names, string(h.Key))
	}
	wantNames := []string{producer.HeaderSpecVersion, producer.HeaderID, producer.HeaderType, producer.HeaderSource,
		producer.HeaderTime, producer.HeaderContentType, producer.HeaderCorrelationID, producer.HeaderTenantID, "x-a", "x-b"}
	if !slices.Equal(names, wantNames) {
		t.Fatalf("headers %v, want %v", names, wantNames)
	}
	for name, want := range map[string]string{
		producer.HeaderSpecVersion: "1.0", producer.HeaderID: ok.String(), producer.HeaderType: "OrderCreated",
		producer.HeaderSource: "billing", producer.HeaderContentType: "application/json",
		producer.HeaderCorrelationID: "corr-1", producer.HeaderTenantID: "tenant-1", "x-a": "1", "x-b": "2",
	} {
		if v := recordHeader(got, name); v != want {
			t.Errorf("header %s = %q, want %q", name, v, want)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, recordHeader(got, producer.HeaderTime)); err != nil {
		t.Errorf("ce_time: %v", err)
	}

	letters := pub.ackedOn("orders.dead")
	if len(letters) != 1 {
		t.Fatalf("%d records on orders.dead, want 1", len(letters))
	}
	letter := letters[0]
	env, err := dlq.Read(letter.Key, letter.Value, letter.Headers)
	if err != nil {
		t.Fatalf("the dead letter is not one dlq reads: %v", err)
	}
	original, err := env.Original()
	if err != nil {
		t.Fatal(err)
	}
	if env.OriginalTopic != "orders" || string(original.Key) != "o-2" || recordHeaderOf(original.Headers, producer.HeaderID) != poison.String() {
		t.Fatalf("the envelope holds %+v, want the poison event %s", original, poison)
	}
	w, err := dlq.NewWriter(&fakePublisher{}, dlq.WriterConfig{Suffix: ".dead"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := w.Record(env, dlq.FormatEnvelope)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(letter, want) {
		t.Fatalf("the relay wrote the dead letter\n%s\nwant dlq.Writer's record\n%s", show(letter), show(want))
	}
}

// recordHeaderOf is the value of the first header called name.
func recordHeaderOf(headers []record.Header, name string) string {
	return recordHeader(&record.Record{Headers: headers}, name)
}

// show renders r for a failure message.
func show(r *record.Record) string {
	return fmt.Sprintf("topic %s partition %d offset %d key %q headers %q value %s", r.Topic, r.Partition, r.Offset, r.Key, r.Headers, r.Value)
}
