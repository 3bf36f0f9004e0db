package dlq_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/courierkit/courier/dlq"
)

// sampleEnvelope is the sample envelope of ARCHITECTURE.md, "Wire contracts",
// verbatim (TestArchitectureShowsTheSampleEnvelope keeps the two equal): the
// smallest envelope a reader accepts, without original_header_list.
const sampleEnvelope = `{
  "envelope_version": 1,
  "original_topic": "aegis.transactions",
  "original_partition": 3,
  "original_offset": 1842,
  "original_timestamp": "2026-01-16T09:59:58.120Z",
  "original_key": "tx_xyz",
  "original_headers": {"ce_id": "…"},
  "original_message": {"…": "…"},
  "original_message_base64": null,
  "error": "psp timeout after 30s",
  "error_kind": "retries_exhausted",
  "retry_count": 6,
  "failed_at": "2026-01-16T10:00:00Z",
  "first_failed_at": "2026-01-16T09:59:59Z",
  "correlation_id": "tx_xyz",
  "consumer_group": "payouts",
  "replay_count": 0
}`

var (
	failedAt      = time.Date(2026, 1, 16, 10, 0, 0, 0, time.UTC)
	firstFailedAt = time.Date(2026, 1, 16, 9, 59, 59, 0, time.UTC)
	recordTime    = time.Date(2026, 1, 16, 9, 59, 58, 120_000_000, time.UTC)
)

func original() dlq.Original {
	return dlq.Original{
		Topic:     "payouts",
		Partition: 3,
		Offset:    1842,
		Timestamp: recordTime,
		Key:       []byte("tx_xyz"),
		Value:     []byte(`{"payout_id":"p-1","amount_cents":1999}`),
		Headers:   []dlq.Header{h("ce_id", "0195f3c4-7d1e-7c3a-9c55-0a1b2c3d4e5f"), h("ce_type", "PayoutRequested")},
	}
}

func failure() dlq.Failure {
	return dlq.Failure{
		Error:         "psp timeout after 30s",
		Kind:          dlq.KindRetriesExhausted,
		Attempts:      6,
		FailedAt:      failedAt,
		FirstFailedAt: firstFailedAt,
		CorrelationID: "tx_xyz",
		ConsumerGroup: "payouts-worker",
	}
}

func h(key, value string) dlq.Header { return dlq.Header{Key: []byte(key), Value: []byte(value)} }

// sameBytes is bytes.Equal that also tells nil from empty.
func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) && (a == nil) == (b == nil) }

func checkSameOriginal(t *testing.T, got, want dlq.Original) {
	t.Helper()
	if got.Topic != want.Topic || got.Partition != want.Partition || got.Offset != want.Offset || !got.Timestamp.Equal(want.Timestamp) {
		t.Errorf("restored %s/%d/%d@%s, want %s/%d/%d@%s", got.Topic, got.Partition, got.Offset, got.Timestamp,
			want.Topic, want.Partition, want.Offset, want.Timestamp)
	}
	if !sameBytes(got.Key, want.Key) {
		t.Errorf("restored key %q (nil %t), want %q (nil %t)", got.Key, got.Key == nil, want.Key, want.Key == nil)
	}
	if !sameBytes(got.Value, want.Value) {
		t.Errorf("restored value %q (nil %t), want %q (nil %t)", got.Value, got.Value == nil, want.Value, want.Value == nil)
	}
	if len(got.Headers) != len(want.Headers) {
		t.Fatalf("restored %d headers %q, want %d %q", len(got.Headers), got.Headers, len(want.Headers), want.Headers)
	}
	for i := range want.Headers {
		if !sameBytes(got.Headers[i].Key, want.Headers[i].Key) || !sameBytes(got.Headers[i].Value, want.Headers[i].Value) {
			t.Errorf("restored header %d = %q: %q (nil %t), want %q: %q (nil %t)", i,
				got.Headers[i].Key, got.Headers[i].Value, got.Headers[i].Value == nil,
				want.Headers[i].Key, want.Headers[i].Value, want.Headers[i].Value == nil)
		}
	}
}

