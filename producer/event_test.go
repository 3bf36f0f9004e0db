package producer_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/courierkit/courier/producer"
)

// TestInvalidEventsAreRefusedAndNothingIsWritten checks every validation
// error: the sentinel matches, the error names the field, and the outbox
// stays empty even when the bad event sits in the middle of a batch.
func TestInvalidEventsAreRefusedAndNothingIsWritten(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	small, err := producer.NewOutbox(producer.Config{Schema: pg.Schema, MaxPayloadBytes: 2048})
	if err != nil {
		t.Fatal(err)
	}
	ok := orderCreated("o-1")
	with := func(change func(*producer.Event)) producer.Event {
		ev := orderCreated("o-bad")
		change(&ev)
		return ev
	}
	for _, tc := range []struct {
		name   string
		outbox *producer.Outbox
		event  producer.Event
		want   error
		field  string
	}{
		{"empty topic", out, with(func(e *producer.Event) { e.Topic = "" }), producer.ErrEmptyTopic, "Topic"},
		{"slash in topic", out, with(func(e *producer.Event) { e.Topic = "orders/eu" }), producer.ErrInvalidTopic, "Topic"},
		{"space in topic", out, with(func(e *producer.Event) { e.Topic = "orders eu" }), producer.ErrInvalidTopic, "Topic"},
		{"non-ASCII topic", out, with(func(e *producer.Event) { e.Topic = "bestellungen-größe" }), producer.ErrInvalidTopic, "Topic"},
		{"dot topic", out, with(func(e *producer.Event) { e.Topic = "." }), producer.ErrInvalidTopic, "Topic"},
		{"dot-dot topic", out, with(func(e *producer.Event) { e.Topic = ".." }), producer.ErrInvalidTopic, "Topic"},
		{"topic of 250 chars", out, with(func(e *producer.Event) { e.Topic = strings.Repeat("t", 250) }), producer.ErrInvalidTopic, "Topic"},
		{"missing type", out, with(func(e *producer.Event) { e.Type = "" }), producer.ErrMissingType, "Type"},
		{"payload over 1 MiB", out, with(func(e *producer.Event) {
			e.ContentType = "application/octet-stream"
			e.Payload = make([]byte, producer.DefaultMaxPayloadBytes+1)
		}), producer.ErrPayloadTooLarge, "Payload"},
		{"payload over a configured maximum", small, with(func(e *producer.Event) { e.Payload = []byte(`"` + strings.Repeat("0", 2047) + `"`) }), producer.ErrPayloadTooLarge, "Payload"},
		{"record over a configured maximum", small, with(func(e *producer.Event) { e.Payload = []byte(`"` + strings.Repeat("0", 1800) + `"`) }), producer.ErrRecordTooLarge, "Payload"},
		{"broken JSON", out, with(func(e *producer.Event) { e.Payload = []byte(`{"order_id":`) }), producer.ErrInvalidJSON, "Payload"},
		{"empty JSON", out, with(func(e *producer.Event) { e.Payload = nil }), producer.ErrInvalidJSON, "Payload"},
		{"broken JSON with charset", out, with(func(e *producer.Event) {
			e.ContentType = "application/json; charset=utf-8"
			e.Payload = []byte("not json")
		}), producer.ErrInvalidJSON, "Payload"},
		{"broken +json", out, with(func(e *producer.Event) {
			e.ContentType = "application/cloudevents+json"
			e.Payload = []byte("{")
		}), producer.ErrInvalidJSON, "Payload"},
		{"unparsable content type", out, with(func(e *producer.Event) { e.ContentType = "json;;" }), producer.ErrInvalidContentType, "ContentType"},
		{"ce_id header", out, with(func(e *producer.Event) { e.Headers = map[string]string{"ce_id": "x"} }), producer.ErrReservedHeader, "Headers[ce_id]"},
		{"CE_TYPE header", out, with(func(e *producer.Event) { e.Headers = map[string]string{"CE_TYPE": "x"} }), producer.ErrReservedHeader, "Headers[CE_TYPE]"},
		{"ce_ extension header", out, with(func(e *producer.Event) { e.Headers = map[string]string{"ce_myext": "x"} }), producer.ErrReservedHeader, "Headers[ce_myext]"},
		{"content-type header", out, with(func(e *producer.Event) { e.Headers = map[string]string{"Content-Type": "text/plain"} }), producer.ErrReservedHeader, "Headers[Content-Type]"},
		{"retry header", out, with(func(e *producer.Event) { e.Headers = map[string]string{"retry_not_before": "0"} }), producer.ErrReservedHeader, "Headers[retry_not_before]"},
		{"dlq header", out, with(func(e *producer.Event) { e.Headers = map[string]string{"dlq_error": "x"} }), producer.ErrReservedHeader, "Headers[dlq_error]"},
		{"empty header name", out, with(func(e *producer.Event) { e.Headers = map[string]string{"": "x"} }), producer.ErrInvalidHeader, "Headers[]"},
		{"header value not UTF-8", out, with(func(e *producer.Event) { e.Headers = map[string]string{"x-bin": "\xff\xfe"} }), producer.ErrInvalidHeader, "Headers[x-bin]"},
		{"NUL in key", out, with(func(e *producer.Event) { e.Key = "a\x00b" }), producer.ErrInvalidText, "Key"},
		{"invalid UTF-8 tenant", out, with(func(e *producer.Event) { e.TenantID = "\xc3\x28" }), producer.ErrInvalidText, "TenantID"},
		{"negative max retries", out, with(func(e *producer.Event) { e.MaxAttempts = -1 }), producer.ErrInvalidMaxAttempts, "MaxAttempts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.outbox.EnqueueBatch(context.Background(), pg.Pool, []producer.Event{ok, ok, tc.event, ok})
			if !errors.Is(err, tc.want) {
				t.Fatalf("EnqueueBatch = %v, want %v", err, tc.want)
			}
			evErr, isEventErr := errors.AsType[*producer.EventError](err)
			if !isEventErr || evErr.Index != 2 || evErr.Field != tc.field {
				t.Fatalf("error %v: want an *EventError for event 2, field %s", err, tc.field)
			}
			if n := countRows(t, pg.Pool, "true"); n != 0 {
				t.Fatalf("%d rows written, want none", n)
			}
		})
	}
}

