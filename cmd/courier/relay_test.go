package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// TestRelaySIGTERMFinishesTheBatchInFlight runs the built binary, holds the
// produce request of its batch in the broker, sends SIGTERM while it is
// held, and then lets it through: the relay must record the batch, exit 0,
// and have published every event of it exactly once, as recorded. /healthz
// and /metrics answer while it runs; while it stops, /livez answers 200
// (its loop still runs) and /readyz and /healthz 503.
func TestRelaySIGTERMFinishesTheBatchInFlight(t *testing.T) {
	t.Parallel()
	const events, keys = 20, 4
	o := newOutboxDB(t)
	k := testkit.NewKafka(t, testkit.InProcess()) // the test holds the broker's produce requests
	topic := k.Topic(t, 2)
	held, release := holdFirstProduce(t, k, topic)
	app := o.Schema + "_relay"

	p := startRelayProcess(t, "relay", "--database-url", withAppName(t, o.URL, app), "--schema", o.Schema,
		"--brokers", strings.Join(k.Brokers, ","), "--metrics-addr", "127.0.0.1:0", "--log-format", "json",
		"--workers", "1", "--batch-size", "100", "--shutdown-timeout", "30s")
	base := "http://" + waitLog(t, &p.stderr, "serving metrics")["addr"].(string)
	waitLog(t, &p.stderr, "relay started")
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK || !strings.Contains(body, `"status":"ok"`) || !strings.Contains(body, `"breaker":"closed"`) {
		t.Errorf("GET /healthz while running: %d %s", code, body)
	}
	if code, body := httpGet(t, base+"/metrics"); code != http.StatusOK || !strings.Contains(body, "courier_outbox_claims_total") || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET /metrics while running: %d, want the relay's and Go's metrics\n%s", code, body)
	}

	var batch []producer.Event
	for i := range events {
		ev := event(topic, fmt.Sprintf("order-%d", i%keys), "OrderCreated")
		ev.Payload = fmt.Appendf(nil, `{"order":%d}`, i)
		batch = append(batch, ev)
	}
	ids := o.enqueue(t, batch...) // one transaction: one NOTIFY, one claim
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatalf("the relay's batch never reached the broker\n%s", p.stderr.String())
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitLog(t, &p.stderr, "stopping: the batch in flight finishes, then the relay exits")
	if !p.running() {
		t.Fatalf("the relay exited before its batch was acknowledged\n%s", p.stderr.String())
	}
	if n := o.count(t, "status = 'published'"); n != 0 {
		t.Fatalf("%d events published while the broker held the batch", n)
	}
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "stopping") {
		t.Errorf("GET /healthz while stopping: %d %s, want 503", code, body)
	}
	if code, body := httpGet(t, base+"/livez"); code != http.StatusOK {
		t.Errorf("GET /livez while the batch in flight finishes: %d %s, want 200 (the relay's loop still runs)", code, body)
	}
	if code, body := httpGet(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "stopping") {
		t.Errorf("GET /readyz while stopping: %d %s, want 503", code, body)
	}
	release()

	if code := p.exitCode(t, 30*time.Second); code != exitOK {
		t.Fatalf("exit %d after SIGTERM, want 0\n%s", code, p.stderr.String())
	}
	if n := o.count(t, "status = 'published'"); n != events {
		t.Errorf("%d of %d events published after the batch finished", n, events)
	}
	if n := o.count(t, "status <> 'published'"); n != 0 {
		t.Errorf("%d events left pending, failed or dead-lettered", n)
	}
	if !strings.Contains(p.stdout.String(), fmt.Sprintf("%d published, 0 publish failure(s), 0 dead-lettered", events)) {
		t.Errorf("summary on stdout: %q", p.stdout.String())
	}
	checkStopLogged(t, &p.stderr)
	checkPublishedAsRecorded(t, topicRecords(t, k, topic, events), batch, ids)
	testkit.WaitFor(t, 15*time.Second, "the relay's PostgreSQL sessions to end", func() bool {
		var n int
		err := o.Pool.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE application_name IN ($1, $1 || '-listener')", app).Scan(&n)
		return err == nil && n == 0
	})
}