// roundTrip runs o through New, Encode, Decode and Original, checks the
// bytes come back and returns the JSON as a generic map.
func roundTrip(t *testing.T, o dlq.Original) (dlq.Envelope, map[string]any) {
	t.Helper()
	env, err := dlq.New(o, failure())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	data, err := dlq.Encode(env)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	decoded, err := dlq.Decode(data)
	if err != nil {
		t.Fatalf("Decode(%s): %v", data, err)
	}
	if !reflect.DeepEqual(decoded, env) {
		t.Errorf("Decode(Encode(env)) differs:\n got %#v\nwant %#v", decoded, env)
	}
	restored, err := decoded.Original()
	if err != nil {
		t.Fatalf("Original: %v", err)
	}
	checkSameOriginal(t, restored, o)
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		t.Fatalf("envelope is not JSON: %v\n%s", err, data)
	}
	return decoded, fields
}

func TestRoundTripValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		value  []byte
		asJSON bool // original_message, else original_message_base64
	}{
		{"JSON object", []byte(`{"payout_id":"p-1","amount_cents":1999,"tags":["a","b"],"n":1.50}`), true},
		{"JSON string", []byte(`"just a string"`), true},
		{"JSON number", []byte(`42`), true},
		{"JSON with HTML characters and U+2028", []byte("{\"url\":\"https://psp.example/?a=1&b=<2>\",\"sep\":\"\u2028\",\"e\":\"\\u00e9\"}"), true},
		{"JSON with spaces is not canonical", []byte(`{"payout_id": "p-1", "amount_cents": 1999}`), false},
		{"JSON with a trailing newline", []byte("{\"a\":1}\n"), false},
		{"JSON null literal", []byte(`null`), false},
		{"JSON with invalid UTF-8 in a string", []byte("{\"a\":\"\xff\"}"), false},
		{"plain text", []byte("hello, world"), false},
		{"binary", []byte{0x00, 0xff, 0xfe, 0x01, 0x80}, false},
		{"protobuf-like", []byte{0x0a, 0x03, 'p', '-', '1', 0x10, 0xcf, 0x0f}, false},
		{"empty value", []byte{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := original()
			o.Value = tc.value
			env, fields := roundTrip(t, o)
			gotJSON := fields["original_message"] != nil
			gotB64 := fields["original_message_base64"] != nil
			if gotJSON != tc.asJSON || gotB64 == tc.asJSON {
				t.Errorf("original_message set %t, original_message_base64 set %t; want the value in original_message: %t",
					gotJSON, gotB64, tc.asJSON)
			}
			if tc.asJSON && !bytes.Equal(env.OriginalMessage, tc.value) {
				t.Errorf("OriginalMessage = %s, want %s", env.OriginalMessage, tc.value)
			}
		})
	}
}

func TestNilValueIsATombstoneDistinctFromEmpty(t *testing.T) {
	t.Parallel()
	o := original()
	o.Value = nil
	env, fields := roundTrip(t, o)
	if fields["original_message"] != nil || fields["original_message_base64"] != nil {
		t.Errorf("tombstone: original_message = %v, original_message_base64 = %v; want both null",
			fields["original_message"], fields["original_message_base64"])
	}
	if v, err := env.OriginalValue(); v != nil || err != nil {
		t.Errorf("OriginalValue() = %q (nil %t), %v; want nil", v, v == nil, err)
	}

	o.Value = []byte{}
	env, fields = roundTrip(t, o)
	if b64, ok := fields["original_message_base64"].(string); !ok || b64 != "" {
		t.Errorf(`empty value: original_message_base64 = %#v, want ""`, fields["original_message_base64"])
	}
	if v, err := env.OriginalValue(); v == nil || len(v) != 0 || err != nil {
		t.Errorf("OriginalValue() = %q (nil %t), %v; want empty, not nil", v, v == nil, err)
	}
}

func TestRoundTripKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		key    []byte
		text   any // want original_key
		base64 any // want original_key_base64 (nil: absent)
	}{
		{"text key", []byte("order-42"), "order-42", nil},
		{"nil key", nil, nil, nil},
		{"empty key", []byte{}, "", nil},
		{"binary key", []byte{0xff, 0x00, 'k'}, nil, base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 'k'})},
		{"key with NUL and quotes", []byte("a\x00\"b\\"), "a\x00\"b\\", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := original()
			o.Key = tc.key
			_, fields := roundTrip(t, o)
			if fields["original_key"] != tc.text {
				t.Errorf("original_key = %#v, want %#v", fields["original_key"], tc.text)
			}
			if fields["original_key_base64"] != tc.base64 {
				t.Errorf("original_key_base64 = %#v, want %#v", fields["original_key_base64"], tc.base64)
			}
		})
	}
}

