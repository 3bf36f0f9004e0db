package producer_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/internal/topicname"
	"github.com/courierkit/courier/producer"
)

// limitCase is one limit of an event that the outbox guide's Validation section
// states: set gives a field of limitBase's event the value n (a length in
// bytes, a count, or nanoseconds from a bound); at is n at the limit, and
// past one past it, which Enqueue refuses with err naming field and says.
type limitCase struct {
	name     string
	doc      string // the row of the outbox guide's table of limits that states it
	set      func(e *producer.Event, n int)
	at, past int
	err      error
	field    string
	says     string
	// held: the event at the limit is not due before the year 9999, so
	// it is checked in the outbox, waiting, not on Kafka.
	held bool
}

// limitSource is the relay's ce_source in TestLimitsHoldThroughTheRelay,
// at its limit, so that every record it publishes is as large as the one
// Enqueue counted.
var limitSource = filler("source-", producer.MaxSourceBytes)

// The outbox guide's rows for RelayConfig.Source and the record, and the first
// and last instants NotBefore takes.
var (
	sourceDoc = fmt.Sprintf("| `RelayConfig.Source` | %d bytes (`MaxSourceBytes`) | `NewRelay` refuses it with `ErrInvalidConfig` |", producer.MaxSourceBytes)
	firstTime = time.Date(1, time.January, 1, 0, 0, 0, 0, time.UTC)
	endOfTime = time.Date(10000, time.January, 1, 0, 0, 0, 0, time.UTC)
)

// limitBase is the event of topic whose fields limitCase sets.
func limitBase(topic string) producer.Event {
	return producer.Event{Topic: topic, Type: "X", Payload: []byte(`{}`)}
}

