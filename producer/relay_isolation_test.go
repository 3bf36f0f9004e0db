package producer_test

// The rig of the isolation tests and of TestHostileRelay: a relay on an
// in-process kfake cluster without automatic topic creation, a healthy
// topic whose events flow before, beside and after a bad event, and the
// checks that the bad event alone pays: it fails as it should, every other
// event is published within a bounded time, the breaker stays closed, and
// every event is accounted for.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// isolationPartitions is the healthy topic's partition count.
const isolationPartitions = 4

// isolationBound is how long healthy events may take to be published while
// a bad event fails beside them: well under the breaker's 30 s, so that a
// breaker opened by the bad event fails the test.
const isolationBound = 15 * time.Second

// rig is one isolation test's outbox, broker and relay.
type rig struct {
	t       *testing.T
	pg      *testkit.PG
	out     *producer.Outbox
	k       *testkit.Kafka
	topic   string // healthy, with isolationPartitions partitions
	metrics *recordedMetrics
	relay   *producer.Relay
	healthy []uuid.UUID // enqueued through Enqueue, all must be published
	others  []uuid.UUID // more events a test checks itself, counted too
}

// isolation describes a bad event and what must become of it.
type isolation struct {
	// kafka adds options to the kfake cluster, e.g. a small message.max.bytes.
	kafka []kfake.Opt
	// relay adjusts the relay's configuration.
	relay func(*producer.RelayConfig)
	// bad writes the bad event (SQL around Enqueue, a broker fault) and
	// returns its id. An error (PostgreSQL refused the row) must contain
	// want, and there is then no bad event.
	bad func(r *rig) (uuid.UUID, error)
	// want is in the bad event's last_error (or the refusal).
	want string
	// status is the bad event's end state; defaults to dead_lettered.
	status string
	// retries is how many failed attempts the bad event must have made
	// before the events enqueued after it go in: enough that a relay whose
	// breaker heard of them would have opened it (5 by default).
	retries int
	// held says the bad event meets the cluster's condition: it stays
	// pending, with the error and no attempt counted.
	held bool
}

// isolationConfig is the relay configuration of the rig: short backoffs and
// retries, so that a bad event fails fast, and the default breaker.
func isolationConfig() producer.RelayConfig {
	saramaCfg := producer.NewSaramaConfig()
	saramaCfg.Metadata.Retry.Max = 1
	saramaCfg.Metadata.Retry.Backoff = 20 * time.Millisecond
	saramaCfg.Producer.Retry.Max = 1
	saramaCfg.Producer.Retry.Backoff = 20 * time.Millisecond
	return producer.RelayConfig{
		Sarama:       saramaCfg,
		PollInterval: 20 * time.Millisecond,
		MaxAttempts:  8,
		Backoff:      backoff.Backoff{Base: 100 * time.Millisecond, Max: 400 * time.Millisecond},
		// A missing topic counts attempts after 200ms, not 5 minutes.
		MissingTopicGrace: 200 * time.Millisecond,
	}
}

// newRig starts a kfake cluster (auto topic creation off) with a healthy
// topic and a relay on a fresh outbox, not yet running.
func newRig(t *testing.T, c isolation) *rig {
	t.Helper()
	pg, out := setupMaxPayload(t, 4<<20)
	k := testkit.NewKafka(t, testkit.InProcess(), testkit.KfakeOptions(c.kafka...))
	r := &rig{t: t, pg: pg, out: out, k: k, topic: k.Topic(t, isolationPartitions), metrics: &recordedMetrics{}}
	cfg := isolationConfig()
	cfg.Hooks = []producer.Hook{r.metrics}
	if c.relay != nil {
		c.relay(&cfg)
	}
	r.relay = newRelay(t, pg, k, cfg)
	return r
}

// enqueueHealthy enqueues n events of the healthy topic over keys prefix-0
// to prefix-(keys-1), keys taking turns.
func (r *rig) enqueueHealthy(prefix string, n, keys int) {
	r.t.Helper()
	events := make([]producer.Event, n)
	for i := range events {
		key := fmt.Sprintf("%s-%d", prefix, i%keys)
		events[i] = producer.Event{Topic: r.topic, Key: key, Type: "Counted", Payload: fmt.Appendf(nil, `{"key":%q,"n":%d}`, key, i/keys)}
	}
	res, err := r.out.EnqueueBatch(context.Background(), r.pg.Pool, events)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, e := range res {
		r.healthy = append(r.healthy, e.ID)
	}
}