func TestRoundTripHeaders(t *testing.T) {
	t.Parallel()
	headers := []dlq.Header{
		h("ce_id", "id-1"),
		h("trace", "first"),
		{Key: []byte("bin"), Value: []byte{0xde, 0xad, 0xbe, 0xef}},
		h("trace", "second"), // duplicate name: order and both values must survive
		{Key: []byte("null-value"), Value: nil},
		{Key: []byte("empty-value"), Value: []byte{}},
		{Key: []byte{0xff, 'k'}, Value: []byte("binary name")},
		h("a-last", "sorted first by name, listed last"),
		{Key: []byte("bin"), Value: []byte("now text")}, // last value of "bin" is text
	}
	o := original()
	o.Headers = headers
	env, fields := roundTrip(t, o)

	wantView := map[string]string{
		"ce_id": "id-1", "trace": "second", "null-value": "", "empty-value": "", "bin": "now text",
		"a-last": "sorted first by name, listed last",
	}
	if !reflect.DeepEqual(env.OriginalHeaders, wantView) {
		t.Errorf("original_headers = %q, want %q", env.OriginalHeaders, wantView)
	}
	if env.OriginalHeadersBase64 != nil {
		t.Errorf("original_headers_base64 = %q, want none (bin's last value is text)", env.OriginalHeadersBase64)
	}
	list, _ := fields["original_header_list"].([]any)
	if len(list) != len(headers) {
		t.Fatalf("original_header_list has %d entries, want %d: %v", len(list), len(headers), fields["original_header_list"])
	}
	if entry := list[4].(map[string]any); len(entry) != 1 {
		t.Errorf("null header value stored as %v, want only the key", entry)
	}
	if entry := list[2].(map[string]any); entry["value_base64"] != "3q2+7w==" || entry["value"] != nil {
		t.Errorf("binary header value stored as %v, want value_base64 3q2+7w==", entry)
	}
	if entry := list[6].(map[string]any); entry["key_base64"] != "/2s=" || entry["key"] != nil {
		t.Errorf("binary header name stored as %v, want key_base64 /2s=", entry)
	}

	// The last value of a name decides which map it is in.
	o.Headers = []dlq.Header{h("bin", "text"), {Key: []byte("bin"), Value: []byte{0xff}}}
	env, _ = roundTrip(t, o)
	if env.OriginalHeaders != nil || !reflect.DeepEqual(env.OriginalHeadersBase64, map[string]string{"bin": "/w=="}) {
		t.Errorf("view = %q and base64 %q, want only bin=/w== in original_headers_base64", env.OriginalHeaders, env.OriginalHeadersBase64)
	}

	// No headers: an empty map, no list, and nil on restore.
	o.Headers = nil
	_, fields = roundTrip(t, o)
	if m, ok := fields["original_headers"].(map[string]any); !ok || len(m) != 0 {
		t.Errorf(`original_headers = %#v, want {}`, fields["original_headers"])
	}
	if _, ok := fields["original_header_list"]; ok {
		t.Errorf("original_header_list = %v, want it left out", fields["original_header_list"])
	}
}

func TestRecordThatNeverReachedKafka(t *testing.T) {
	t.Parallel()
	o := original()
	o.Partition, o.Offset, o.Timestamp = dlq.NoPartition, dlq.NoOffset, time.Time{}
	env, fields := roundTrip(t, o)
	if fields["original_partition"] != -1.0 || fields["original_offset"] != -1.0 || fields["original_timestamp"] != nil {
		t.Errorf("partition %v, offset %v, timestamp %v; want -1, -1, null",
			fields["original_partition"], fields["original_offset"], fields["original_timestamp"])
	}
	if env.ConsumerGroup != "payouts-worker" {
		t.Errorf("consumer group %q", env.ConsumerGroup)
	}
}

// TestArchitectureShowsTheSampleEnvelope keeps the sample that
// ARCHITECTURE.md shows readers the one that TestDocumentedEnvelopeDecodes
// decodes.
func TestArchitectureShowsTheSampleEnvelope(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../ARCHITECTURE.md")
	if err != nil {
		t.Fatalf("read the architecture document: %v", err)
	}
	if !strings.Contains(string(doc), "```json\n"+sampleEnvelope+"\n```") {
		t.Errorf("ARCHITECTURE.md no longer shows the sample envelope that TestDocumentedEnvelopeDecodes decodes; make the two equal again:\n%s", sampleEnvelope)
	}
}