// limitCases are the limits of an event, for events of topic (but the
// one of the topic's own limit, whose name starts with topicPrefix).
func limitCases(topic, topicPrefix string) []limitCase {
	minimal := producer.Event{Topic: topic, Type: "X"}
	withHeader := limitBase(topic)
	withHeader.Headers = map[string]string{"x-h": ""}
	payloadRoom := producer.Config{}.MaxPayload(minimal)
	valueRoom := producer.Config{}.MaxPayload(withHeader) - len(withHeader.Payload)
	keyDoc := fmt.Sprintf("| `Key`, `IdempotencyKey` | %d bytes (`MaxKeyBytes`), what a PostgreSQL index entry holds | `ErrTooLong` |", producer.MaxKeyBytes)
	attrDoc := fmt.Sprintf("| `Type`, `ContentType`, `AggregateType`, `AggregateID`, `TenantID`, `CorrelationID`, `CausationID`, a header name | %d bytes (`MaxAttributeBytes`) | `ErrTooLong` (for a header name with `ErrInvalidHeader`) |", producer.MaxAttributeBytes)
	recordDoc := fmt.Sprintf("| the record: key, payload and headers | `Config.MaxPayloadBytes` (%s bytes by default) as the relay publishes it, with its `ce_*` headers, a `ce_source` of %d bytes and a `traceparent`: a minimal event (a one-byte `Type`, nothing else set) has room for a payload of %s bytes; `Config.MaxPayload(e)` gives the room in yours | `ErrRecordTooLarge` |",
		thousands(producer.DefaultMaxPayloadBytes), producer.MaxSourceBytes, thousands(payloadRoom))
	attempts := fmt.Sprintf("| `MaxAttempts` | 0 to %d | `ErrInvalidMaxAttempts` |", math.MaxInt32)
	notBefore := fmt.Sprintf("| `NotBefore` | %s to %s | `ErrInvalidTime` |", firstTime.Format(time.RFC3339Nano), endOfTime.Add(-1).Format(time.RFC3339Nano))
	within := func(doc string, limit int) func(name string, set func(*producer.Event, int)) limitCase {
		return func(name string, set func(*producer.Event, int)) limitCase {
			return limitCase{name: name, doc: doc, set: set, at: limit, past: limit + 1,
				err: producer.ErrTooLong, field: name, says: fmt.Sprintf("at most %d", limit)}
		}
	}
	key, attribute := within(keyDoc, producer.MaxKeyBytes), within(attrDoc, producer.MaxAttributeBytes)
	return []limitCase{
		{name: "Topic", doc: fmt.Sprintf("| `Topic` | %d bytes, Kafka's limit | `ErrInvalidTopic` |", topicname.MaxLen),
			set: func(e *producer.Event, n int) { e.Topic = filler(topicPrefix, n) }, at: topicname.MaxLen, past: topicname.MaxLen + 1,
			err: producer.ErrInvalidTopic, field: "Topic", says: fmt.Sprintf("at most %d", topicname.MaxLen)},
		key("Key", func(e *producer.Event, n int) { e.Key = filler("", n) }),
		key("IdempotencyKey", func(e *producer.Event, n int) { e.IdempotencyKey = filler("", n) }),
		attribute("Type", func(e *producer.Event, n int) { e.Type = filler("", n) }),
		attribute("ContentType", func(e *producer.Event, n int) { e.ContentType = filler("application/", n) }),
		attribute("AggregateType", func(e *producer.Event, n int) { e.AggregateType = filler("", n) }),
		attribute("AggregateID", func(e *producer.Event, n int) { e.AggregateID = filler("", n) }),
		attribute("TenantID", func(e *producer.Event, n int) { e.TenantID = filler("", n) }),
		attribute("CorrelationID", func(e *producer.Event, n int) { e.CorrelationID = filler("", n) }),
		attribute("CausationID", func(e *producer.Event, n int) { e.CausationID = filler("", n) }),
		{name: "header name", doc: attrDoc, set: func(e *producer.Event, n int) { e.Headers = map[string]string{filler("x-", n): "v"} },
			at: producer.MaxAttributeBytes, past: producer.MaxAttributeBytes + 1,
			err: producer.ErrTooLong, field: "Headers[", says: fmt.Sprintf("at most %d", producer.MaxAttributeBytes)},
		{name: "Payload of a minimal event", doc: recordDoc,
			set: func(e *producer.Event, n int) { e.Payload = []byte(filler(`"`, n-1) + `"`) },
			at:  payloadRoom, past: payloadRoom + 1,
			err: producer.ErrRecordTooLarge, field: "Payload", says: fmt.Sprintf("limit %d", producer.DefaultMaxPayloadBytes)},
		{name: "header value", doc: recordDoc,
			set: func(e *producer.Event, n int) { e.Headers = map[string]string{"x-h": filler("", n)} },
			at:  valueRoom, past: valueRoom + 1,
			err: producer.ErrRecordTooLarge, field: "Headers", says: fmt.Sprintf("limit %d", producer.DefaultMaxPayloadBytes)},
		{name: "MaxAttempts, most", doc: attempts, set: func(e *producer.Event, n int) { e.MaxAttempts = n },
			at: math.MaxInt32, past: math.MaxInt32 + 1, err: producer.ErrInvalidMaxAttempts, field: "MaxAttempts", says: fmt.Sprint(math.MaxInt32)},
		{name: "MaxAttempts, least", doc: attempts, set: func(e *producer.Event, n int) { e.MaxAttempts = n },
			at: 0, past: -1, err: producer.ErrInvalidMaxAttempts, field: "MaxAttempts", says: "got -1"},
		// The first instant itself is the zero time, "at once": the
		// nanosecond after it is the first NotBefore stored.
		{name: "NotBefore, earliest", doc: notBefore, set: func(e *producer.Event, n int) { e.NotBefore = firstTime.Add(time.Duration(n)) },
			at: 1, past: -1, err: producer.ErrInvalidTime, field: "NotBefore", says: "years 1 and 9999"},
		{name: "NotBefore, latest", doc: notBefore, set: func(e *producer.Event, n int) { e.NotBefore = endOfTime.Add(time.Duration(n)) },
			at: -1, past: 0, err: producer.ErrInvalidTime, field: "NotBefore", says: "years 1 and 9999", held: true},
	}
}