// insert writes one outbox row with SQL, as psql would, around Enqueue's
// checks. columns and values are SQL: $1 is a new event id (returned), $2
// the healthy topic.
func (r *rig) insert(columns, values string) (uuid.UUID, error) {
	id := uuid.Must(uuid.NewV7())
	args := []any{id}
	if strings.Contains(values, "$2") {
		args = append(args, r.topic)
	}
	_, err := r.pg.Pool.Exec(context.Background(), "INSERT INTO courier_outbox (id, "+columns+") VALUES ($1, "+values+")", args...)
	return id, err
}

// insertEvent writes a row whose topic, key and payload are SQL, with a
// type and content type of its own.
func (r *rig) insertEvent(topic, key, payload string) (uuid.UUID, error) {
	return r.insert("topic, partition_key, event_type, payload, content_type",
		topic+", "+key+", 'Bad', "+payload+", 'application/octet-stream'")
}

// row is an event's state, whichever table holds it.
func (r *rig) row(id uuid.UUID) eventRow { return rowOf(r.t, r.pg, id) }

// breakerOpened reports whether the relay's breaker ever opened.
func (r *rig) breakerOpened() bool {
	r.metrics.mu.Lock()
	defer r.metrics.mu.Unlock()
	return slices.Contains(r.metrics.states, producer.BreakerOpen)
}

// waitHealthy waits until every healthy event is published, in the table
// and on Kafka, within isolationBound.
func (r *rig) waitHealthy(c *consumer, when string) {
	r.t.Helper()
	ids := make([]string, len(r.healthy))
	for i, id := range r.healthy {
		ids[i] = id.String()
	}
	testkit.WaitFor(r.t, isolationBound, fmt.Sprintf("the %d healthy events %s to be published", len(ids), when), func() bool {
		return countRows(r.t, r.pg.Pool, "status = 'published' AND id::text = ANY($1)", ids) == len(ids)
	})
	got := distinctIDs(c.waitDistinct(len(ids), isolationBound))
	for _, id := range ids {
		if !got[id] {
			r.t.Fatalf("healthy event %s is marked published but never reached Kafka", id)
		}
	}
}

// run runs the isolation: healthy events before and beside the bad one,
// the relay, the bad event's failures, healthy events after them; then it
// checks the bad event's end state and error, that every healthy event was
// published, that the breaker never opened and that no event went missing.
// It returns the rig and the bad event's id (uuid.Nil when refused) for
// further checks.
func runIsolation(t *testing.T, c isolation) (*rig, uuid.UUID) {
	t.Helper()
	r := newRig(t, c)
	kafka := consume(t, r.k, r.topic)
	r.enqueueHealthy("before", 24, 12)
	bad, err := c.bad(r)
	switch {
	case err != nil && !strings.Contains(err.Error(), c.want):
		t.Fatalf("the bad row was refused with %v, want an error naming %q", err, c.want)
	case err != nil:
		t.Logf("refused as it should be: %v", err)
		bad = uuid.Nil
	}
	r.enqueueHealthy("beside", 24, 12)
	runRelay(t, r.relay)
	r.waitHealthy(kafka, "before and beside the bad one")
	if bad != uuid.Nil && c.retries > 0 {
		testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("the bad event to fail %d times", c.retries), func() bool {
			row := r.row(bad)
			return row.Attempts >= c.retries || row.Status == producer.StatusDeadLettered
		})
	}
	r.enqueueHealthy("after", 24, 12)
	r.waitHealthy(kafka, "after the bad one failed")

	want := c.status
	switch {
	case c.held:
		want = producer.StatusPending
	case want == "":
		want = producer.StatusDeadLettered
	}
	if bad != uuid.Nil {
		testkit.WaitFor(t, 60*time.Second, "the bad event to be "+want, func() bool { return r.row(bad).Status == want })
		row := r.row(bad)
		switch {
		case want != producer.StatusDeadLettered && c.want == "":
		case row.LastError == nil:
			t.Errorf("the bad event was %s with no error, want an error naming %q", want, c.want)
		case !strings.Contains(*row.LastError, c.want):
			t.Errorf("the bad event was %s with %q, want an error naming %q", want, *row.LastError, c.want)
		default:
			t.Logf("%s after %d attempt(s) with: %s", want, row.Attempts, *row.LastError)
		}
		if c.retries > 0 && row.Attempts < c.retries {
			t.Errorf("the bad event was given up on after %d attempts, want its retries (at least %d)", row.Attempts, c.retries)
		}
		if c.held && (row.Attempts != 0 || row.LastError == nil) {
			t.Errorf("the bad event has %d attempts and error %v, want it held: no attempt counted, the cluster's error kept", row.Attempts, row.LastError)
		}
	}
	if r.breakerOpened() || r.relay.Breaker() != producer.BreakerClosed {
		t.Errorf("the breaker opened (now %v) for a bad event while Kafka was up", r.relay.Breaker())
	}
	r.checkOnce(kafka)
	total := len(r.healthy) + len(r.others)
	if bad != uuid.Nil {
		total++
	}
	if n := countRows(t, r.pg.Pool, "true"); n != total {
		t.Errorf("%d events in the outbox, want %d: %d healthy, %d others and the bad one", n, total, len(r.healthy), len(r.others))
	}
	return r, bad
}