func TestDocumentedEnvelopeDecodes(t *testing.T) {
	t.Parallel()
	env, err := dlq.Decode([]byte(sampleEnvelope))
	if err != nil {
		t.Fatalf("Decode(ARCHITECTURE.md sample): %v", err)
	}
	if err := env.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := dlq.Envelope{
		Version:           1,
		OriginalTopic:     "aegis.transactions",
		OriginalPartition: 3,
		OriginalOffset:    1842,
		OriginalTimestamp: recordTime,
		OriginalKey:       ptr("tx_xyz"),
		OriginalHeaders:   map[string]string{"ce_id": "…"},
		OriginalMessage:   json.RawMessage(`{"…": "…"}`),
		Error:             "psp timeout after 30s",
		ErrorKind:         dlq.KindRetriesExhausted,
		Attempts:          6,
		FailedAt:          failedAt,
		FirstFailedAt:     firstFailedAt,
		CorrelationID:     "tx_xyz",
		ConsumerGroup:     "payouts",
	}
	if !reflect.DeepEqual(env, want) {
		t.Errorf("Decode = %#v\nwant %#v", env, want)
	}
	o, err := env.Original()
	if err != nil {
		t.Fatalf("Original: %v", err)
	}
	checkSameOriginal(t, o, dlq.Original{
		Topic: "aegis.transactions", Partition: 3, Offset: 1842, Timestamp: recordTime,
		Key: []byte("tx_xyz"), Value: []byte(`{"…":"…"}`), Headers: []dlq.Header{h("ce_id", "…")},
	})

	// Re-encoded, it keeps every value (times now with milliseconds).
	data, err := dlq.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	const wantJSON = `{"envelope_version":1,"original_topic":"aegis.transactions","original_partition":3,"original_offset":1842,` +
		`"original_timestamp":"2026-01-16T09:59:58.120Z","original_key":"tx_xyz","original_headers":{"ce_id":"…"},` +
		`"original_message":{"…":"…"},"original_message_base64":null,"error":"psp timeout after 30s","error_kind":"retries_exhausted",` +
		`"retry_count":6,"failed_at":"2026-01-16T10:00:00.000Z","first_failed_at":"2026-01-16T09:59:59.000Z",` +
		`"correlation_id":"tx_xyz","consumer_group":"payouts","replay_count":0}`
	if string(data) != wantJSON {
		t.Errorf("Encode =\n%s\nwant\n%s", data, wantJSON)
	}
}

func ptr[T any](v T) *T { return &v }

// mutate returns sampleEnvelope with change applied to its fields.
func mutate(change func(map[string]any)) string {
	var m map[string]any
	if err := json.Unmarshal([]byte(sampleEnvelope), &m); err != nil {
		panic(err)
	}
	change(m)
	data, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(data)
}

func set(field string, value any) func(map[string]any) {
	return func(m map[string]any) { m[field] = value }
}

func del(field string) func(map[string]any) {
	return func(m map[string]any) { delete(m, field) }
}

