package producer_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/migrations"
	"github.com/courierkit/courier/producer"
)

// hostileRelayCase is bad data reaching the relay: a row written straight
// into the outbox with SQL, around Enqueue's checks; a broker refusing one
// event; or an outbox that is not there.
type hostileRelayCase struct {
	name string
	// isolation: the bad event, and what must become of it while healthy
	// events flow beside it (see runIsolation).
	isolation
	// notReady, instead, prepares an outbox Run must refuse to start on and
	// returns its schema and table; want is what the error names missing.
	notReady func(t *testing.T, pg *testkit.PG) (schema, table string)
}

// TestHostileRelay feeds the relay bad data. Each bad event is isolated:
// dead-lettered with an error naming the problem, refused by PostgreSQL, or
// (a bad max_retries) published with the relay's default; meanwhile healthy
// events of other keys, enqueued before, beside and after it, are all
// published within isolationBound; the breaker stays closed; every event is
// counted; nothing panics. An outbox that is not there stops Run at once
// with an error naming what is missing and the migrate command.
func TestHostileRelay(t *testing.T) {
	t.Parallel()
	topic250 := strings.Repeat("a", 250)
	for _, c := range []hostileRelayCase{
		{name: "topic that does not exist", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.insertEvent("$2 || '.nope'", "'k-bad'", "'x'") },
			want: "does not exist", retries: 5,
		}},
		{name: "topic Kafka refuses: bad topic!", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.insertEvent("'bad topic!'", "'k-bad'", "'x'") },
			want: `topic: topic name is not valid in Kafka: "bad topic!"`,
		}},
		{name: "empty topic", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.insertEvent("''", "'k-bad'", "'x'") },
			want: "topic: topic is empty",
		}},
		{name: "topic ..", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.insertEvent("'..'", "'k-bad'", "'x'") },
			want: `".." is not allowed`,
		}},
		{name: "topic of 250 characters", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.insertEvent("'"+topic250+"'", "'k-bad'", "'x'") },
			want: "250 characters, Kafka allows at most 249",
		}},
		{name: "payload over the broker's message.max.bytes", isolation: isolation{
			kafka: []kfake.Opt{kfake.BrokerConfigs(map[string]string{"message.max.bytes": "100000"})},
			relay: func(c *producer.RelayConfig) { c.Sarama.Producer.MaxMessageBytes = 4 << 20 }, // the broker judges
			bad: func(r *rig) (uuid.UUID, error) {
				return r.insertEvent("$2", "'k-bad'", "convert_to(repeat('x', 200000), 'UTF8')")
			},
			want: "Message was too large",
		}},
		{name: "payload over Producer.MaxMessageBytes", isolation: isolation{
			bad: func(r *rig) (uuid.UUID, error) {
				return r.insertEvent("$2", "'k-bad'", "convert_to(repeat('x', 2000000), 'UTF8')")
			},
			want: "larger than Producer.MaxMessageBytes",
		}},
		{name: "headers not an object of strings", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.insertHeaders(`{"x": 1}`) },
			want: "headers: header is not valid: want a JSON object of strings",
		}},
		{name: "headers a JSON array", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.insertHeaders(`["a", "b"]`) },
			want: `got ["a", "b"]`,
		}},
		{name: "header named ce_id, forging the event id", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.insertHeaders(`{"ce_id": "forged"}`) },
			want: `headers["ce_id"]: header name is reserved`,
		}},
		{name: "header with an empty name", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.insertHeaders(`{"": "v"}`) },
			want: `headers[""]: header is not valid: the name is empty`,
		}},
		{name: "empty event type", isolation: isolation{
			bad: func(r *rig) (uuid.UUID, error) {
				return r.insert("topic, partition_key, event_type, payload, content_type", "$2, 'k-bad', '', '{}', 'application/json'")
			},
			want: "event_type: event type is empty",
		}},
		{name: "created_at at infinity", isolation: isolation{
			bad: func(r *rig) (uuid.UUID, error) {
				return r.insert("topic, partition_key, event_type, payload, content_type, created_at",
					"$2, 'k-bad', 'Bad', '{}', 'application/json', 'infinity'")
			},
			want: "created_at: infinity is not a time",
		}},
		{name: "key whose partition refuses it: CORRUPT_MESSAGE", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.failing(kerr.CorruptMessage) },
			want: "CRC", retries: 5,
		}},
		{name: "topic the relay may not write: TOPIC_AUTHORIZATION_FAILED", isolation: isolation{
			bad: func(r *rig) (uuid.UUID, error) {
				denied := r.topic + ".denied"
				r.k.CreateTopic(r.t, denied, 1)
				r.k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: denied, Err: kerr.TopicAuthorizationFailed, Count: -1})
				return r.insertEvent("'"+denied+"'", "'k-bad'", "'x'")
			},
			// Access is the cluster's to grant, not the event's fault.
			want: "not authorized", held: true,
		}},
		{name: "topic too long for its dead-letter topic", isolation: isolation{
			relay: func(c *producer.RelayConfig) { c.PublishDeadLetters = true },
			bad: func(r *rig) (uuid.UUID, error) {
				return r.insertEvent("'"+strings.Repeat("b", 247)+"'", "'k-bad'", "'x'") // no such topic; .dlq makes 251
			},
			want: "dead-letter topic: topic name is not valid in Kafka: 251 characters",
		}},
		{name: "NUL byte in the key", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.insertEvent("$2", `E'k\x00'`, "'x'") },
			want: "0x00",
		}},
		{name: "non-UTF-8 bytes in the type", isolation: isolation{
			bad: func(r *rig) (uuid.UUID, error) {
				return r.insert("topic, partition_key, event_type, payload, content_type", `$2, 'k-bad', E'\xff\xfe', '{}', 'application/json'`)
			},
			want: "invalid byte sequence",
		}},
		{name: "NUL escape in a header value", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.insertHeaders(`{"h": "a\u0000b"}`) },
			want: "unsupported Unicode escape sequence",
		}},
		{name: "key of 3,200 bytes written around Enqueue", isolation: isolation{
			relay: oneWorker,
			bad:   func(r *rig) (uuid.UUID, error) { return r.insertEvent("$2", incompressible(3200), "'x'") },
			want:  "partition_key: text is longer than courier allows: 3200 bytes, at most 2048",
		}},
		{name: "key of 9,600 bytes written around Enqueue", isolation: isolation{
			relay: oneWorker,
			bad:   func(r *rig) (uuid.UUID, error) { return r.insertEvent("$2", incompressible(9600), "'x'") },
			want:  "partition_key: text is longer than courier allows: 9600 bytes, at most 2048",
		}},
		{name: "key of 9,600 bytes that waits for its NotBefore", isolation: isolation{
			relay: oneWorker,
			bad: func(r *rig) (uuid.UUID, error) {
				return r.insertWith(incompressible(9600), "not_before", "now() + interval '500 milliseconds'")
			},
			want: "partition_key: text is longer than courier allows: 9600 bytes",
		}},
		{name: "key of 9,600 bytes held with its key on dead letters", isolation: isolation{
			relay: func(c *producer.RelayConfig) { c.Workers, c.HoldKeyOnDeadLetter = 1, true },
			bad:   func(r *rig) (uuid.UUID, error) { return r.insertEvent("$2", incompressible(9600), "'x'") },
			want:  "partition_key: text is longer than courier allows: 9600 bytes",
		}},
		{name: "topic of 10,000 bytes", isolation: isolation{
			relay: oneWorker,
			bad:   func(r *rig) (uuid.UUID, error) { return r.insertEvent(incompressible(10000), "'k-bad'", "'x'") },
			want:  "topic: topic name is not valid in Kafka: 9984 characters",
		}},
		{name: "event type of 3,000 bytes", isolation: isolation{
			bad: func(r *rig) (uuid.UUID, error) {
				return r.insert("topic, partition_key, event_type, payload, content_type", "$2, 'k-bad', repeat('T', 3000), '{}', 'application/json'")
			},
			want: "event_type: text is longer than courier allows: 3000 bytes, at most 2048",
		}},
		{name: "correlation id of 5,000 bytes", isolation: isolation{
			bad:  func(r *rig) (uuid.UUID, error) { return r.insertWith("'k-bad'", "correlation_id", "repeat('c', 5000)") },
			want: "correlation_id: text is longer than courier allows: 5000 bytes",
		}},
		{name: "dead table refuses the event (a CHECK of the operator's)", isolation: isolation{
			relay: oneWorker,
			bad: func(r *rig) (uuid.UUID, error) {
				r.refuse("courier_outbox_dead")
				return r.insertEvent("'bad topic!'", "'k-refused'", "'x'")
			},
			// PostgreSQL will not hold its dead letter: it stays in the queue,
			// and the relay leaves it alone.
			status: producer.StatusPending,
		}},
		{name: "waiting and dead tables refuse the event", isolation: isolation{
			relay:  oneWorker,
			bad:    scheduledRefusedBy("courier_outbox_waiting", "courier_outbox_dead"),
			status: producer.StatusPending,
		}},
		{name: "waiting table refuses the event: dead-lettered instead", isolation: isolation{
			relay: oneWorker,
			bad:   scheduledRefusedBy("courier_outbox_waiting"),
			want:  `PostgreSQL refused to record it: ERROR: new row for relation "courier_outbox_waiting" violates check constraint "operator_refuses"`,
		}},
		{name: "dead table refuses a waiting event whose retries ran out", isolation: isolation{
			relay: oneWorker,
			bad: func(r *rig) (uuid.UUID, error) {
				r.refuse("courier_outbox_dead")
				id := enqueue(r.t, r.pg, r.out, producer.Event{Topic: r.topic, Key: "k-refused", Type: "Bad", Payload: []byte(`{}`)})
				r.failEvent(id, "k-refused", kerr.CorruptMessage)
				return id, nil
			},
			// It waits, never due again, with the error, for an operator.
			status: producer.StatusFailed, retries: 8,
			want: `CORRUPT_MESSAGE; PostgreSQL refused to record it: ERROR: new row for relation "courier_outbox_dead" violates check constraint`,
		}},
		{name: "negative max_retries", isolation: isolation{
			bad: func(r *rig) (uuid.UUID, error) {
				return r.insert("topic, partition_key, event_type, payload, content_type, max_retries", "$2, 'k-bad', 'Bad', '{}', 'application/json', -3")
			},
			status: producer.StatusPublished, // the relay's MaxAttempts applies, not "given up on untried"
		}},
		{name: "schema that does not exist", notReady: func(t *testing.T, pg *testkit.PG) (string, string) {
			return pg.FreshSchema(t), "courier_outbox"
		}, isolation: isolation{want: "(missing: schema "}},
		{name: "outbox table that does not exist", notReady: func(t *testing.T, pg *testkit.PG) (string, string) {
			return pg.Schema, "orders_outbox"
		}, isolation: isolation{want: "orders_outbox does not exist (missing: table "}},
		{name: "outbox of version 1", notReady: func(t *testing.T, pg *testkit.PG) (string, string) {
			downTo(t, migrateOutbox(t, pg), pg, 3)
			return pg.Schema, "courier_outbox"
		}, isolation: isolation{want: "has the layout of an older courier (missing: table {schema}.courier_outbox_waiting, table "}},
		{name: "outbox of version 4", notReady: func(t *testing.T, pg *testkit.PG) (string, string) {
			downTo(t, migrateOutbox(t, pg), pg, 4)
			return pg.Schema, "courier_outbox"
		}, isolation: isolation{want: "has the layout of an older courier (missing: table {schema}.courier_outbox_activity)"}},
		{name: "outbox whose indexes by key are those of version 4", notReady: func(t *testing.T, pg *testkit.PG) (string, string) {
			migrateOutbox(t, pg)
			_, err := pg.Pool.Exec(context.Background(), `DROP INDEX courier_outbox_waiting_key;
				CREATE INDEX courier_outbox_waiting_key ON courier_outbox_waiting (topic, partition_key, seq)`)
			if err != nil {
				t.Fatal(err)
			}
			return pg.Schema, "courier_outbox"
		}, isolation: isolation{want: "has the layout of an older courier (missing: index {schema}.courier_outbox_waiting_key on a hash of topic and key)"}},
		{name: "outbox without migration 6 (activity)", notReady: func(t *testing.T, pg *testkit.PG) (string, string) {
			downTo(t, migrateOutbox(t, pg), pg, 5)
			return pg.Schema, "courier_outbox"
		}, isolation: isolation{want: "has the layout of an older courier (missing: table {schema}.courier_outbox_activity)"}},
		{name: "outbox table missing a column", notReady: func(t *testing.T, pg *testkit.PG) (string, string) {
			migrateOutbox(t, pg)
			if _, err := pg.Pool.Exec(context.Background(), "ALTER TABLE courier_outbox_waiting DROP COLUMN first_failed_at"); err != nil {
				t.Fatal(err)
			}
			return pg.Schema, "courier_outbox"
		}, isolation: isolation{want: "courier_outbox_waiting.first_failed_at"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.notReady != nil {
				runNotReady(t, c)
				return
			}
			runIsolation(t, c.isolation)
		})
	}
}

