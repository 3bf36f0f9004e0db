package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// otlpCollector is an OTLP/HTTP trace endpoint that keeps what it is sent.
type otlpCollector struct {
	mu       sync.Mutex
	requests []*collectortrace.ExportTraceServiceRequest
	srv      *httptest.Server
}

func newOTLPCollector(t *testing.T) *otlpCollector {
	c := &otlpCollector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		req := &collectortrace.ExportTraceServiceRequest{}
		if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, req) != nil {
			http.Error(w, "not an OTLP trace export", http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.requests = append(c.requests, req)
		c.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(nil)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// spans returns the span ids of the spans received by name, and the
// service names of their resources.
func (c *otlpCollector) spans() (byName map[string][]string, services map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	byName, services = map[string][]string{}, map[string]bool{}
	for _, req := range c.requests {
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					services[a.GetValue().GetStringValue()] = true
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					byName[s.Name] = append(byName[s.Name], hex.EncodeToString(s.SpanId))
				}
			}
		}
	}
	return byName, services
}

// TestRelayExportsSpansOverOTLP: with --otlp-endpoint the CLI relay sends
// its spans to the collector over OTLP/HTTP, as the service courier-relay,
// by the time it has stopped; the record it published carries its create
// span's id in its traceparent.
func TestRelayExportsSpansOverOTLP(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	collector := newOTLPCollector(t)
	o.enqueue(t, event(topic, "order-1", "OrderCreated"))

	r := startRelay(t, append(o.flags(), "--brokers", strings.Join(k.Brokers, ","), "--log-format", "json",
		"--otlp-endpoint", collector.srv.URL)...)
	records := topicRecords(t, k, topic, 1)
	if started := waitLog(t, &r.stderr, "relay started"); started["tracing"] != collector.srv.URL {
		t.Errorf("start log says tracing %v, want %s", started["tracing"], collector.srv.URL)
	}
	if code := r.stop(t); code != exitOK {
		t.Fatalf("relay exit %d\n%s", code, r.stderr.String())
	}
	spans, services := collector.spans()
	if len(spans["send"]) != 1 || len(spans["create "+topic]) != 1 || !services["courier-relay"] {
		t.Fatalf("the collector received spans %v of services %v, want a send and a create %s span of courier-relay", spans, services, topic)
	}
	var traceParent string
	for _, h := range records[0].Headers {
		if string(h.Key) == producer.HeaderTraceParent {
			traceParent = string(h.Value)
		}
	}
	if parts := strings.Split(traceParent, "-"); len(parts) != 4 || parts[2] != spans["create "+topic][0] {
		t.Errorf("the record's traceparent %q does not name the create span %s", traceParent, spans["create "+topic][0])
	}
}