func TestDecodeRejectsBadEnvelopes(t *testing.T) {
	t.Parallel()
	var (
		corrupt     = dlq.ErrCorruptEnvelope
		unsupported = dlq.ErrUnsupportedVersion
		invalid     = dlq.ErrInvalidEnvelope
	)
	for _, tc := range []struct {
		name  string
		input string
		want  error
		field string
	}{
		{"empty input", "", corrupt, ""},
		{"truncated JSON", sampleEnvelope[:len(sampleEnvelope)/2], corrupt, ""},
		{"not JSON", "psp timeout", corrupt, ""},
		{"trailing garbage", sampleEnvelope + "}", corrupt, ""},
		{"JSON array", `[1,2]`, corrupt, ""},
		{"JSON string", `"envelope"`, corrupt, ""},
		{"JSON null", `null`, corrupt, "envelope_version"},
		{"a business payload, not an envelope", `{"order_id":"o-1"}`, corrupt, "envelope_version"},
		{"version as a string", mutate(set("envelope_version", "1")), corrupt, "envelope_version"},
		{"version 1.5", mutate(set("envelope_version", 1.5)), corrupt, "envelope_version"},
		{"version 2", mutate(set("envelope_version", 2)), unsupported, "envelope_version"},
		{"version 2 of another shape", `{"envelope_version":2,"original_partition":"three"}`, unsupported, "envelope_version"},
		{"version 0", mutate(set("envelope_version", 0)), invalid, "envelope_version"},
		{"partition as a string", mutate(set("original_partition", "3")), corrupt, "original_partition"},
		{"partition beyond int32", mutate(set("original_partition", 1<<40)), corrupt, "original_partition"},
		{"retry count as text", mutate(set("retry_count", "six")), corrupt, "retry_count"},
		{"headers as an array", mutate(set("original_headers", []any{"ce_id"})), corrupt, "original_headers"},
		{"header list as an object", mutate(set("original_header_list", map[string]any{})), corrupt, "original_header_list"},
		{"missing original_topic", mutate(del("original_topic")), invalid, "original_topic"},
		{"invalid original_topic", mutate(set("original_topic", "orders/eu")), invalid, "original_topic"},
		{"missing original_partition", mutate(del("original_partition")), invalid, "original_partition"},
		{"missing original_offset", mutate(del("original_offset")), invalid, "original_offset"},
		{"partition -2", mutate(set("original_partition", -2)), invalid, "original_partition"},
		{"offset -1 with a partition", mutate(set("original_offset", -1)), invalid, "original_offset"},
		{"bad original_timestamp", mutate(set("original_timestamp", "16/01/2026")), invalid, "original_timestamp"},
		{"missing failed_at", mutate(del("failed_at")), invalid, "failed_at"},
		{"null failed_at", mutate(set("failed_at", nil)), invalid, "failed_at"},
		{"bad first_failed_at", mutate(set("first_failed_at", "yesterday")), invalid, "first_failed_at"},
		{"missing error_kind", mutate(del("error_kind")), invalid, "error_kind"},
		{"negative retry_count", mutate(set("retry_count", -1)), invalid, "retry_count"},
		{"negative replay_count", mutate(set("replay_count", -3)), invalid, "replay_count"},
		{"both message fields", mutate(set("original_message_base64", "aGk=")), invalid, "original_message"},
		{"bad message base64", mutate(func(m map[string]any) {
			m["original_message"] = nil
			m["original_message_base64"] = "not base64!"
		}), invalid, "original_message_base64"},
		{"both key fields", mutate(set("original_key_base64", "/w==")), invalid, "original_key"},
		{"bad key base64", mutate(func(m map[string]any) {
			delete(m, "original_key")
			m["original_key_base64"] = "%%%"
		}), invalid, "original_key_base64"},
		{"header in both maps", mutate(set("original_headers_base64", map[string]any{"ce_id": "/w=="})), invalid, "original_headers_base64[ce_id]"},
		{"bad base64 in the header map", mutate(set("original_headers_base64", map[string]any{"bin": "???"})), invalid, "original_headers_base64[bin]"},
		{"header entry without a key", mutate(set("original_header_list", []any{map[string]any{"value": "x"}})), invalid, "original_header_list[0]"},
		{"header entry with key and key_base64", mutate(set("original_header_list", []any{
			map[string]any{"key": "ce_id", "key_base64": "Y2VfaWQ=", "value": "…"},
		})), invalid, "original_header_list[0]"},
		{"header entry with value and value_base64", mutate(set("original_header_list", []any{
			map[string]any{"key": "ce_id", "value": "…", "value_base64": "/w=="},
		})), invalid, "original_header_list[0].value"},
		{"header entry with bad base64", mutate(set("original_header_list", []any{
			map[string]any{"key": "ce_id", "value_base64": "***"},
		})), invalid, "original_header_list[0].value_base64"},
		{"header map disagrees with the list", mutate(set("original_header_list", []any{
			map[string]any{"key": "ce_id", "value": "another id"},
		})), invalid, "original_headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := dlq.Decode([]byte(tc.input))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode = %v, want %v", err, tc.want)
			}
			envErr, ok := errors.AsType[*dlq.EnvelopeError](err)
			if !ok || envErr.Field != tc.field {
				t.Fatalf("error %v: want an *EnvelopeError for field %q", err, tc.field)
			}
			if !strings.HasPrefix(err.Error(), "dlq: ") {
				t.Errorf("error %q does not start with the package name", err)
			}
		})
	}
}