// TestLimitsHoldThroughTheRelay: every limit of an event that the
// outbox guide's Validation section states holds through a relay to the broker.
// An event at the limit is enqueued, published by a relay that traces (so
// each record carries a traceparent) with a ce_source of MaxSourceBytes,
// and read back from Kafka byte for byte: key, value and every header.
// One past the limit, Enqueue refuses it with the documented error naming
// the field and the limit, and writes nothing of it in the transaction,
// which then commits the event at the limit. NewRelay refuses a Source
// one byte over MaxSourceBytes.
func TestLimitsHoldThroughTheRelay(t *testing.T) {
	t.Parallel()
	pg, out := setupOrders(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	topicPrefix := "t." + testkit.UniqueName(t, 60) + "."
	ctx := context.Background()

	type accepted struct {
		limitCase
		id    uuid.UUID
		event producer.Event
	}
	var published []accepted
	var held accepted
	for _, lc := range limitCases(topic, topicPrefix) {
		at, past := limitBase(topic), limitBase(topic)
		lc.set(&at, lc.at)
		lc.set(&past, lc.past)
		if at.Topic != topic {
			k.CreateTopic(t, at.Topic, 1)
		}
		prefix := testkit.UniqueName(t, 20)
		tx, err := refusedIn(ctx, t, pg, prefix, func(tx pgx.Tx) error { _, err := out.Enqueue(ctx, tx, past); return err })
		assertEventError(t, err, lc.err, 0, lc.field, lc.says)
		res, err := out.Enqueue(ctx, tx, at)
		if err != nil {
			t.Fatalf("%s at its limit (%d): %v", lc.name, lc.at, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if lc.held {
			held = accepted{lc, res.ID, at}
		} else {
			published = append(published, accepted{lc, res.ID, at})
		}
	}

	tooLong := producer.RelayConfig{Schema: pg.Schema, Brokers: k.Brokers, Source: limitSource + "s"}
	if _, err := producer.NewRelay(pg.Pool, tooLong); !errors.Is(err, producer.ErrInvalidConfig) || !strings.Contains(err.Error(), "Source") {
		t.Errorf("NewRelay with a Source of %d bytes: %v, want ErrInvalidConfig naming Source", len(tooLong.Source), err)
	}
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(ctx) })
	runRelay(t, newRelay(t, pg, k, producer.RelayConfig{Source: limitSource, TracerProvider: tp, PollInterval: 20 * time.Millisecond}))
	testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("the %d events at their limits to be published", len(published)), func() bool {
		return countRows(t, pg.Pool, "status = 'published'") == len(published)
	})

	topics := map[string]bool{}
	for _, a := range published {
		topics[a.event.Topic] = true
	}
	records := map[string]*sarama.ConsumerMessage{}
	for name := range topics {
		for _, m := range k.ReadAll(t, name) {
			records[headerValue(m, producer.HeaderID)] = m
		}
	}
	for _, a := range published {
		m := records[a.id.String()]
		if m == nil {
			t.Errorf("%s at its limit (%d): event %s is not on Kafka", a.name, a.at, a.id)
			continue
		}
		if diff := recordDiff(m, a.event, a.id); diff != "" {
			t.Errorf("%s at its limit (%d) reached Kafka changed: %s", a.name, a.at, diff)
		}
	}
	notBefore := held.event.NotBefore.Truncate(time.Microsecond) // what timestamptz holds
	if n := countRows(t, pg.Pool, "id = $1 AND status = 'pending' AND next_attempt_at = $2", held.id, notBefore); n != 1 {
		t.Errorf("%s at its limit: %d events waiting for %s, want 1", held.name, n, notBefore)
	}
}