// insertWith writes an event of the healthy topic whose key is the SQL
// key and whose column is the SQL value.
func (r *rig) insertWith(key, column, value string) (uuid.UUID, error) {
	return r.insert("topic, partition_key, event_type, payload, content_type, "+column,
		"$2, "+key+", 'Bad', '{}', 'application/json', "+value)
}

// oneWorker runs the relay with one worker, whose share of the keys is
// every key: the bad event's batches hold healthy events of other keys.
func oneWorker(c *producer.RelayConfig) { c.Workers = 1 }

// incompressible is SQL for n bytes (n a multiple of 32) of text that
// PostgreSQL cannot compress: hex digits of md5 hashes.
func incompressible(n int) string {
	return fmt.Sprintf("(SELECT string_agg(md5(g::text), '') FROM generate_series(1, %d) g)", n/32)
}

// refuse makes tables, of the outbox, refuse the events of key k-refused
// with a CHECK constraint, as an operator's constraint or trigger might.
func (r *rig) refuse(tables ...string) {
	r.t.Helper()
	for _, table := range tables {
		_, err := r.pg.Pool.Exec(context.Background(), "ALTER TABLE "+table+
			" ADD CONSTRAINT operator_refuses CHECK (partition_key IS DISTINCT FROM 'k-refused')")
		if err != nil {
			r.t.Fatal(err)
		}
	}
}