// TestRelayPublishesARequeuedDeadLetter: the broker refuses an event for
// good, the relay (in-process) dead-letters it, `courier outbox requeue`
// sends it back, and the relay publishes it. Once the relay stops, none of
// its goroutines is left. Not parallel: it counts goroutines.
func TestRelayPublishesARequeuedDeadLetter(t *testing.T) {
	o := newOutboxDB(t)
	k := testkit.NewKafka(t, testkit.InProcess()) // the test injects a refusal
	topic := k.Topic(t, 1)
	k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.PolicyViolation})
	ev := event(topic, "order-1", "OrderCreated")
	id := o.enqueue(t, ev)[0]
	before := goleak.IgnoreCurrent()

	r := startRelay(t, append(o.flags(), "--brokers", strings.Join(k.Brokers, ","), "--metrics-addr", "127.0.0.1:0",
		"--log-format", "json", "--poll-interval", "50ms")...)
	testkit.WaitFor(t, 30*time.Second, "the refused event to be dead-lettered", func() bool { return o.status(t, id) == "dead_lettered" })
	waitLog(t, &r.stderr, "event dead-lettered")

	var page listJSON
	code, out, errOut := o.cli(t, "list", "--error", "configured policy", "--output", "json")
	decode(t, code, out, errOut, &page)
	if len(page.Events) != 1 || page.Events[0].ID != id || page.Events[0].Status != "dead_lettered" {
		t.Fatalf("outbox list --error: %+v, want the dead letter with the broker's reason", page)
	}
	if code, out, errOut = o.cli(t, "requeue", "--id", id.String()); code != exitOK || out != "requeued 1 event(s)\n" {
		t.Fatalf("outbox requeue --id: exit %d\n%s%s", code, out, errOut)
	}
	checkPublishedAsRecorded(t, topicRecords(t, k, topic, 1), []producer.Event{ev}, []uuid.UUID{id})
	testkit.WaitFor(t, 30*time.Second, "the requeued event to be recorded as published", func() bool { return o.status(t, id) == "published" })
	if code, body := httpGet(t, "http://"+waitLog(t, &r.stderr, "serving metrics")["addr"].(string)+"/metrics"); code != http.StatusOK ||
		!strings.Contains(body, fmt.Sprintf(`courier_outbox_dead_lettered_total{topic=%q} 1`, topic)) ||
		!strings.Contains(body, fmt.Sprintf(`courier_outbox_published_total{topic=%q} 1`, topic)) {
		t.Errorf("GET /metrics: %d, want one dead letter and one publish of %s\n%s", code, topic, body)
	}

	if code := r.stop(t); code != exitOK {
		t.Fatalf("relay exit %d after its context ended, want 0\n%s", code, r.stderr.String())
	}
	if !strings.Contains(r.stdout.String(), "1 published, 1 publish failure(s), 1 dead-lettered") {
		t.Errorf("summary: %q", r.stdout.String())
	}
	checkStopLogged(t, &r.stderr)
	// kfake serves the connections of the test's own clients a moment longer.
	goleak.VerifyNone(t, append(testkit.KfakeConnections(), before)...)
}