// recordDiff says how m differs from the record the relay publishes for e
// (enqueued as id) in binary mode, or "" when it is that record byte for
// byte: topic, key, value, the ce_ headers, e's headers and the relay's
// traceparent, and no other header.
func recordDiff(m *sarama.ConsumerMessage, e producer.Event, id uuid.UUID) string {
	want := map[string]string{producer.HeaderSpecVersion: "1.0", producer.HeaderID: id.String(), producer.HeaderType: e.Type,
		producer.HeaderSource: limitSource, producer.HeaderContentType: cmp.Or(e.ContentType, producer.DefaultContentType)}
	for name, value := range map[string]string{producer.HeaderAggregateType: e.AggregateType, producer.HeaderAggregateID: e.AggregateID,
		producer.HeaderTenantID: e.TenantID, producer.HeaderCorrelationID: e.CorrelationID, producer.HeaderCausationID: e.CausationID} {
		if value != "" {
			want[name] = value
		}
	}
	for name, value := range e.Headers {
		want[name] = value
	}
	var diffs []string
	if m.Topic != e.Topic || string(m.Key) != e.Key || !bytes.Equal(m.Value, e.Payload) {
		diffs = append(diffs, fmt.Sprintf("topic %.40q (%d bytes), key of %d bytes, value of %d bytes; want %.40q (%d bytes), %d, %d",
			m.Topic, len(m.Topic), len(m.Key), len(m.Value), e.Topic, len(e.Topic), len(e.Key), len(e.Payload)))
	}
	seen := map[string]bool{}
	for _, h := range m.Headers {
		name, value := string(h.Key), string(h.Value)
		switch w, ok := want[name]; {
		case seen[name]:
			diffs = append(diffs, fmt.Sprintf("header %.40q twice", name))
		case name == producer.HeaderTime:
			if _, err := time.Parse(time.RFC3339Nano, value); err != nil {
				diffs = append(diffs, fmt.Sprintf("ce_time %q", value))
			}
		case name == producer.HeaderTraceParent:
			if len(value) != len("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") {
				diffs = append(diffs, fmt.Sprintf("traceparent %q is not the relay's span's", value))
			}
		case !ok:
			diffs = append(diffs, fmt.Sprintf("header %.40q not set", name))
		case value != w:
			diffs = append(diffs, fmt.Sprintf("header %.40q: %d bytes %.40q, want %d bytes %.40q", name, len(value), value, len(w), w))
		}
		seen[name] = true
	}
	for _, name := range append(slices.Collect(maps.Keys(want)), producer.HeaderTime, producer.HeaderTraceParent) {
		if !seen[name] {
			diffs = append(diffs, fmt.Sprintf("header %.40q missing", name))
		}
	}
	slices.Sort(diffs)
	return strings.Join(diffs, "; ")
}

// TestOutboxGuideStatesTheLimits: the table of limits in the outbox
// guide (docs/outbox.md) is the one the code proves in
// TestLimitsHoldThroughTheRelay, figure for figure.
func TestOutboxGuideStatesTheLimits(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../docs/outbox.md")
	if err != nil {
		t.Fatalf("read the outbox guide: %v", err)
	}
	rows := []string{"| field | limit | one past it |", "| --- | --- | --- |"}
	for _, lc := range limitCases("t", "t.") {
		if !slices.Contains(rows, lc.doc) {
			rows = append(rows, lc.doc)
		}
	}
	table := strings.Join(append(rows, sourceDoc), "\n") + "\n"
	if !strings.Contains(string(readme), table) {
		t.Errorf("docs/outbox.md's Validation section does not hold the limits the code proves (TestLimitsHoldThroughTheRelay); make it this table:\n%s", table)
	}
}

// filler is prefix followed by letters and digits, n bytes in all.
func filler(prefix string, n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := []byte(prefix)
	for i := 0; len(b) < n; i++ {
		b = append(b, alphabet[i%len(alphabet)])
	}
	return string(b[:n])
}

// thousands writes n with commas between its groups of three digits, as
// the outbox guide writes sizes.
func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
