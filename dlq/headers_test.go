package dlq_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/courierkit/courier/dlq"
)

func headerMap(t *testing.T, headers []dlq.Header) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, h := range headers {
		if _, dup := m[string(h.Key)]; dup {
			t.Errorf("header %s appears twice", h.Key)
		}
		m[string(h.Key)] = string(h.Value)
	}
	return m
}

func TestHeaders(t *testing.T) {
	t.Parallel()
	f := failure()
	f.ReplayCount = 2
	env, err := dlq.New(original(), f)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		dlq.HeaderEnvelopeVersion:   "1",
		dlq.HeaderOriginalTopic:     "payouts",
		dlq.HeaderOriginalPartition: "3",
		dlq.HeaderOriginalOffset:    "1842",
		dlq.HeaderOriginalTimestamp: "2026-01-16T09:59:58.120Z",
		dlq.HeaderError:             "psp timeout after 30s",
		dlq.HeaderErrorKind:         "retries_exhausted",
		dlq.HeaderRetryCount:        "6",
		dlq.HeaderFailedAt:          "2026-01-16T10:00:00.000Z",
		dlq.HeaderFirstFailedAt:     "2026-01-16T09:59:59.000Z",
		dlq.HeaderCorrelationID:     "tx_xyz",
		dlq.HeaderConsumerGroup:     "payouts-worker",
		dlq.HeaderReplayCount:       "2",
	}
	if got := headerMap(t, env.Headers()); !reflect.DeepEqual(got, want) {
		t.Errorf("Headers() = %q\nwant %q", got, want)
	}
	for name := range want {
		if !strings.HasPrefix(name, "dlq_") {
			t.Errorf("context header %s does not start with dlq_", name)
		}
	}

	// The relay: no partition, offset, timestamp or group; a long error.
	o := original()
	o.Partition, o.Offset, o.Timestamp = dlq.NoPartition, dlq.NoOffset, recordTime.AddDate(-2000, 0, 0)
	f = failure()
	f.ConsumerGroup, f.CorrelationID = "", ""
	f.Error = strings.Repeat("ü", dlq.MaxErrorBytes)
	env, err = dlq.New(o, f)
	if err != nil {
		t.Fatal(err)
	}
	got := headerMap(t, env.Headers())
	if got[dlq.HeaderOriginalPartition] != "-1" || got[dlq.HeaderOriginalOffset] != "-1" {
		t.Errorf("partition %q, offset %q; want -1 for a record that never reached Kafka",
			got[dlq.HeaderOriginalPartition], got[dlq.HeaderOriginalOffset])
	}
	if got[dlq.HeaderOriginalTimestamp] != "0026-01-16T09:59:58.120Z" {
		t.Errorf("timestamp %q", got[dlq.HeaderOriginalTimestamp])
	}
	for _, absent := range []string{dlq.HeaderConsumerGroup, dlq.HeaderCorrelationID} {
		if v, ok := got[absent]; ok {
			t.Errorf("header %s = %q, want it left out when empty", absent, v)
		}
	}
	if e := got[dlq.HeaderError]; len(e) > dlq.MaxHeaderValueBytes || !utf8.ValidString(e) || !strings.HasSuffix(e, "… (truncated)") {
		t.Errorf("dlq_error has %d bytes (valid UTF-8 %t), want at most %d ending in the marker", len(e), utf8.ValidString(e), dlq.MaxHeaderValueBytes)
	}
}

func TestTopic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ original, suffix, want string }{
		{"orders", dlq.DefaultSuffix, "orders.dlq"},
		{"orders", "", "orders.dlq"},
		{"orders", "-dead", "orders-dead"},
	} {
		if got := dlq.Topic(tc.original, tc.suffix); got != tc.want {
			t.Errorf("Topic(%q, %q) = %q, want %q", tc.original, tc.suffix, got, tc.want)
		}
	}
}