// TestRelayWithoutOTLPEndpointExportsNothing: without --otlp-endpoint and
// the OTEL_EXPORTER_OTLP_* variables, the relay says tracing is off and
// publishes the event with no traceparent.
func TestRelayWithoutOTLPEndpointExportsNothing(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	o := newOutboxDB(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	o.enqueue(t, event(topic, "order-1", "OrderCreated"))
	r := startRelay(t, append(o.flags(), "--brokers", strings.Join(k.Brokers, ","), "--log-format", "json")...)
	records := topicRecords(t, k, topic, 1)
	if started := waitLog(t, &r.stderr, "relay started"); started["tracing"] != "off" {
		t.Errorf("start log says tracing %v, want off", started["tracing"])
	}
	for _, h := range records[0].Headers {
		if string(h.Key) == producer.HeaderTraceParent {
			t.Errorf("the record carries a traceparent %q without tracing", h.Value)
		}
	}
}

// TestRelayTracesToTheEnvironmentsEndpoint: OTEL_EXPORTER_OTLP_ENDPOINT
// alone turns tracing on, as for any OpenTelemetry SDK, and the start log
// names it without its password.
func TestRelayTracesToTheEnvironmentsEndpoint(t *testing.T) {
	collector := newOTLPCollector(t)
	withPassword := strings.Replace(collector.srv.URL, "http://", "http://courier:s3cret@", 1)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", withPassword)
	t.Setenv("OTEL_SERVICE_NAME", "orders-relay")
	o := newOutboxDB(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	o.enqueue(t, event(topic, "order-1", "OrderCreated"))
	r := startRelay(t, append(o.flags(), "--brokers", strings.Join(k.Brokers, ","), "--log-format", "json")...)
	topicRecords(t, k, topic, 1)
	waitLog(t, &r.stderr, "relay started")
	if code := r.stop(t); code != exitOK {
		t.Fatalf("relay exit %d\n%s", code, r.stderr.String())
	}
	if out := r.stdout.String() + r.stderr.String(); strings.Contains(out, "s3cret") {
		t.Errorf("the relay printed the endpoint's password:\n%s", out)
	}
	testkit.WaitFor(t, 10*time.Second, "the spans at the collector", func() bool {
		spans, services := collector.spans()
		return len(spans["create "+topic]) == 1 && services["orders-relay"]
	})
}

// TestRelayRefusesABadOTLPEndpoint: an --otlp-endpoint that is not an
// http(s) URL with a host is a usage error, exit 2, that shows no password.
func TestRelayRefusesABadOTLPEndpoint(t *testing.T) {
	t.Parallel()
	for _, endpoint := range []string{"otel-collector:4318", "ftp://collector", "http://", "http://u:s3cret@/v1", "http://u:s3cret@%zz"} {
		var stdout, stderr strings.Builder
		code := run(t.Context(), []string{"relay", "--database-url", "postgres://127.0.0.1:1/x", "--otlp-endpoint", endpoint}, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), "--otlp-endpoint") || strings.Contains(stderr.String(), "s3cret") {
			t.Errorf("--otlp-endpoint %q: exit %d, want %d naming the flag without the password\n%s", endpoint, code, exitUsage, stderr.String())
		}
	}
}

// TestDLQReplayExportsSpansOverOTLP: with --otlp-endpoint, `courier dlq
// replay` sends a span per record it writes back to the collector, as the
// service courier-dlq-replay, before it exits; a bad endpoint is a usage
// error.
func TestDLQReplayExportsSpansOverOTLP(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t, 1)
	f.deadLetters(t, 2, "psp timeout")
	collector := newOTLPCollector(t)
	code, out, errOut := courier(t, f.args("dlq", "replay", f.dlqName, "--otlp-endpoint", collector.srv.URL)...)
	if code != exitOK {
		t.Fatalf("dlq replay: exit %d\n%s%s", code, out, errOut)
	}
	spans, services := collector.spans()
	if len(spans["send "+f.topic]) != 2 || !services["courier-dlq-replay"] {
		t.Errorf("the collector received spans %v of services %v, want 2 send %s spans of courier-dlq-replay", spans, services, f.topic)
	}
	code, _, errOut = courier(t, f.args("dlq", "replay", f.dlqName, "--otlp-endpoint", "collector:4318")...)
	if code != exitUsage || !strings.Contains(errOut, "--otlp-endpoint") {
		t.Errorf("dlq replay --otlp-endpoint collector:4318: exit %d, want %d naming the flag\n%s", code, exitUsage, errOut)
	}
}

// TestTracingRefusesBadEnvironment: an OTEL_EXPORTER_OTLP_ENDPOINT that is
// not an http(s) URL with a host, and OTEL_EXPORTER_OTLP_HEADERS that are
// not name=value, are usage errors naming the variable, which print no
// header value.
func TestTracingRefusesBadEnvironment(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_EXPORTER_OTLP_HEADERS": "Authorization: Bearer s3cretTOKEN"},
			`OTEL_EXPORTER_OTLP_HEADERS: the header "Authorization" is not name=value`},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces", "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-team=payments,s3cretTOKEN"},
			"OTEL_EXPORTER_OTLP_TRACES_HEADERS: a header is not name=value"},
	} {
		for _, name := range append(otlpEndpointEnv, otlpHeadersEnv...) {
			t.Setenv(name, tc.env[name])
		}
		var stdout, stderr strings.Builder
		code := run(t.Context(), []string{"relay", "--database-url", "postgres://127.0.0.1:1/x"}, &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), tc.want) || strings.Contains(stderr.String(), "s3cret") {
			t.Errorf("%v: exit %d, want %d saying %q without the token\n%s", tc.env, code, exitUsage, tc.want, stderr.String())
		}
	}
}