// checkOnce checks that every healthy event reached Kafka once: no batch
// that published it was retried after.
func (r *rig) checkOnce(c *consumer) {
	r.t.Helper()
	seen := map[string]int{}
	for _, m := range c.messages() {
		seen[headerValue(m, producer.HeaderID)]++
	}
	for _, id := range r.healthy {
		if n := seen[id.String()]; n != 1 {
			r.t.Errorf("healthy event %s reached Kafka %d times, want once", id, n)
		}
	}
}

// partitionOf is the partition the relay's default partitioner gives key
// among n.
func partitionOf(t testing.TB, topic, key string, n int32) int32 {
	t.Helper()
	p, err := sarama.NewMurmur2Partitioner(topic).Partition(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder(key)}, n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// failEvent makes the broker answer code to every produce request whose
// record batch for the partition of key holds the event id, for as long as
// the test runs: the other records of that partition go through when they
// are sent without it.
func (r *rig) failEvent(id uuid.UUID, key string, code *kerr.Error) {
	r.t.Helper()
	p := partitionOf(r.t, r.topic, key, isolationPartitions)
	mark := []byte(id.String())
	r.k.Cluster.Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Produce}, Topic: r.topic, Partitions: []int32{p}, Err: code, Count: -1,
		When: func(req kmsg.Request) bool {
			for _, t := range req.(*kmsg.ProduceRequest).Topics {
				for _, part := range t.Partitions {
					if t.Topic == r.topic && part.Partition == p && bytes.Contains(part.Records, mark) {
						return true
					}
				}
			}
			return false
		},
	})
}

// TestMissingTopicFailsAloneAndIsDeadLettered: an event for a topic that
// does not exist (the broker creates none) is held for MissingTopicGrace,
// then fails attempt after attempt with its backoff and is dead-lettered
// after MaxAttempts, naming the topic, while
// the events of a healthy topic enqueued before, beside and after it are
// all published, and the breaker never opens.
func TestMissingTopicFailsAloneAndIsDeadLettered(t *testing.T) {
	t.Parallel()
	missing := "t.missing-" + uuid.NewString()
	r, bad := runIsolation(t, isolation{
		bad:     func(r *rig) (uuid.UUID, error) { return r.insertEvent("'"+missing+"'", "'k-missing'", "'x'") },
		want:    missing,
		retries: 6,
	})
	row := r.row(bad)
	if row.Attempts != 8 || !strings.Contains(*row.LastError, "does not exist") {
		t.Errorf("missing topic's event %+v, want dead-lettered after its 8 attempts, saying the topic does not exist", row)
	}
	// The attempts were spread by the backoff: 100, 200, 400 ms, then 400.
	if span := row.LastAttemptAt.Sub(*rowFirstFailed(t, r, bad)); span < 100*(1+2+4+4+4+4+4)*time.Millisecond {
		t.Errorf("8 attempts within %v: the backoff was not applied", span)
	}
}

// rowFirstFailed is the event's first_failed_at.
func rowFirstFailed(t *testing.T, r *rig, id uuid.UUID) *time.Time {
	t.Helper()
	var at *time.Time
	if err := r.pg.Pool.QueryRow(context.Background(), "SELECT first_failed_at FROM courier_events WHERE id = $1", id).Scan(&at); err != nil || at == nil {
		t.Fatalf("first_failed_at of %s: %v, %v", id, at, err)
	}
	return at
}