func TestValidEdgeCasesAreAccepted(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	for name, ev := range map[string]producer.Event{
		// 1 MiB itself is refused: the record the relay publishes would not
		// fit Kafka's default limit (TestLargestAcceptedEventPublishes).
		"payload of 1 MiB less room for the relay's headers": {Topic: "blobs", Type: "Blob", ContentType: "application/octet-stream",
			Payload: bytes.Repeat([]byte{1}, producer.DefaultMaxPayloadBytes-1024)},
		"binary payload":          {Topic: "blobs", Type: "Blob", ContentType: "application/octet-stream", Payload: []byte{0, 1, 2}},
		"empty non-JSON payload":  {Topic: "blobs", Type: "Blob", ContentType: "text/plain"},
		"JSON scalar":             {Topic: "counters", Type: "Count", Payload: []byte("42")},
		"topic of 249 chars":      {Topic: strings.Repeat("t", 249), Type: "T", Payload: []byte("{}")},
		"all allowed topic runes": {Topic: "Orders.v1_EU-west", Type: "T", Payload: []byte("{}")},
		"problem+json":            {Topic: "errors", Type: "Problem", ContentType: "application/problem+json", Payload: []byte(`{"title":"x"}`)},
		"headers near reserved names": {Topic: "orders", Type: "T", Payload: []byte("{}"),
			Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-ce_id": "ok", "retries": "ok"}},
	} {
		if _, err := out.Enqueue(context.Background(), pg.Pool, ev); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestEnqueueWithoutDatabaseHandle(t *testing.T) {
	out, err := producer.NewOutbox(producer.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := out.Enqueue(context.Background(), nil, orderCreated("o-1")); err == nil || !strings.Contains(err.Error(), "needs a database handle") {
		t.Fatalf("Enqueue(nil db) = %v, want a clear error", err)
	}
	res, err := out.EnqueueBatch(context.Background(), nil, nil)
	if err == nil || res != nil {
		t.Fatalf("EnqueueBatch(nil db, no events) = %v, %v; want the same error", res, err)
	}
}