func TestDecodeAccepts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		input string
	}{
		{"unknown fields", mutate(set("added_in_a_later_release", true))},
		{"tombstone", mutate(set("original_message", nil))},
		{"no key", mutate(set("original_key", nil))},
		{"no headers at all", mutate(del("original_headers"))},
		{"no timestamps", mutate(func(m map[string]any) { m["original_timestamp"] = nil; delete(m, "first_failed_at") })},
		{"never reached Kafka", mutate(func(m map[string]any) { m["original_partition"] = -1; m["original_offset"] = -1 })},
		{"an error kind of a later release", mutate(set("error_kind", "poison"))},
		{"pretty-printed message", strings.Replace(sampleEnvelope, `{"…": "…"}`, "{\n    \"…\": \"…\"\n  }", 1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env, err := dlq.Decode([]byte(tc.input))
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if _, err := env.Original(); err != nil {
				t.Fatalf("Original: %v", err)
			}
		})
	}
	env, err := dlq.Decode([]byte(strings.Replace(sampleEnvelope, `{"…": "…"}`, "{\n    \"…\": \"…\"\n  }", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := env.OriginalValue(); string(v) != `{"…":"…"}` {
		t.Errorf("OriginalValue of a pretty-printed envelope = %q, want the compact bytes", v)
	}
}

func TestValidateRejectsHandBuiltEnvelopes(t *testing.T) {
	t.Parallel()
	valid, err := dlq.New(original(), failure())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(*dlq.Envelope)
		want   error
		field  string
	}{
		{"no version", func(e *dlq.Envelope) { e.Version = 0 }, dlq.ErrInvalidEnvelope, "envelope_version"},
		{"JSON null message", func(e *dlq.Envelope) { e.OriginalMessage = json.RawMessage("null") }, dlq.ErrInvalidEnvelope, "original_message"},
		{"message not JSON", func(e *dlq.Envelope) { e.OriginalMessage = json.RawMessage("{oops") }, dlq.ErrInvalidEnvelope, "original_message"},
		{"key not UTF-8", func(e *dlq.Envelope) { e.OriginalKey = ptr("\xff") }, dlq.ErrInvalidEnvelope, "original_key"},
		{"header view edited", func(e *dlq.Envelope) { e.OriginalHeaders = map[string]string{"ce_id": "edited"} }, dlq.ErrInvalidEnvelope, "original_headers"},
		{"header list entry edited", func(e *dlq.Envelope) {
			e.OriginalHeaderList = append([]dlq.HeaderEntry(nil), e.OriginalHeaderList...)
			e.OriginalHeaderList[0].Value = ptr("edited")
		}, dlq.ErrInvalidEnvelope, "original_headers"},
		{"timestamp beyond year 9999", func(e *dlq.Envelope) { e.OriginalTimestamp = time.Date(12000, 1, 1, 0, 0, 0, 0, time.UTC) }, dlq.ErrInvalidEnvelope, "original_timestamp"},
		{"zero failed_at", func(e *dlq.Envelope) { e.FailedAt = time.Time{} }, dlq.ErrInvalidEnvelope, "failed_at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := valid
			tc.change(&e)
			for name, err := range map[string]error{"Validate": e.Validate(), "Encode": second(dlq.Encode(e)), "Original": second(e.Original())} {
				if !errors.Is(err, tc.want) {
					t.Fatalf("%s = %v, want %v", name, err, tc.want)
				}
				if envErr, ok := errors.AsType[*dlq.EnvelopeError](err); !ok || envErr.Field != tc.field {
					t.Fatalf("%s error %v: want field %q", name, err, tc.field)
				}
			}
		})
	}
}

func second[T any](_ T, err error) error { return err }