// TestRelayTakesFlagsFromEnvironment: every option comes from COURIER_*
// variables, and a flag on the command line wins over its variable.
func TestRelayTakesFlagsFromEnvironment(t *testing.T) {
	o := newOutboxDB(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	ev := event(topic, "order-1", "OrderCreated")
	ids := o.enqueue(t, ev)
	for name, value := range map[string]string{
		"COURIER_DATABASE_URL": o.URL, "COURIER_SCHEMA": o.Schema, "COURIER_BROKERS": strings.Join(k.Brokers, ","),
		"COURIER_SOURCE": "env-service", "COURIER_LOG_FORMAT": "json", "COURIER_WORKERS": "3", "COURIER_OUTPUT": "json",
		"COURIER_NO_IDEMPOTENCE": "true",
	} {
		t.Setenv(name, value)
	}

	r := startRelay(t, "--workers", "1")
	started := waitLog(t, &r.stderr, "relay started")
	if started["workers"] != 1.0 || started["source"] != "env-service" || started["table"] != o.Schema+".courier_outbox" || started["idempotent"] != false {
		t.Errorf("relay started with %v, want --workers 1 over COURIER_WORKERS=3 and the rest from the environment", started)
	}
	records := topicRecords(t, k, topic, 1)
	checkPublishedAsRecorded(t, records, []producer.Event{ev}, ids)
	if source := header(records[0], "ce_source"); source != "env-service" {
		t.Errorf("ce_source %q, want COURIER_SOURCE's env-service", source)
	}
	testkit.WaitFor(t, 30*time.Second, "the event to be recorded as published", func() bool { return o.status(t, ids[0]) == "published" })
	if code := r.stop(t); code != exitOK {
		t.Fatalf("relay exit %d, want 0\n%s", code, r.stderr.String())
	}
	var summary relaySummary
	if err := json.Unmarshal([]byte(r.stdout.String()), &summary); err != nil || summary.Published != 1 {
		t.Errorf("COURIER_OUTPUT=json summary %+v (%v):\n%s", summary, err, r.stdout.String())
	}

	t.Setenv("COURIER_BATCH_SIZE", "many")
	if code, _, errOut := courier(t, "relay"); code != exitUsage || !strings.Contains(errOut, `COURIER_BATCH_SIZE="many"`) {
		t.Errorf("COURIER_BATCH_SIZE=many: exit %d, want %d naming the variable\n%s", code, exitUsage, errOut)
	}
}

func TestRelayMissingTableNamesMigrate(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	code, out, errOut := courier(t, "relay", "--database-url", pg.URL, "--schema", pg.Schema, "--table", "orders_outbox", "--brokers", "127.0.0.1:1")
	if code != exitFailure || !strings.Contains(errOut, "courier migrate up --schema "+pg.Schema+" --table orders_outbox") {
		t.Errorf("relay without the outbox table: exit %d, want %d naming `courier migrate`\n%s%s", code, exitFailure, out, errOut)
	}
	if want := "(in postgres@127.0.0.1:5432/test)"; !strings.Contains(errOut, want) {
		t.Errorf("relay without the outbox table does not say where it looked, %s:\n%s", want, errOut)
	}
}

// TestMissingTableNamesTheDatabaseLibpqChose: without --database-url the
// PG* variables choose the database; a missing table then names it and
// says that --database-url was not set.
func TestMissingTableNamesTheDatabaseLibpqChose(t *testing.T) {
	pg := testkit.Postgres(t)
	t.Setenv("COURIER_DATABASE_URL", "")
	t.Setenv("PGHOST", "127.0.0.1")
	t.Setenv("PGPORT", "5432")
	t.Setenv("PGUSER", "postgres")
	t.Setenv("PGDATABASE", "test")
	for _, args := range [][]string{
		{"relay", "--schema", pg.Schema, "--table", "orders_outbox", "--brokers", "127.0.0.1:1"},
		{"outbox", "stats", "--schema", pg.Schema, "--table", "orders_outbox"},
	} {
		code, _, errOut := courier(t, args...)
		if code != exitFailure || !strings.Contains(errOut, "in postgres@127.0.0.1:5432/test; --database-url (COURIER_DATABASE_URL) is not set") {
			t.Errorf("courier %v without --database-url: exit %d, want %d naming the database libpq chose\n%s", args, code, exitFailure, errOut)
		}
	}
}

func TestRelayUnreachableKafka(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	code, out, errOut := courier(t, append([]string{"relay", "--brokers", "127.0.0.1:1"}, o.flags()...)...)
	if code != exitFailure || !strings.Contains(errOut, "cannot reach Kafka at 127.0.0.1:1") || strings.Contains(errOut, "relay started") {
		t.Errorf("relay with no broker: exit %d, want %d saying Kafka cannot be reached\n%s%s", code, exitFailure, out, errOut)
	}
}

func TestRelayUnreachableDatabaseHidesPassword(t *testing.T) {
	t.Parallel()
	code, out, errOut := courier(t, "relay", "--database-url", "postgres://app:s3cr3t@127.0.0.1:1/shop?connect_timeout=2", "--brokers", "127.0.0.1:1")
	if code != exitFailure || !strings.Contains(errOut, "is it running") || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("relay with no database: exit %d, want %d saying what to check\n%s", code, exitFailure, errOut)
	}
	if strings.Contains(out+errOut, "s3cr3t") {
		t.Errorf("the password was printed:\n%s%s", out, errOut)
	}
}