func TestRecordModes(t *testing.T) {
	t.Parallel()
	o := original()
	o.Key = []byte{0xff, 'k'}
	o.Value = []byte{0x0a, 0x03, 'p', '-', '1'} // a schema-registry payload, not JSON
	o.Headers = []dlq.Header{
		h("ce_id", "id-1"),
		{Key: []byte("bin"), Value: []byte{0xff}},
		h("ce_id", "id-1-again"),
		{Key: []byte("null"), Value: nil},
		h("DLQ_error", "context of an earlier dead letter"),
	}
	env, err := dlq.New(o, failure())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("envelope", func(t *testing.T) {
		t.Parallel()
		rec, err := env.Record()
		if err != nil {
			t.Fatal(err)
		}
		if !sameBytes(rec.Key, o.Key) {
			t.Errorf("key %q, want the original %q", rec.Key, o.Key)
		}
		headers := headerMap(t, rec.Headers)
		if headers[dlq.HeaderFormat] != dlq.FormatEnvelope || len(headers) != len(env.Headers())+1 {
			t.Errorf("headers %q, want Headers() and dlq_format=envelope", headers)
		}
		back, err := dlq.Read(rec.Key, rec.Value, rec.Headers)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, env) {
			t.Errorf("Read = %#v\nwant %#v", back, env)
		}
		// A record without dlq_format (another writer) is envelope mode too.
		if _, err := dlq.Read(rec.Key, rec.Value, nil); err != nil {
			t.Errorf("Read without dlq_format: %v", err)
		}
		restored, err := back.Original()
		if err != nil {
			t.Fatal(err)
		}
		checkSameOriginal(t, restored, o) // in the envelope even dlq_* originals survive
	})

	t.Run("raw", func(t *testing.T) {
		t.Parallel()
		rec, err := env.RawRecord()
		if err != nil {
			t.Fatal(err)
		}
		if !sameBytes(rec.Key, o.Key) || !sameBytes(rec.Value, o.Value) {
			t.Errorf("raw record %q=%q, want the original key and value untouched", rec.Key, rec.Value)
		}
		wantOriginal := o
		wantOriginal.Headers = o.Headers[:4] // dlq_* originals are replaced by the new context
		n := len(wantOriginal.Headers)
		if len(rec.Headers) != n+len(env.Headers())+1 {
			t.Fatalf("raw record has %d headers, want %d originals, the context and dlq_format", len(rec.Headers), n)
		}
		if got := rec.Headers[len(rec.Headers)-1]; string(got.Key) != dlq.HeaderFormat || string(got.Value) != dlq.FormatRaw {
			t.Errorf("last header %s=%s, want dlq_format=raw", got.Key, got.Value)
		}
		back, err := dlq.Read(rec.Key, rec.Value, rec.Headers)
		if err != nil {
			t.Fatal(err)
		}
		restored, err := back.Original()
		if err != nil {
			t.Fatal(err)
		}
		checkSameOriginal(t, restored, wantOriginal)
		want, err := dlq.New(wantOriginal, failure())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, want) {
			t.Errorf("Read = %#v\nwant %#v", back, want)
		}
		if _, err := dlq.FromRaw(rec.Key, rec.Value, rec.Headers); err != nil {
			t.Errorf("FromRaw: %v", err)
		}
	})
}

func TestFromRawRejects(t *testing.T) {
	t.Parallel()
	env, err := dlq.New(original(), failure())
	if err != nil {
		t.Fatal(err)
	}
	rec, err := env.RawRecord()
	if err != nil {
		t.Fatal(err)
	}
	without := func(name string) []dlq.Header {
		var out []dlq.Header
		for _, h := range rec.Headers {
			if string(h.Key) != name {
				out = append(out, h)
			}
		}
		return out
	}
	with := func(name, value string) []dlq.Header { return append(without(name), h(name, value)) }
	for _, tc := range []struct {
		name    string
		headers []dlq.Header
		want    error
		field   string
	}{
		{"no context at all", original().Headers, dlq.ErrCorruptEnvelope, dlq.HeaderEnvelopeVersion},
		{"no version", without(dlq.HeaderEnvelopeVersion), dlq.ErrCorruptEnvelope, dlq.HeaderEnvelopeVersion},
		{"version 2", with(dlq.HeaderEnvelopeVersion, "2"), dlq.ErrUnsupportedVersion, dlq.HeaderEnvelopeVersion},
		{"envelope format", with(dlq.HeaderFormat, dlq.FormatEnvelope), dlq.ErrInvalidEnvelope, dlq.HeaderFormat},
		{"no topic", without(dlq.HeaderOriginalTopic), dlq.ErrInvalidEnvelope, dlq.HeaderOriginalTopic},
		{"no partition", without(dlq.HeaderOriginalPartition), dlq.ErrInvalidEnvelope, dlq.HeaderOriginalPartition},
		{"empty partition", with(dlq.HeaderOriginalPartition, ""), dlq.ErrInvalidEnvelope, dlq.HeaderOriginalPartition},
		{"offset not a number", with(dlq.HeaderOriginalOffset, "12a"), dlq.ErrInvalidEnvelope, dlq.HeaderOriginalOffset},
		{"retry count not a number", with(dlq.HeaderRetryCount, "six"), dlq.ErrInvalidEnvelope, dlq.HeaderRetryCount},
		{"no failed_at", without(dlq.HeaderFailedAt), dlq.ErrInvalidEnvelope, dlq.HeaderFailedAt},
		{"bad failed_at", with(dlq.HeaderFailedAt, "now"), dlq.ErrInvalidEnvelope, dlq.HeaderFailedAt},
		{"no kind", without(dlq.HeaderErrorKind), dlq.ErrInvalidEnvelope, dlq.HeaderErrorKind},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := dlq.FromRaw(rec.Key, rec.Value, tc.headers)
			if !errors.Is(err, tc.want) {
				t.Fatalf("FromRaw = %v, want %v", err, tc.want)
			}
			if envErr, ok := errors.AsType[*dlq.EnvelopeError](err); !ok || envErr.Field != tc.field {
				t.Fatalf("error %v: want field %q", err, tc.field)
			}
		})
	}
	if _, err := dlq.Read(rec.Key, rec.Value, with(dlq.HeaderFormat, "avro-v9")); !errors.Is(err, dlq.ErrUnsupportedVersion) {
		t.Errorf("Read of an unknown dlq_format = %v, want ErrUnsupportedVersion", err)
	}
}