func TestNew(t *testing.T) {
	t.Parallel()
	t.Run("defaults", func(t *testing.T) {
		t.Parallel()
		before := time.Now().Truncate(time.Millisecond)
		env, err := dlq.New(original(), dlq.Failure{Error: "boom", Kind: dlq.KindPermanent})
		if err != nil {
			t.Fatal(err)
		}
		if env.Version != dlq.EnvelopeVersion {
			t.Errorf("Version = %d", env.Version)
		}
		if env.FailedAt.Before(before) || env.FailedAt.After(time.Now()) || env.FailedAt.Location() != time.UTC {
			t.Errorf("FailedAt = %v, want now in UTC", env.FailedAt)
		}
		if !env.FirstFailedAt.Equal(env.FailedAt) {
			t.Errorf("FirstFailedAt = %v, want FailedAt %v", env.FirstFailedAt, env.FailedAt)
		}
	})
	t.Run("times kept to the millisecond in UTC", func(t *testing.T) {
		t.Parallel()
		o := original()
		o.Timestamp = time.Date(2026, 1, 16, 11, 59, 58, 120_999_999, time.FixedZone("CET", 3600))
		env, err := dlq.New(o, failure())
		if err != nil {
			t.Fatal(err)
		}
		if !env.OriginalTimestamp.Equal(recordTime.Add(time.Hour)) || env.OriginalTimestamp.Location() != time.UTC {
			t.Errorf("OriginalTimestamp = %v, want %v", env.OriginalTimestamp, recordTime.Add(time.Hour))
		}
	})
	t.Run("a timestamp RFC 3339 cannot write is dropped, not fatal", func(t *testing.T) {
		t.Parallel()
		o := original()
		o.Timestamp = time.UnixMilli(1 << 60)
		env, err := dlq.New(o, failure())
		if err != nil || !env.OriginalTimestamp.IsZero() {
			t.Fatalf("New = %v, %v; want the timestamp dropped", env.OriginalTimestamp, err)
		}
	})
	t.Run("the caller's bytes are copied", func(t *testing.T) {
		t.Parallel()
		o := original()
		env, err := dlq.New(o, failure())
		if err != nil {
			t.Fatal(err)
		}
		o.Value[2] = 'X'
		if v, _ := env.OriginalValue(); v[2] == 'X' {
			t.Error("the envelope shares the value's memory with the caller")
		}
	})
	for _, tc := range []struct {
		name   string
		change func(*dlq.Original, *dlq.Failure)
		field  string
	}{
		{"empty topic", func(o *dlq.Original, _ *dlq.Failure) { o.Topic = "" }, "original_topic"},
		{"partition without offset", func(o *dlq.Original, _ *dlq.Failure) { o.Offset = dlq.NoOffset }, "original_offset"},
		{"no kind", func(_ *dlq.Original, f *dlq.Failure) { f.Kind = "" }, "error_kind"},
		{"negative retries", func(_ *dlq.Original, f *dlq.Failure) { f.Attempts = -1 }, "retry_count"},
		{"negative replays", func(_ *dlq.Original, f *dlq.Failure) { f.ReplayCount = -1 }, "replay_count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, f := original(), failure()
			tc.change(&o, &f)
			_, err := dlq.New(o, f)
			if !errors.Is(err, dlq.ErrInvalidEnvelope) {
				t.Fatalf("New = %v, want ErrInvalidEnvelope", err)
			}
			if envErr, ok := errors.AsType[*dlq.EnvelopeError](err); !ok || envErr.Field != tc.field {
				t.Fatalf("error %v: want field %q", err, tc.field)
			}
		})
	}
}

func TestTruncateError(t *testing.T) {
	t.Parallel()
	const marker = "… (truncated)"
	for _, tc := range []struct {
		name string
		in   string
	}{
		{"two-byte runes", strings.Repeat("é", dlq.MaxErrorBytes)},
		{"three-byte runes", strings.Repeat("€", dlq.MaxErrorBytes)},
		{"four-byte runes, shifted", "a" + strings.Repeat("𝄞", dlq.MaxErrorBytes)},
		{"ASCII", strings.Repeat("x", dlq.MaxErrorBytes+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := dlq.TruncateError(tc.in)
			if len(got) > dlq.MaxErrorBytes || len(got) < dlq.MaxErrorBytes-3 {
				t.Errorf("len = %d, want at most %d and no more than a rune shorter", len(got), dlq.MaxErrorBytes)
			}
			if !utf8.ValidString(got) || !strings.HasSuffix(got, marker) || !strings.HasPrefix(tc.in, strings.TrimSuffix(got, marker)) {
				t.Errorf("TruncateError = %q…%q: want a valid UTF-8 prefix of the input ending in %q", got[:10], got[len(got)-20:], marker)
			}
		})
	}
	exact := strings.Repeat("é", dlq.MaxErrorBytes/2)
	if got := dlq.TruncateError(exact); got != exact {
		t.Errorf("text of exactly MaxErrorBytes was changed")
	}
	if got := dlq.TruncateError("short"); got != "short" {
		t.Errorf("TruncateError(short) = %q", got)
	}
	if got := dlq.TruncateError("bad \xff byte"); got != "bad \uFFFD byte" {
		t.Errorf("TruncateError of invalid UTF-8 = %q, want U+FFFD in place of the byte", got)
	}

	// New and Encode both cap the error.
	f := failure()
	f.Error = strings.Repeat("€", dlq.MaxErrorBytes)
	env, err := dlq.New(original(), f)
	if err != nil {
		t.Fatal(err)
	}
	if env.Error != dlq.TruncateError(f.Error) {
		t.Errorf("New did not cap the error (%d bytes)", len(env.Error))
	}
	env.Error = f.Error
	data, err := dlq.Encode(env)
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := dlq.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if decoded.Error != dlq.TruncateError(f.Error) {
		t.Errorf("Encode did not cap the error (%d bytes)", len(decoded.Error))
	}
}

