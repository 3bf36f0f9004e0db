package producer

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/courierkit/courier/record"
)

// TestRecordBytesIsWhatTheRelayCounts: the size Enqueue checks is the size
// the relay counts against Producer.MaxMessageBytes for the record it
// builds in binary mode (which is Sarama's reckoning of it), with a
// ce_source of MaxSourceBytes and a ce_time of its longest, for events with
// and without a key, attributes and headers, and with the traceparent of
// the relay's span (RelayConfig.TracerProvider), which it adds when the
// event has none: when the relay adds a header, this fails until
// recordBytes counts it.
func TestRecordBytesIsWhatTheRelayCounts(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 11, 25, 23, 59, 59, 123456789, time.UTC)
	for _, e := range []Event{
		{Topic: "t", Type: "X", Payload: []byte(`{}`)},
		{Topic: "orders", Key: "o-1", Type: "OrderCreated", ContentType: "application/octet-stream", Payload: make([]byte, 1000)},
		{Topic: "t", Key: strings.Repeat("k", MaxKeyBytes), Type: strings.Repeat("T", 300), Payload: []byte(`[1]`),
			AggregateType: "Order", AggregateID: "o-1", TenantID: "tenant", CorrelationID: "corr", CausationID: "cause",
			Headers: map[string]string{"x-a": "1", "x-b": strings.Repeat("b", 500), "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}},
		{Topic: "t", Type: "X", Payload: []byte(`{}`), TenantID: "only-one", Headers: map[string]string{"h": ""}},
		// A short stored traceparent, which the relay's 55 bytes replace.
		{Topic: "t", Type: "X", Payload: []byte(`{}`), Headers: map[string]string{"traceparent": "x", "tracestate": "vendor=1"}},
	} {
		n, err := normalize(e, DefaultMaxPayloadBytes, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := claimedEvent{ID: uuid.Must(uuid.NewV7()), Topic: n.Topic, Type: n.Type, Payload: n.Payload, ContentType: n.ContentType,
			Headers: n.Headers, CreatedAt: created, traceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			traceState: n.Headers["tracestate"]}
		for _, f := range []struct {
			dst **string
			src string
		}{{&c.Key, n.Key}, {&c.AggregateType, n.AggregateType}, {&c.AggregateID, n.AggregateID}, {&c.TenantID, n.TenantID},
			{&c.CorrelationID, n.CorrelationID}, {&c.CausationID, n.CausationID}} {
			if f.src != "" {
				*f.dst = &f.src
			}
		}
		rec := c.binaryRecord(strings.Repeat("s", MaxSourceBytes))
		if got, want := recordBytes(&n), recordSize(rec)+recordBatchOverhead; got != want {
			t.Errorf("recordBytes = %d, the relay counts %d for %+v", got, want, n)
		}
		if got, want := recordSize(rec), record.Message(rec).ByteSize(2); got != want {
			t.Errorf("recordSize = %d, Sarama counts %d for %+v", got, want, n)
		}
		if len(created.Format(time.RFC3339Nano)) != maxTimeLen {
			t.Fatalf("ce_time %q is not of the longest", created.Format(time.RFC3339Nano))
		}
	}
}

// TestClipCutsLongTextForLogs: a key or topic of megabytes, written around
// Enqueue, is logged as its first clipBytes bytes, cut on a character, and
// its length; short text as it is.
func TestClipCutsLongTextForLogs(t *testing.T) {
	t.Parallel()
	if got := clip("k-1"); got != "k-1" {
		t.Errorf("clip(k-1) = %q", got)
	}
	long := "k" + strings.Repeat("é", 1<<20) // a 2-byte character across the cut
	got := clip(long)
	if want := "k" + strings.Repeat("é", (clipBytes-1)/2) + "... (2097153 bytes)"; got != want {
		t.Errorf("clip of %d bytes = %q, want %q", len(long), got, want)
	}
}