// TestRelayNeverPrintsTheDatabasePassword: the start-up log names the
// database without the password, wherever the URL holds it; a URL that
// cannot be parsed is not echoed with its password either.
func TestRelayNeverPrintsTheDatabasePassword(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{"postgres://app:s3cr3t@db:5433/shop", "postgres://app@db:5433/shop?password=s3cr3t", "host=db port=5433 user=app password=s3cr3t dbname=shop"} {
		cfg, err := pgx.ParseConfig(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := databaseName(cfg); got != "app@db:5433/shop" {
			t.Errorf("databaseName(%q) = %q, want app@db:5433/shop", raw, got)
		}
	}
	for _, raw := range []string{"postgres://app:s3cr3t@db:5433/shop?sslmode=sideways", "host=db password=s3cr3t sslmode=sideways"} {
		code, out, errOut := courier(t, "relay", "--database-url", raw)
		if code != exitUsage || !strings.Contains(errOut, "--database-url") || strings.Contains(out+errOut, "s3cr3t") {
			t.Errorf("relay --database-url %q: exit %d, want %d naming the flag without the password\n%s%s", raw, code, exitUsage, out, errOut)
		}
	}
}

// TestRelayUsageErrorsExitTwo: bad options fail before anything connects
// (the URL points nowhere) with exit code 2.
func TestRelayUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	nowhere := []string{"--database-url", "postgres://app:s3cr3t@127.0.0.1:1/shop?connect_timeout=1", "--brokers", "127.0.0.1:1"}
	for _, args := range [][]string{
		{"extra"},
		{"--workers", "0"},
		{"--workers", "65"},
		{"--batch-size", "0"},
		{"--batch-size", "1125899906842624"},
		{"--max-attempts", "0"},
		{"--max-attempts", "1099511627776"},
		{"--poll-interval", "0s"},
		{"--poll-interval", "1ns"},
		{"--probe-interval", "2h"},
		{"--cleanup-interval", "48h"},
		{"--shutdown-timeout", "8760h"},
		{"--retention", "1000000h"},
		{"--shutdown-timeout", "-1s"},
		{"--cleanup-interval", "soon"},
		{"--retention", "-1h"},
		{"--missing-topic-grace", "25h"},
		{"--missing-topic-grace", "-25h"},
		{"--log-format", "xml"},
		{"--log-level", "loud"},
		{"--output", "yaml"},
		{"--schema", "Bad-Schema"},
		{"--database-url", "postgres://%zz"}, // the last of a repeated flag wins
		{"--brokers", " , "},
		{"--no-such-flag"},
	} {
		code, out, errOut := courier(t, append(append([]string{"relay"}, nowhere...), args...)...)
		if code != exitUsage || !strings.Contains(errOut, "courier --help") || strings.Contains(out+errOut, "s3cr3t") {
			t.Errorf("courier relay %v: exit %d, want %d with a pointer to --help and no password\n%s%s", args, code, exitUsage, out, errOut)
		}
	}
	if code, out, _ := courier(t, "relay", "--help"); code != exitOK || !strings.Contains(out, "Examples:\n  courier relay") || !strings.Contains(out, "COURIER_BATCH_SIZE") {
		t.Errorf("courier relay --help: exit %d, want examples and the environment variables\n%s", code, out)
	}
}

