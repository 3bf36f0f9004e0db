package producer

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/courierkit/courier/internal/testkit"
)

// FuzzEnqueueValidation builds a batch of two events from the fuzzer's
// fields (the second a copy of the first with another key, and with the
// same id when sameID) and checks what EnqueueBatch's validation makes of
// it: it never panics; it either refuses the batch with an *EventError
// that names a field of an event of the batch and matches one of the
// package's sentinels, or accepts it, and then each event is one that
// PostgreSQL stores without an error (text without NUL, valid UTF-8, index
// entries within a B-tree page's limit, int4 and timestamptz in range) and
// Kafka takes (the topic's naming rules), with no header that courier
// reserves. In the seed run (go test without -fuzz), an accepted batch is
// also written to PostgreSQL, in a transaction that is rolled back.
func FuzzEnqueueValidation(f *testing.F) {
	f.Add("orders", "o-1", "OrderCreated", []byte(`{"a":1}`), "", "x-h", "v", "t-1", "", int64(0), int64(0), false, false)
	f.Add("orders", "o-1", "OrderCreated", []byte(`{}`), "application/json; charset=\"utf\x00-8\"", "x-h", "v", "", "", int64(0), int64(0), true, false)
	f.Add("orders", "o-1", "OrderCreated", []byte(`{}`), "", "replay_count", "1", "", "", int64(0), int64(0), true, false)
	f.Add("orders", "o-1", "OrderCreated", []byte(`{}`), "", "Retry_Attempt", "1", "", "", int64(0), int64(0), true, false)
	f.Add("orders", "o-1", "OrderCreated", []byte(`{}`), "", "x-h", "a\x00b", "", "", int64(0), int64(0), true, false)
	f.Add("orders", "\xff", "OrderCreated", []byte(`{}`), "", "", "", "", "", int64(0), int64(0), false, false)
	f.Add("bad topic!", "k", "T", []byte(`{}`), "", "", "", "", "", int64(0), int64(0), false, false)
	f.Add("orders\x00", "k", "T", []byte(`{}`), "", "", "", "", "", int64(0), int64(0), false, false)
	f.Add("..", "k", "T", []byte(`{}`), "", "", "", "", "", int64(0), int64(0), false, false)
	f.Add("orders", "k", "", []byte(`{}`), "", "", "", "", "", int64(0), int64(0), false, false)
	f.Add("orders", "k", "T", []byte(`{}`), "", "", "", "", "", int64(-1), int64(0), false, false)
	f.Add("orders", "k", "T", []byte(`{}`), "", "", "", "", "", int64(math.MaxInt32)+1, int64(0), false, false)
	f.Add("orders", "k", "T", []byte(`{}`), "", "", "", "", "", int64(3), int64(9_223_372_036), false, false)    // year 294247
	f.Add("orders", "k", "T", []byte(`{}`), "", "", "", "", "", int64(3), int64(-210_866_803_200), false, false) // 4714 BC
	f.Add("orders", "k", "T", []byte(`{}`), "", "", "", "", "", int64(3), int64(253_402_300_799), false, false)  // 9999-12-31
	f.Add("orders", "k", "T", []byte(`{}`), "", "", "", "", "idem", int64(0), int64(0), true, true)
	f.Add("orders", strings.Repeat("k", 2049), "T", []byte(`{}`), "", "", "", "", "", int64(0), int64(0), false, false)
	f.Add("orders", "k", "T", []byte(`{}`), "", "", "", "", strings.Repeat("i", 2048), int64(0), int64(0), false, false)
	f.Add("orders", "k", "T", []byte("\x00\xff"), "application/octet-stream", "", "", "", "", int64(0), int64(0), false, false)
	f.Add("orders", "k", "T", []byte(`{"a":`), "application/vnd.x+json", "", "", "", "", int64(0), int64(0), false, false)

	o := &Outbox{maxPayload: 4096} // validation only: columns sends no SQL
	var pg *testkit.PG
	if fl := flag.Lookup("test.fuzz"); fl == nil || fl.Value.String() == "" {
		pg = testkit.Postgres(f)
		pg.Migrate(f)
		var err error
		if o, err = NewOutbox(Config{Schema: pg.Schema, MaxPayloadBytes: 4096}); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, topic, key, typ string, payload []byte, contentType, hName, hValue, tenant, idem string,
		maxAttempts, notBefore int64, ownID, sameID bool) {
		e := Event{Topic: topic, Key: key, Type: typ, Payload: payload, ContentType: contentType, TenantID: tenant,
			IdempotencyKey: idem, MaxAttempts: int(maxAttempts)}
		if hName != "" || hValue != "" {
			e.Headers = map[string]string{hName: hValue}
		}
		if notBefore != 0 {
			e.NotBefore = time.Unix(notBefore, 0)
		}
		if ownID {
			e.ID = uuid.New()
		}
		second := e
		second.Key += "-2"
		if second.IdempotencyKey != "" {
			second.IdempotencyKey += "-2"
		}
		if !sameID {
			second.ID = uuid.Nil
		}
		batch := []Event{e, second}
		cols, err := o.columns(context.Background(), batch)
		if err != nil {
			checkRefusal(t, err, batch)
			return
		}
		for i, ev := range batch {
			if problem := storable(ev); problem != "" {
				t.Fatalf("event %d accepted, but %s: %+v", i, problem, ev)
			}
		}
		if len(cols.id) != 2 || cols.id[0] == cols.id[1] {
			t.Fatalf("accepted a batch whose events share the id %s", uuid.UUID(cols.id[0].Bytes))
		}
		if pg == nil {
			return
		}
		tx, err := pg.Pool.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(context.Background()) }()
		if _, err := o.EnqueueBatch(context.Background(), tx, batch); err != nil {
			t.Fatalf("validation accepted the batch, PostgreSQL refused it: %v", err)
		}
	})
}