// TestPoisonKeyFailsAloneOnItsPartition: the broker answers one event's
// partition with a refusal of the record that a retry may get past
// (CORRUPT_MESSAGE) whenever that event is in the batch. The event is retried and dead-lettered after
// its retries; every other key, on its partition and on the others, is
// published meanwhile; the breaker stays closed; and the later events of
// the poison's key keep the key's order rules: with the defaults they go
// out after the dead letter, in order; with HoldKeyOnDeadLetter they wait.
func TestPoisonKeyFailsAloneOnItsPartition(t *testing.T) {
	t.Parallel()
	for _, hold := range []bool{false, true} {
		t.Run(fmt.Sprintf("HoldKeyOnDeadLetter=%v", hold), func(t *testing.T) {
			t.Parallel()
			const key = "poison-key"
			var later []uuid.UUID
			r, bad := runIsolation(t, isolation{
				relay: func(c *producer.RelayConfig) { c.HoldKeyOnDeadLetter = hold },
				bad: func(r *rig) (uuid.UUID, error) {
					onPartition := 0
					p := partitionOf(t, r.topic, key, isolationPartitions)
					for i := range 12 {
						if partitionOf(t, r.topic, fmt.Sprintf("before-%d", i), isolationPartitions) == p {
							onPartition++
						}
					}
					if onPartition == 0 {
						t.Fatalf("no healthy key shares partition %d with the poison key: choose other keys", p)
					}
					ev := producer.Event{Topic: r.topic, Key: key, Type: "Counted", Payload: []byte(`{"key":"poison-key","n":0}`)}
					id := enqueue(t, r.pg, r.out, ev)
					r.failEvent(id, key, kerr.CorruptMessage)
					for n := 1; n <= 3; n++ {
						ev.Payload = fmt.Appendf(nil, `{"key":"poison-key","n":%d}`, n)
						later = append(later, enqueue(t, r.pg, r.out, ev))
					}
					r.others = later
					return id, nil
				},
				want:    "CRC",
				retries: 6,
			})
			if !hold {
				testkit.WaitFor(t, isolationBound, "the poison key's later events to be published", func() bool {
					return countRows(t, r.pg.Pool, "status = 'published' AND partition_key = $1", key) == len(later)
				})
				var order []string
				for _, m := range r.k.ReadAll(t, r.topic) {
					if string(m.Key) == key {
						order = append(order, headerValue(m, producer.HeaderID))
					}
				}
				if want := []string{later[0].String(), later[1].String(), later[2].String()}; !slices.Equal(order, want) {
					t.Errorf("the poison key's records on Kafka are %v, want its later events in order %v", order, want)
				}
				return
			}
			for _, id := range later {
				if row := r.row(id); row.Status != producer.StatusPending || row.Attempts != 0 {
					t.Errorf("with the key held, the later event %s is %+v, want pending and untried", id, row)
				}
			}
			if row := r.row(bad); row.Attempts != 8 {
				t.Errorf("poison %+v, want dead-lettered after 8 attempts", row)
			}
		})
	}
}

// TestBreakerOpensWhenNoBrokerAnswers: a refused connection is Kafka being
// unreachable, which opens the breaker after ConsecutiveFailures batches
// and counts no attempt. (TestBreakerOpensWhileBrokerIsDown does the same
// with every broker dropping its connections, through Run.)
func TestBreakerOpensWhenNoBrokerAnswers(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	clock := newFakeClock()
	id := enqueue(t, pg, out, orderCreated("o-1"))
	cfg := isolationConfig()
	cfg.Now = clock.Now
	cfg.Sarama.Metadata.Retry.Max = 0
	relay := newRelay(t, pg, &testkit.Kafka{Brokers: []string{"127.0.0.1:1"}}, cfg) // a closed port
	for i := range producer.DefaultBreakerFailures {
		if res := runOnce(t, relay); res.Deferred != 1 {
			t.Fatalf("batch %d: %+v, want the event deferred", i+1, res)
		}
		clock.Advance(time.Second)
	}
	if relay.Breaker() != producer.BreakerOpen {
		t.Fatalf("breaker %v after %d batches without a broker, want open", relay.Breaker(), producer.DefaultBreakerFailures)
	}
	if res := runOnce(t, relay); !res.BreakerOpen || res.Claimed != 0 {
		t.Fatalf("with the breaker open the relay did %+v, want nothing claimed", res)
	}
	if row := rowOf(t, pg, id); row.Attempts != 0 || row.Status != producer.StatusPending {
		t.Fatalf("row %+v, want pending with no attempt counted", row)
	}
}