// TestRelayRenamedMaxRetries: the old --max-retries and
// COURIER_MAX_RETRIES still set --max-attempts, each saying in one line on
// stderr what replaced it; --max-attempts wins over the old variable, and
// --help shows only the new name.
func TestRelayRenamedMaxRetries(t *testing.T) {
	nowhere := []string{"relay", "--database-url", "postgres://app@127.0.0.1:1/shop?connect_timeout=1", "--brokers", "127.0.0.1:1"}
	code, _, errOut := courier(t, append(nowhere, "--max-retries", "0")...)
	if code != exitUsage || !strings.Contains(errOut, "--max-retries is deprecated, use --max-attempts\n") || !strings.Contains(errOut, "--max-attempts 0") {
		t.Errorf("--max-retries 0: exit %d, want %d naming --max-attempts\n%s", code, exitUsage, errOut)
	}
	t.Setenv("COURIER_MAX_RETRIES", "0")
	code, _, errOut = courier(t, nowhere...)
	if code != exitUsage || !strings.Contains(errOut, "COURIER_MAX_RETRIES is deprecated, use COURIER_MAX_ATTEMPTS\n") || !strings.Contains(errOut, "--max-attempts 0") {
		t.Errorf("COURIER_MAX_RETRIES=0: exit %d, want %d naming COURIER_MAX_ATTEMPTS\n%s", code, exitUsage, errOut)
	}
	code, _, errOut = courier(t, append(nowhere, "--max-attempts", "-1")...)
	if code != exitUsage || strings.Contains(errOut, "deprecated") || !strings.Contains(errOut, "--max-attempts -1") {
		t.Errorf("--max-attempts -1 beside COURIER_MAX_RETRIES=0: exit %d, want %d for --max-attempts -1 alone\n%s", code, exitUsage, errOut)
	}
	if code, out, _ := courier(t, "relay", "--help"); code != exitOK || strings.Contains(out, "max-retries") || !strings.Contains(out, "COURIER_MAX_ATTEMPTS") {
		t.Errorf("courier relay --help: exit %d, want --max-attempts and not --max-retries\n%s", code, out)
	}
}

// checkStopLogged checks that the relay logged that it was stopping, and
// then that it stopped.
func checkStopLogged(t *testing.T, logs *testkit.Buffer) {
	t.Helper()
	stopping := strings.Index(logs.String(), `"msg":"stopping: `)
	if stopped := strings.Index(logs.String(), `"msg":"relay stopped"`); stopping < 0 || stopped < stopping {
		t.Errorf("the relay did not log \"stopping\" before \"relay stopped\":\n%s", logs.String())
	}
}

// holdFirstProduce makes the in-process broker hold the first produce
// request to topic until release is called (at the latest when the test
// ends); held is closed when that request arrives.
func holdFirstProduce(t *testing.T, k *testkit.Kafka, topic string) (held <-chan struct{}, release func()) {
	t.Helper()
	arrived, released := make(chan struct{}), make(chan struct{})
	var holdOnce, releaseOnce sync.Once
	release = func() { releaseOnce.Do(func() { close(released) }) }
	t.Cleanup(release)
	k.Cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == topic {
				holdOnce.Do(func() {
					close(arrived)
					k.Cluster.SleepControl(func() { <-released })
				})
				break
			}
		}
		return nil, nil, false // then the broker handles it
	})
	return arrived, release
}

// topicRecords waits until topic holds n records and returns them, failing
// the test if it holds more.
func topicRecords(t *testing.T, k *testkit.Kafka, topic string, n int) []*sarama.ConsumerMessage {
	t.Helper()
	var records []*sarama.ConsumerMessage
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d records on %s", n, topic), func() bool {
		records = k.ReadAll(t, topic)
		return len(records) >= n
	})
	if len(records) != n {
		t.Errorf("%d records on %s, want exactly %d", len(records), topic, n)
	}
	return records
}