// TestRelayLogsSpansItCannotExport: with a collector nobody listens at, the
// relay still publishes, exits 0, and warns that spans were dropped,
// without the endpoint's password.
func TestRelayLogsSpansItCannotExport(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 1)
	o.enqueue(t, event(topic, "order-1", "OrderCreated"))
	r := startRelay(t, append(o.flags(), "--brokers", strings.Join(k.Brokers, ","), "--log-format", "json",
		"--otlp-endpoint", "http://courier:s3cret@127.0.0.1:1")...)
	topicRecords(t, k, topic, 1)
	if code := r.stop(t); code != exitOK {
		t.Fatalf("relay exit %d\n%s", code, r.stderr.String())
	}
	logs := r.stdout.String() + r.stderr.String()
	if !strings.Contains(logs, "export") || strings.Contains(logs, "s3cret") {
		t.Errorf("want a warning that spans were not exported, without the password:\n%s", logs)
	}
}

// The credentials the tracing tests give: each holds "s3cret" but the
// Basic one, whose base64 hides it; the token holds what JSON and Go
// literals escape.
const (
	echoToken     = `s3cretTOKEN"<&>\x`
	echoBasicUser = "courier:s3cretPASS!"
)

// echoBasic is echoBasicUser as Basic credentials send it.
var echoBasic = base64.StdEncoding.EncodeToString([]byte(echoBasicUser))

// echoCollector answers every request with 401 and a body that echo
// writes from the request's headers, then terminal escapes and a megabyte
// of text.
func echoCollector(t *testing.T, echo func(http.Header) string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, echo(r.Header)+"\x1b]0;pwned\x07\x1b[2J\x7f\u009b31m"+strings.Repeat("unauthorized ", 1<<20/13))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestTracingShowsNoCredentialTheCollectorEchoes: a collector answers 401
// with the request's headers in its body, as sent or as JSON and a Go
// literal with the Basic credentials decoded, behind terminal escapes and
// a megabyte of text. The headers come from OTEL_EXPORTER_OTLP_HEADERS
// (percent-encoded); --otlp-endpoint has a token as its user and a
// password in its query; OTEL_EXPORTER_OTLP_ENDPOINT, which the flag
// overrides, does not parse, so the SDK logs it. What the relay prints,
// its own log and the SDK's (in text and in JSON), holds no credential
// in any form, no raw control character and no line over 2 KiB, and
// still says the collector answered 401 and what the SDK could not parse.
func TestTracingShowsNoCredentialTheCollectorEchoes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		format string
		echo   func(http.Header) string
	}{
		{"text", func(h http.Header) string {
			var b strings.Builder
			for _, name := range slices.Sorted(maps.Keys(h)) {
				fmt.Fprintf(&b, "%s: %s\n", name, strings.Join(h[name], ", "))
			}
			return b.String()
		}},
		{"json", func(h http.Header) string {
			j, _ := json.Marshal(h)
			basic, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(h.Get("Authorization"), "Basic "))
			return fmt.Sprintf("%s token %q user %q", j, h.Get("X-Api-Token"), basic)
		}},
	} {
		t.Run(tc.format, func(t *testing.T) {
			t.Parallel()
			o := newOutboxDB(t)
			k := testkit.NewKafka(t)
			topic := k.Topic(t, 1)
			collector := echoCollector(t, tc.echo)
			o.enqueue(t, event(topic, "order-1", "OrderCreated"))
			endpoint := strings.Replace(collector.URL, "http://", "http://s3cretUSERTOKEN@", 1) + "?password=s3cretQUERY"
			p := startProcessWithEnv(t, []string{
				"OTEL_EXPORTER_OTLP_HEADERS=Authorization=Basic%20" + echoBasic + ",X-Api-Token=" + url.PathEscape(echoToken),
				"OTEL_EXPORTER_OTLP_ENDPOINT=http://otel:s3cretENVPASS@%zz", "OTEL_BSP_SCHEDULE_DELAY=50"},
				append(o.flags(), "relay", "--brokers", strings.Join(k.Brokers, ","), "--log-format", tc.format, "--otlp-endpoint", endpoint)...)
			testkit.WaitFor(t, 30*time.Second, "the relay to log the collector's 401", func() bool {
				return strings.Contains(p.stderr.String(), "cannot export spans")
			})
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if code := p.exitCode(t, 30*time.Second); code != exitOK {
				t.Fatalf("exit %d after SIGTERM, want 0", code)
			}
			out := p.stdout.String() + p.stderr.String()
			for _, secret := range []string{"s3cret", echoBasic} {
				if strings.Contains(out, secret) {
					t.Errorf("the relay printed %q:\n%.4000s", secret, out)
				}
			}
			if bad := terminalUnsafe(out); bad != "" {
				t.Errorf("the relay printed a raw %s", bad)
			}
			for _, line := range strings.Split(out, "\n") {
				if len(line) > 2048 {
					t.Errorf("a line of %d bytes: %.300s…", len(line), line)
				}
			}
			for _, want := range []string{"401 Unauthorized", "parse url", "opentelemetry"} {
				if !strings.Contains(out, want) {
					t.Errorf("the relay's output does not say %q:\n%.4000s", want, out)
				}
			}
		})
	}
}