// TestRunFailsFastOnAnOutboxNotReady: Run pointed at an outbox that is not
// there returns at once an *OutboxNotReadyError that names what is missing
// and the migrate command, and RunOnce's error matches it too.
func TestRunFailsFastOnAnOutboxNotReady(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t) // the schema exists, the tables do not
	relay, err := producer.NewRelay(pg.Pool, producer.RelayConfig{Schema: pg.Schema, Table: "orders_outbox",
		Brokers: []string{"127.0.0.1:1"}, Logger: testkit.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	err = runToError(t, relay)
	var notReady *producer.OutboxNotReadyError
	if !errors.As(err, &notReady) || !errors.Is(err, producer.ErrOutboxNotReady) || notReady.Schema != pg.Schema ||
		notReady.Table != "orders_outbox" || notReady.Missing != "table "+pg.Schema+".orders_outbox" {
		t.Fatalf("Run = %#v, want an *OutboxNotReadyError for the missing table", err)
	}
	for _, want := range []string{"courier migrate up --schema " + pg.Schema + " --table orders_outbox", "migrations.New", "does not exist"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run's error %q does not say %q", err, want)
		}
	}
	if _, err := relay.RunOnce(context.Background()); !errors.Is(err, producer.ErrOutboxNotReady) {
		t.Errorf("RunOnce = %v, want an error matching ErrOutboxNotReady", err)
	}
}

// runToError runs r.Run and returns its error, failing the test when Run
// does not return within 10s.
func runToError(t *testing.T, r *producer.Relay) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		cancel()
		<-done
		t.Fatal("Run did not return within 10s on an outbox that is not ready")
		return nil
	}
}

// TestRelaySaysOnceThatItCannotReachKafka: with no broker answering, the
// relay logs once (not once a batch) that it cannot reach Kafka, naming
// the brokers, and once that Kafka answers again when a record goes
// through.
func TestRelaySaysOnceThatItCannotReachKafka(t *testing.T) {
	t.Parallel()
	pg, out := setup(t)
	clock := newFakeClock()
	enqueue(t, pg, out, orderCreated("o-1"))
	logs := &testkit.Buffer{}
	cfg := isolationConfig()
	cfg.Now = clock.Now
	cfg.Sarama.Metadata.Retry.Max = 0
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	relay := newRelay(t, pg, &testkit.Kafka{Brokers: []string{"127.0.0.1:1", "127.0.0.1:2"}}, cfg) // closed ports
	for range 3 {
		if res := runOnce(t, relay); res.Deferred != 1 {
			t.Fatalf("%+v, want the event deferred", res)
		}
		clock.Advance(time.Second)
	}
	said := func(msg string) []string {
		var found []string
		for _, l := range logs.Lines() {
			if strings.Contains(l, msg) {
				found = append(found, l)
			}
		}
		return found
	}
	down := said("cannot reach Kafka")
	if len(down) != 1 || !strings.Contains(down[0], "brokers=127.0.0.1:1,127.0.0.1:2") || !strings.Contains(down[0], "none lost") {
		t.Fatalf("after 3 batches without a broker the relay said %q, want one line naming both brokers", down)
	}

	// Through a Publisher that fails as an unreachable broker, then works.
	pub := &fakePublisher{}
	pub.setFail(func(*record.Record) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	})
	logs2 := &testkit.Buffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs2, nil))
	cfg.Publisher = pub
	relay2 := newRelay(t, pg, nil, cfg)
	clock.Advance(time.Minute)
	if res := runOnce(t, relay2); res.Deferred != 1 {
		t.Fatalf("%+v, want the event deferred", res)
	}
	pub.setFail(nil)
	clock.Advance(time.Minute)
	if res := runOnce(t, relay2); res.Published != 1 {
		t.Fatalf("%+v, want the event published", res)
	}
	logs = logs2
	if down, up := said("cannot reach Kafka"), said("Kafka answers again"); len(down) != 1 || len(up) != 1 ||
		!strings.Contains(down[0], "RelayConfig.Publisher") {
		t.Errorf("the relay said %q and %q, want one line each, the first naming the Publisher", down, up)
	}
}