func TestMarshalJSONInsideAnotherDocument(t *testing.T) {
	t.Parallel()
	env, err := dlq.New(original(), failure())
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		Offset   int64         `json:"offset"`
		Envelope *dlq.Envelope `json:"envelope"`
	}
	data, err := json.Marshal(line{Offset: 7, Envelope: &env})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte(`"envelope":{"envelope_version":1,"original_topic":"payouts"`)) {
		t.Errorf("json.Marshal = %s, want the envelope's field names", data)
	}
	var back line
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*back.Envelope, env) {
		t.Errorf("json.Unmarshal = %#v, want %#v", *back.Envelope, env)
	}
	if err := json.Unmarshal([]byte(`{"offset":7,"envelope":{"envelope_version":9}}`), &back); !errors.Is(err, dlq.ErrUnsupportedVersion) {
		t.Errorf("json.Unmarshal of version 9 = %v, want ErrUnsupportedVersion", err)
	}
}

// FuzzDecode checks that Decode never panics and that whatever it accepts
// encodes, decodes to the same envelope and restores.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(sampleEnvelope))
	f.Add([]byte(sampleEnvelope[:100]))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"envelope_version":2}`))
	f.Add([]byte(`{"envelope_version":1e400}`))
	f.Add([]byte(mutate(set("original_headers_base64", map[string]any{"x": "/w=="}))))
	f.Add([]byte(mutate(set("original_header_list", []any{map[string]any{"key_base64": "/w==", "value": "…"}}))))
	for _, o := range []dlq.Original{
		original(),
		{Topic: "t", Partition: -1, Offset: -1, Key: []byte{0xff}, Value: []byte{}, Headers: []dlq.Header{{Key: []byte("k")}, h("k", "v")}},
	} {
		env, err := dlq.New(o, failure())
		if err != nil {
			f.Fatal(err)
		}
		data, err := dlq.Encode(env)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := dlq.Decode(data)
		if err != nil {
			if _, ok := errors.AsType[*dlq.EnvelopeError](err); !ok {
				t.Fatalf("Decode error %v is not an *EnvelopeError", err)
			}
			return
		}
		if _, err := env.Original(); err != nil {
			t.Fatalf("Decode accepted an envelope Original rejects: %v", err)
		}
		encoded, err := dlq.Encode(env)
		if err != nil {
			t.Fatalf("Decode accepted an envelope Encode rejects: %v", err)
		}
		again, err := dlq.Decode(encoded)
		if err != nil {
			t.Fatalf("Decode(Encode(Decode(data))): %v\n%s", err, encoded)
		}
		first, _ := env.Original()
		second, _ := again.Original()
		checkSameOriginal(t, second, first)
	})
}

// FuzzRoundTrip checks that any key, value and header bytes come back
// exactly.
func FuzzRoundTrip(f *testing.F) {
	f.Add([]byte("k"), []byte(`{"a":1}`), []byte("h"), []byte("v"), false)
	f.Add([]byte{0xff}, []byte(`{"a": 1}`), []byte{0xfe}, []byte{0x00}, true)
	f.Add([]byte{}, []byte("null"), []byte(""), []byte(""), false)
	f.Fuzz(func(t *testing.T, key, value, hk, hv []byte, nilValue bool) {
		o := original()
		o.Key, o.Value = key, value
		if nilValue {
			o.Value = nil
		}
		o.Headers = []dlq.Header{{Key: hk, Value: hv}, {Key: hk}, h("x", "y")}
		roundTrip(t, o)
	})
}