// checkPublishedAsRecorded checks that the records are the events with
// these ids, each once, byte for byte, and that each key's records are in
// enqueue order.
func checkPublishedAsRecorded(t *testing.T, records []*sarama.ConsumerMessage, events []producer.Event, ids []uuid.UUID) {
	t.Helper()
	want := map[string]producer.Event{}
	order := map[string]int{}
	for i, id := range ids {
		want[id.String()] = events[i]
		order[id.String()] = i
	}
	seen := map[string]bool{}
	lastOfKey := map[string]int{}
	for _, m := range records {
		id := header(m, "ce_id")
		ev, ok := want[id]
		switch {
		case !ok:
			t.Errorf("record with ce_id %q is none of the events", id)
			continue
		case seen[id]:
			t.Errorf("event %s published twice", id)
		}
		seen[id] = true
		if string(m.Key) != ev.Key || !bytes.Equal(m.Value, ev.Payload) || header(m, "ce_type") != ev.Type {
			t.Errorf("event %s published as key %q value %q type %q, want %q %q %q", id, m.Key, m.Value, header(m, "ce_type"), ev.Key, ev.Payload, ev.Type)
		}
		if last, ok := lastOfKey[ev.Key]; ok && order[id] < last {
			t.Errorf("key %s: event %d published after event %d", ev.Key, order[id], last)
		}
		lastOfKey[ev.Key] = order[id]
	}
	if len(seen) != len(ids) {
		t.Errorf("%d of %d events on Kafka", len(seen), len(ids))
	}
}

// header returns the value of a record's header, or "".
func header(m *sarama.ConsumerMessage, name string) string {
	for _, h := range m.Headers {
		if string(h.Key) == name {
			return string(h.Value)
		}
	}
	return ""
}

// withAppName sets application_name on a database URL, so that the test
// can find the relay's sessions.
func withAppName(t *testing.T, raw, app string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// httpGet fetches a URL without keeping the connection, and returns the
// status and body.
func httpGet(t *testing.T, rawURL string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(rawURL)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	return resp.StatusCode, string(body)
}

// waitLog waits for the JSON log line whose msg is msg and returns its
// fields.
func waitLog(t *testing.T, logs *testkit.Buffer, msg string) map[string]any {
	t.Helper()
	var found map[string]any
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("the log line %q", msg), func() bool {
		for line := range strings.SplitSeq(logs.String(), "\n") {
			var fields map[string]any
			if json.Unmarshal([]byte(line), &fields) == nil && fields["msg"] == msg {
				found = fields
				return true
			}
		}
		return false
	})
	return found
}

// relayProcess is the courier binary running as a child process.
type relayProcess struct {
	cmd            *exec.Cmd
	stdout, stderr testkit.Buffer
	exited         chan struct{} // closed once the process is reaped
}

// startRelayProcess runs the courier binary with args; it is killed when
// the test ends, and its stderr logged if the test failed.
func startRelayProcess(t *testing.T, args ...string) *relayProcess {
	t.Helper()
	return startProcessWithEnv(t, nil, args...)
}

// startProcessWithEnv is startRelayProcess with env added to the
// environment.
func startProcessWithEnv(t *testing.T, env []string, args ...string) *relayProcess {
	t.Helper()
	p := &relayProcess{cmd: exec.Command(testkit.CourierBinary(t), args...), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if p.running() {
			_ = p.cmd.Process.Kill()
		}
		<-p.exited
		if t.Failed() {
			t.Logf("courier %v:\n%s%s", args, p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// running reports whether the process has not exited yet.
func (p *relayProcess) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// exitCode waits up to timeout for the process to exit and returns its exit
// code.
func (p *relayProcess) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("courier did not exit within %v", timeout)
		return -1
	}
}

// relayRun is `courier relay` running in-process until stop.
type relayRun struct {
	stdout, stderr testkit.Buffer
	cancel         context.CancelFunc
	code           chan int
	stopped        bool
}

// startRelay runs `courier relay <args>` in-process; the test's end stops
// it if stop did not.
func startRelay(t *testing.T, args ...string) *relayRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &relayRun{cancel: cancel, code: make(chan int, 1)}
	go func() { r.code <- run(ctx, append([]string{"relay"}, args...), &r.stdout, &r.stderr) }()
	t.Cleanup(func() {
		if !r.stopped {
			r.stop(t)
		}
		if t.Failed() {
			t.Logf("courier relay %v:\n%s%s", args, r.stdout.String(), r.stderr.String())
		}
	})
	return r
}

// stop ends the relay's context, as SIGTERM does, and returns its exit code.
func (r *relayRun) stop(t *testing.T) int {
	t.Helper()
	r.stopped = true
	r.cancel()
	select {
	case code := <-r.code:
		return code
	case <-time.After(60 * time.Second):
		t.Fatal("courier relay did not return within 60s of its context ending")
		return -1
	}
}