// TestTracingRefusesHeadersTheExporterCannotSend: a header of
// OTEL_EXPORTER_OTLP_HEADERS that the exporter would drop (a value that is
// not percent-encoding, a name HTTP refuses) or could never send (a
// control character once decoded) is a usage error, exit 2, naming the
// variable and the header, before the exporter (and its logger) sees it;
// no output, the SDK's included, holds the value.
func TestTracingRefusesHeadersTheExporterCannotSend(t *testing.T) {
	for _, tc := range []struct{ headers, want string }{
		{"Authorization=Bearer%20s3cretTOKEN%zz", `OTEL_EXPORTER_OTLP_HEADERS: the value of the header "Authorization" is not percent-encoded right`},
		{"x-team=payments,Authorization=Bearer%20s3cretTOKEN%0Ax-forged:%20yes", `OTEL_EXPORTER_OTLP_HEADERS: the value of the header "Authorization" holds a control character`},
		{"Bearer s3cretTOKEN=x", "OTEL_EXPORTER_OTLP_HEADERS: a header's name holds a character HTTP does not allow"},
	} {
		t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", tc.headers)
		code, out, errOut := binary(t, "relay", "--database-url", "postgres://127.0.0.1:1/x", "--otlp-endpoint", "http://127.0.0.1:1")
		if code != exitUsage || !strings.Contains(errOut, tc.want) || strings.Contains(out+errOut, "s3cret") {
			t.Errorf("OTEL_EXPORTER_OTLP_HEADERS=%q: exit %d, want %d saying %q without the token\n%s%s", tc.headers, code, exitUsage, tc.want, out, errOut)
		}
	}
}

// tracingRelay is a relay process that traces to a collector that never
// answers.
type tracingRelay struct {
	o        *outboxDB
	k        *testkit.Kafka
	topic    string
	p        *relayProcess
	requests func() int64 // the exports that came to the collector
}

// relayTracingToAHangingCollector enqueues an event for a topic of its own
// and starts `courier relay` (JSON logs, env and flags added) tracing to
// a hangingCollector.
func relayTracingToAHangingCollector(t *testing.T, env []string, flags ...string) tracingRelay {
	t.Helper()
	r := tracingRelay{o: newOutboxDB(t), k: testkit.NewKafka(t)}
	r.topic = r.k.Topic(t, 1)
	collector, requests := hangingCollector(t)
	r.requests = requests
	r.o.enqueue(t, event(r.topic, "order-1", "OrderCreated"))
	r.p = startProcessWithEnv(t, env, slices.Concat(r.o.flags(), []string{"relay", "--brokers", strings.Join(r.k.Brokers, ","), "--log-format", "json",
		"--otlp-endpoint", collector.URL}, flags)...)
	return r
}

// hangingCollector accepts each export and never answers it; requests
// counts those that came.
func hangingCollector(t *testing.T) (srv *httptest.Server, requests func() int64) {
	t.Helper()
	var n atomic.Int64
	srv = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // then the server notices the client hang up
		n.Add(1)
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	return srv, n.Load
}