// checkRefusal checks that err is an *EventError for an event of batch,
// naming one of its fields in its message, with one of the package's
// sentinels.
func checkRefusal(t *testing.T, err error, batch []Event) {
	t.Helper()
	evErr, ok := errors.AsType[*EventError](err)
	if !ok {
		t.Fatalf("refused with %v (%T), want an *EventError", err, err)
	}
	fields := []string{"ID", "Topic", "Key", "Type", "Payload", "ContentType", "Headers", "AggregateType", "AggregateID",
		"TenantID", "CorrelationID", "CausationID", "IdempotencyKey", "MaxAttempts", "NotBefore"}
	named := false
	for _, f := range fields {
		named = named || evErr.Field == f || strings.HasPrefix(evErr.Field, "Headers[") && strings.HasSuffix(evErr.Field, "]")
	}
	if !named || evErr.Index < 0 || evErr.Index >= len(batch) || !strings.Contains(err.Error(), evErr.Field) {
		t.Fatalf("refused with %q: want an event of the batch and one of its fields named", err)
	}
	sentinels := []error{ErrEmptyTopic, ErrInvalidTopic, ErrMissingType, ErrPayloadTooLarge, ErrInvalidJSON,
		ErrInvalidContentType, ErrReservedHeader, ErrInvalidHeader, ErrInvalidText, ErrInvalidMaxAttempts, ErrTooLong,
		ErrRecordTooLarge, ErrInvalidTime, ErrDuplicateID}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return
		}
	}
	t.Fatalf("refused with %q, which matches none of the package's sentinels", err)
}

// kafkaTopic is Kafka's rule for topic names (but "." and "..").
var kafkaTopic = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// PostgreSQL's timestamptz range: 4714-11-24 00:00 BC to 294277-01-01
// 00:00 (exclusive), UTC.
var (
	pgMinTime = time.Date(-4713, time.November, 24, 0, 0, 0, 0, time.UTC)
	pgEndTime = time.Date(294277, time.January, 1, 0, 0, 0, 0, time.UTC)
)

// storable says what PostgreSQL or Kafka would refuse of e, an event
// validation accepted, or "" when nothing: an independent statement of
// their rules, not a call of the validation.
func storable(e Event) string {
	texts := map[string]string{"topic": e.Topic, "key": e.Key, "type": e.Type, "content type": e.ContentType,
		"tenant": e.TenantID, "idempotency key": e.IdempotencyKey}
	for name, value := range e.Headers {
		texts["header name "+name] = name
		texts["header value of "+name] = value
		lower := strings.ToLower(name)
		for _, reserved := range []string{"ce_", "retry_", "dlq_"} {
			if strings.HasPrefix(lower, reserved) {
				return "header " + name + " is reserved"
			}
		}
		if lower == "content-type" || lower == "replay_count" {
			return "header " + name + " is reserved"
		}
	}
	for what, s := range texts {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return what + " is not text PostgreSQL stores"
		}
	}
	if headers, err := json.Marshal(e.Headers); err != nil || strings.Contains(string(headers), `\u0000`) {
		return "headers are not jsonb"
	}
	switch {
	case !kafkaTopic.MatchString(e.Topic) || e.Topic == "." || e.Topic == "..":
		return "Kafka refuses the topic"
	case e.Type == "":
		return "the type is empty"
	case len(e.Topic)+len(e.Key) > 2600 || len(e.Topic)+len(e.IdempotencyKey) > 2600:
		return "an index entry would be over a B-tree page's limit"
	case e.MaxAttempts < 0 || e.MaxAttempts > math.MaxInt32:
		return "max retries is not an int4 >= 0"
	case !e.NotBefore.IsZero() && (e.NotBefore.Before(pgMinTime) || !e.NotBefore.Before(pgEndTime)):
		return "NotBefore is out of timestamptz's range"
	}
	return ""
}
