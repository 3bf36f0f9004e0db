package dlq_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/courierkit/courier/dlq"
)

// A consumer gives up on a record: wrap it in an envelope, produce the
// envelope-mode record to the dead-letter topic, and later read it back and
// restore the original bytes for replay.
func Example() {
	// The record as Sarama delivered it (convert msg.Headers with
	// dlq.Header{Key: h.Key, Value: h.Value}).
	failed := dlq.Original{
		Topic:     "payouts",
		Partition: 3,
		Offset:    1842,
		Timestamp: time.Date(2026, 1, 16, 9, 59, 58, 120_000_000, time.UTC),
		Key:       []byte("tx_xyz"),
		Value:     []byte(`{"payout_id":"p-1","amount_cents":1999}`),
		Headers:   []dlq.Header{{Key: []byte("ce_id"), Value: []byte("0195f3c4")}},
	}
	env, err := dlq.New(failed, dlq.Failure{
		Error:         "psp timeout after 30s",
		Kind:          dlq.KindRetriesExhausted,
		Attempts:      6,
		FailedAt:      time.Date(2026, 1, 16, 10, 0, 0, 0, time.UTC),
		ConsumerGroup: "payouts",
	})
	if err != nil {
		log.Fatal(err)
	}
	rec, err := env.Record()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("topic:", dlq.Topic(failed.Topic, dlq.DefaultSuffix))
	fmt.Println("value:", string(rec.Value))

	// The replayer reads the dead letter and restores the original record.
	back, err := dlq.Read(rec.Key, rec.Value, rec.Headers)
	if err != nil {
		log.Fatal(err)
	}
	orig, err := back.Original()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("replay to %s: key %s, value %s, header %s=%s\n",
		orig.Topic, orig.Key, orig.Value, orig.Headers[0].Key, orig.Headers[0].Value)
	// Output:
	// topic: payouts.dlq
	// value: {"envelope_version":1,"original_topic":"payouts","original_partition":3,"original_offset":1842,"original_timestamp":"2026-01-16T09:59:58.120Z","original_key":"tx_xyz","original_headers":{"ce_id":"0195f3c4"},"original_header_list":[{"key":"ce_id","value":"0195f3c4"}],"original_message":{"payout_id":"p-1","amount_cents":1999},"original_message_base64":null,"error":"psp timeout after 30s","error_kind":"retries_exhausted","retry_count":6,"failed_at":"2026-01-16T10:00:00.000Z","first_failed_at":"2026-01-16T10:00:00.000Z","correlation_id":"","consumer_group":"payouts","replay_count":0}
	// replay to payouts: key tx_xyz, value {"payout_id":"p-1","amount_cents":1999}, header ce_id=0195f3c4
}

// A value that is not JSON, or JSON that would not come back byte for byte,
// is kept in base64; OriginalValue gives the exact bytes back, and tells a
// tombstone (nil) from an empty value.
func ExampleEnvelope_OriginalValue() {
	for _, c := range []struct {
		name  string
		value []byte
	}{
		{"compact JSON", []byte(`{"a":1}`)},
		{"spaced JSON", []byte(`{"a": 1}`)},
		{"binary", []byte{0x0a, 0x01, 0xff}},
		{"empty", []byte{}},
		{"tombstone", nil},
	} {
		env, err := dlq.New(dlq.Original{Topic: "orders", Partition: 0, Offset: 7, Value: c.value},
			dlq.Failure{Error: "bad payload", Kind: dlq.KindPermanent, FailedAt: time.Unix(0, 0)})
		if err != nil {
			log.Fatal(err)
		}
		data, err := dlq.Encode(env)
		if err != nil {
			log.Fatal(err)
		}
		back, err := dlq.Decode(data)
		if err != nil {
			log.Fatal(err)
		}
		restored, err := back.OriginalValue()
		if err != nil {
			log.Fatal(err)
		}
		message, b64 := "null", "null"
		if back.OriginalMessage != nil {
			message = string(back.OriginalMessage)
		}
		if back.OriginalMessageBase64 != nil {
			b64 = fmt.Sprintf("%q", *back.OriginalMessageBase64)
		}
		fmt.Printf("%s: original_message %s, original_message_base64 %s, restored %q, nil %t\n",
			c.name, message, b64, restored, restored == nil)
	}
	// Output:
	// compact JSON: original_message {"a":1}, original_message_base64 null, restored "{\"a\":1}", nil false
	// spaced JSON: original_message null, original_message_base64 "eyJhIjogMX0=", restored "{\"a\": 1}", nil false
	// binary: original_message null, original_message_base64 "CgH/", restored "\n\x01\xff", nil false
	// empty: original_message null, original_message_base64 "", restored "", nil false
	// tombstone: original_message null, original_message_base64 null, restored "", nil true
}

// Trace a replay: each record written back is a "send <topic>" span, a
// child of the span of Replay's context (the job's) and linked to the dead
// letter's span (here the original's: this dead letter's record names
// none), whose trace holds the attempts that failed; the record
// carries the replay span's traceparent, so its next attempts are the
// replay's children. Pass the provider of your OpenTelemetry setup; this
// one keeps the spans in memory to print them.
func ExampleReplayConfig_tracerProvider() {
	broker, err := kfake.NewCluster(kfake.SeedTopics(1, "payouts", "payouts.dlq"))
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()
	deadLetter(broker.ListenAddrs(), "p-1", "psp timeout after 30s")

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	ctx, job := tp.Tracer("replay-job").Start(context.Background(), "nightly replay")
	_, err = dlq.Replay(ctx, dlq.ReplayConfig{
		Brokers:        broker.ListenAddrs(),
		Topic:          "payouts.dlq",
		TracerProvider: tp,
	})
	if err != nil {
		log.Fatal(err)
	}
	job.End()
	replay := spans.GetSpans()[0]
	fmt.Printf("%s (%s), a child of the job's span: %t\n", replay.Name, replay.SpanKind, replay.Parent.SpanID() == job.SpanContext().SpanID())
	for _, l := range replay.Links {
		fmt.Println("linked to", l.SpanContext.TraceID(), l.SpanContext.SpanID())
	}
	// Output:
	// send payouts (producer), a child of the job's span: true
	// linked to 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7
}