// TestRelayStopsWithinTheShutdownTimeoutWhenTheCollectorHangs: with a
// collector that never answers, SIGTERM stops the relay within
// --shutdown-timeout (1s, plus a second of slack for the process), as the
// relay guide (docs/relay.md) tells users to set terminationGracePeriodSeconds, whether the
// spans are in an export already or still queued; it exits 0 and says how
// many spans it dropped.
func TestRelayStopsWithinTheShutdownTimeoutWhenTheCollectorHangs(t *testing.T) {
	t.Parallel()
	const shutdownTimeout = time.Second
	for _, tc := range []struct {
		name, scheduleDelay string // OTEL_BSP_SCHEDULE_DELAY, milliseconds
		inExport            bool
	}{
		{"in an export", "50", true},
		{"queued", "600000", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := relayTracingToAHangingCollector(t, []string{"OTEL_BSP_SCHEDULE_DELAY=" + tc.scheduleDelay}, "--shutdown-timeout", shutdownTimeout.String())
			p, requests := r.p, r.requests
			topicRecords(t, r.k, r.topic, 1)
			if tc.inExport {
				testkit.WaitFor(t, 30*time.Second, "an export at the collector", func() bool { return requests() > 0 })
			}
			sent := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			code := p.exitCode(t, 30*time.Second)
			if took := time.Since(sent); took > shutdownTimeout+time.Second {
				t.Errorf("the relay exited %v after SIGTERM, want within --shutdown-timeout %v", took, shutdownTimeout)
			}
			if code != exitOK {
				t.Errorf("exit %d after SIGTERM, want 0", code)
			}
			if dropped := waitLog(t, &p.stderr, "the last spans could not be exported; they are dropped"); dropped["dropped_spans"].(float64) < 1 {
				t.Errorf("the relay says it dropped %v spans, want the send and create spans", dropped["dropped_spans"])
			}
		})
	}
}

// TestDLQReplayExitsWithinTheSpanBoundWhenTheCollectorHangs: with a
// collector that never answers, `courier dlq replay` exits 0 within 5s
// (traceShutdownTimeout, plus a second of slack) of printing its summary,
// and says how many spans it dropped.
func TestDLQReplayExitsWithinTheSpanBoundWhenTheCollectorHangs(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t, 1)
	f.deadLetters(t, 2, "psp timeout")
	collector, _ := hangingCollector(t)
	p := startProcessWithEnv(t, []string{"OTEL_BSP_SCHEDULE_DELAY=50"}, f.args("dlq", "replay", f.dlqName, "--otlp-endpoint", collector.URL)...)
	testkit.WaitFor(t, 30*time.Second, "the replay's summary", func() bool { return strings.Contains(p.stdout.String(), "moved 2 record(s)") })
	summarized := time.Now()
	code := p.exitCode(t, 30*time.Second)
	if took := time.Since(summarized); took > traceShutdownTimeout+time.Second {
		t.Errorf("the replay exited %v after its summary, want within %v", took, traceShutdownTimeout)
	}
	if code != exitOK || !strings.Contains(p.stderr.String(), `msg="the last spans could not be exported; they are dropped" dropped_spans=2`) {
		t.Errorf("exit %d, want 0 and a line saying the 2 spans were dropped\n%s", code, p.stderr.String())
	}
}

// TestTracingExportGivesUpOnACollectorThatNeverAnswers: however long
// OTEL_EXPORTER_OTLP_TIMEOUT (an hour) and OTEL_BSP_EXPORT_TIMEOUT (no
// limit) let an export wait, the relay gives up on a collector that never
// answers after 10s (traceExportTimeout), says so, and sends the next
// spans: a hanging collector costs spans, never the exporter.
func TestTracingExportGivesUpOnACollectorThatNeverAnswers(t *testing.T) {
	t.Parallel()
	r := relayTracingToAHangingCollector(t, []string{"OTEL_BSP_SCHEDULE_DELAY=50", "OTEL_EXPORTER_OTLP_TIMEOUT=3600000", "OTEL_BSP_EXPORT_TIMEOUT=0"})
	p, requests := r.p, r.requests
	testkit.WaitFor(t, 30*time.Second, "the first export at the collector", func() bool { return requests() == 1 })
	r.o.enqueue(t, event(r.topic, "order-2", "OrderCreated"))
	topicRecords(t, r.k, r.topic, 2)
	// The relay guide's 10s, and as long again of slack.
	testkit.WaitFor(t, 20*time.Second, "the next export, once the first gave up", func() bool { return requests() == 2 })
	if failed := waitLog(t, &p.stderr, "cannot export spans; they are dropped (logged at most once a minute)"); !strings.Contains(failed["error"].(string), "deadline exceeded") {
		t.Errorf("the failed export is logged with %q, want the deadline it ran out of", failed["error"])
	}
}