// scheduledRefusedBy is a bad event of key k-refused due in an hour, which
// must wait, written once tables refuse that key.
func scheduledRefusedBy(tables ...string) func(r *rig) (uuid.UUID, error) {
	return func(r *rig) (uuid.UUID, error) {
		r.refuse(tables...)
		return r.insertWith("'k-refused'", "not_before", "now() + interval '1 hour'")
	}
}

// insertHeaders writes an event of the healthy topic whose headers column
// is the JSON text headers.
func (r *rig) insertHeaders(headers string) (uuid.UUID, error) {
	return r.insert("topic, partition_key, event_type, payload, content_type, headers",
		"$2, 'k-bad', 'Bad', '{}', 'application/json', '"+headers+"'::jsonb")
}

// failing enqueues an event of the healthy topic that its partition's
// broker answers with code whenever it is in the record batch.
func (r *rig) failing(code *kerr.Error) (uuid.UUID, error) {
	const key = "k-bad"
	id := enqueue(r.t, r.pg, r.out, producer.Event{Topic: r.topic, Key: key, Type: "Bad", Payload: []byte(`{}`)})
	r.failEvent(id, key, code)
	return id, nil
}

// migrateOutbox applies the outbox migrations (without testkit's view, so
// that a column can be dropped) and returns the migrator.
func migrateOutbox(t *testing.T, pg *testkit.PG) *migrations.Migrator {
	t.Helper()
	m, err := migrations.New(migrations.Config{Schema: pg.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(context.Background(), pg.Pool); err != nil {
		t.Fatal(err)
	}
	return m
}

// downTo reverts the outbox migrations of pg's schema after version.
func downTo(t *testing.T, m *migrations.Migrator, pg *testkit.PG, version int) {
	t.Helper()
	steps := len(migrations.All()) - version
	reverted, err := m.Down(context.Background(), pg.Pool, steps)
	if err != nil || len(reverted) != steps || reverted[steps-1].Version != version+1 {
		t.Fatalf("Down(%d) = %v, %v; want the migrations after version %d reverted", steps, reverted, err, version)
	}
}

// runNotReady checks that Run, on the outbox c.notReady prepares, returns
// at once an *OutboxNotReadyError naming what is missing (c.want, where
// {schema} is the outbox's schema) and the command that creates it.
func runNotReady(t *testing.T, c hostileRelayCase) {
	t.Helper()
	pg := testkit.Postgres(t)
	schema, table := c.notReady(t, pg)
	relay, err := producer.NewRelay(pg.Pool, producer.RelayConfig{Schema: schema, Table: table,
		Brokers: []string{"127.0.0.1:1"}, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = runToError(t, relay)
	var notReady *producer.OutboxNotReadyError
	if !errors.As(err, &notReady) || !errors.Is(err, producer.ErrOutboxNotReady) || notReady.Schema != schema || notReady.Table != table {
		t.Fatalf("Run = %v, want an *OutboxNotReadyError for %s.%s", err, schema, table)
	}
	for _, want := range []string{strings.ReplaceAll(c.want, "{schema}", schema), "courier migrate up --schema " + schema + " --table " + table} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run's error does not say %q:\n%v", want, err)
		}
	}
	t.Logf("Run refused to start: %v", err)
}

// TestTooLargeEnvelopeGoesRawThroughSarama: through the default publisher
// and a broker, an event of 700 KB of binary payload that the broker
// refuses for good is dead-lettered to <topic>.dlq raw: its envelope (the
// payload in base64, over 930 KB, with its JSON) passes Producer.MaxMessageBytes,
// so the publisher refuses it as too large, and the raw record, the
// original with the dlq_* headers, fits.
func TestTooLargeEnvelopeGoesRawThroughSarama(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	k := testkit.NewKafka(t, testkit.InProcess())
	topic := k.Topic(t, 1)
	k.CreateTopic(t, topic+".dlq", 1)
	k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.PolicyViolation, Count: -1})
	payload := incompressibleBytes(700 << 10)
	ev := producer.Event{Topic: topic, Key: "k-big", Type: "Blob", ContentType: "application/octet-stream", Payload: payload}
	id := enqueue(t, pg, out, ev)
	cfg := producer.RelayConfig{PublishDeadLetters: true, MaxAttempts: 1, Sarama: k.Config()}
	cfg.Sarama.Producer.MaxMessageBytes = 900 << 10
	relay := newRelay(t, pg, k, cfg)
	if res := runOnce(t, relay); res.DeadLettered != 1 {
		t.Fatalf("batch %+v, want the event dead-lettered", res)
	}
	letters := k.ReadAll(t, topic+".dlq")
	if len(letters) != 1 {
		t.Fatalf("%d dead letters on %s.dlq, want 1", len(letters), topic)
	}
	format := ""
	for _, h := range letters[0].Headers {
		if string(h.Key) == dlq.HeaderFormat {
			format = string(h.Value)
		}
	}
	if format != dlq.FormatRaw || !bytes.Equal(letters[0].Value, payload) || string(letters[0].Key) != "k-big" {
		t.Errorf("dead letter in format %q, key %q, %d bytes; want raw, k-big and the payload of %d bytes", format, letters[0].Key, len(letters[0].Value), len(payload))
	}
	var status string
	if err := pg.Pool.QueryRow(context.Background(), "SELECT status FROM courier_events WHERE id = $1", id).Scan(&status); err != nil || status != producer.StatusDeadLettered {
		t.Errorf("event status %q (%v), want dead_lettered", status, err)
	}
}

// incompressibleBytes is n pseudo-random bytes.
func incompressibleBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7919 + i/251)
	}
	return b
}
