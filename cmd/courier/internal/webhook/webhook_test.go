package webhook_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/goleak"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/cmd/courier/internal/webhook"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

func TestMain(m *testing.M) {
	// Sarama, under the relay of relay_test.go, starts go-metrics' one
	// global ticker, which lives as long as the process.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/rcrowley/go-metrics.(*meterArbiter).tick"))
}

// hookServer records each POST it gets, then answers it with answer (204
// when nil); i counts the requests from 0.
type hookServer struct {
	*httptest.Server
	mu       sync.Mutex
	requests []received
	arrived  chan struct{} // gets a value for each request, when buffered room allows
}

type received struct {
	at     time.Time // when the request arrived
	header http.Header
	body   []byte
	user   string
	pass   string
}

func newHookServer(t *testing.T, answer func(i int, w http.ResponseWriter, r *http.Request)) *hookServer {
	t.Helper()
	s := &hookServer{arrived: make(chan struct{}, 100)}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		user, pass, _ := r.BasicAuth()
		s.mu.Lock()
		i := len(s.requests)
		s.requests = append(s.requests, received{at: time.Now(), header: r.Header.Clone(), body: body, user: user, pass: pass})
		s.mu.Unlock()
		select {
		case s.arrived <- struct{}{}:
		default:
		}
		if answer == nil {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		answer(i, w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

// got returns the requests so far.
func (s *hookServer) got() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.requests...)
}

// waitRequests waits for n requests to have arrived.
func (s *hookServer) waitRequests(t *testing.T, n int) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("%d webhook request(s)", n), func() bool { return len(s.got()) >= n })
}

// notes decodes the bodies received.
func (s *hookServer) notes(t *testing.T) []webhook.Notification {
	t.Helper()
	var out []webhook.Notification
	for _, r := range s.got() {
		var n webhook.Notification
		if err := json.Unmarshal(r.body, &n); err != nil {
			t.Fatalf("body %q: %v", r.body, err)
		}
		out = append(out, n)
	}
	return out
}

// hang answers nothing until the client gives up.
func hang(_ int, _ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// config is a Config for url with fast retries and every log in logs.
func config(url string, logs *testkit.Buffer) webhook.Config {
	return webhook.Config{
		URL: url, Relay: "orders-service", Host: "relay-1", Table: "shop.courier_outbox",
		Backoff: backoff.Backoff{Base: time.Millisecond, Max: 5 * time.Millisecond},
		Logger:  slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

func newNotifier(t *testing.T, cfg webhook.Config) *webhook.Notifier {
	t.Helper()
	n, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// running is a Notifier's Run on its own goroutine.
type running struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func start(t *testing.T, n *webhook.Notifier) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		n.Run(ctx)
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends Run's context and waits for Run to return.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(60 * time.Second):
		t.Fatal("Run did not return within 60s of its context ending")
	}
}

func deadLetter(key, errText string) producer.DeadLetter {
	failed := time.Date(2026, 11, 26, 9, 30, 0, 0, time.UTC)
	return producer.DeadLetter{EventID: uuid.MustParse("0193a5b2-7c1e-7d3f-9a4b-5c6d7e8f9a0b"), Topic: "orders", Key: key,
		Type: "OrderCreated", Attempts: 10, Error: errText, FirstFailedAt: failed.Add(-time.Minute), FailedAt: failed}
}

// TestWebhookDeadLetterBody: a dead letter is one POST of JSON with the
// documented fields and the configured header; hostile text arrives as
// valid UTF-8 without control characters, cut to its bound.
func TestWebhookDeadLetterBody(t *testing.T) {
	srv := newHookServer(t, nil)
	var logs testkit.Buffer
	cfg := config(srv.URL+"/hook", &logs)
	cfg.Header = http.Header{"X-Team": {"payments"}}
	n := newNotifier(t, cfg)
	r := start(t, n)
	hostile := "broker said \x1b[2J\x00\x7f\u0085\xff " + strings.Repeat("é", 5000)
	n.OnDeadLetter(context.Background(), deadLetter("order-\x1b]0;pwned\x07", hostile))
	srv.waitRequests(t, 1)
	r.stop(t)

	got := srv.got()
	if len(got) != 1 {
		t.Fatalf("%d POSTs, want 1", len(got))
	}
	if ct := got[0].header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if h := got[0].header.Get("X-Team"); h != "payments" {
		t.Errorf("X-Team %q, want the configured header", h)
	}
	for _, bad := range []string{"\x1b", "\x00", "\x07", "\x7f", "\u0085", "\\u001b", "\\u0000"} {
		if bytes.Contains(got[0].body, []byte(bad)) {
			t.Errorf("body holds %q:\n%s", bad, got[0].body)
		}
	}
	note := srv.notes(t)[0]
	dl := note.DeadLetter
	if note.Version != 1 || note.Kind != "dead_letter" || note.Relay != "orders-service" || note.Host != "relay-1" ||
		note.Table != "shop.courier_outbox" || note.Breaker != nil || dl == nil || note.Time.IsZero() {
		t.Fatalf("notification %+v", note)
	}
	if dl.EventID != "0193a5b2-7c1e-7d3f-9a4b-5c6d7e8f9a0b" || dl.Topic != "orders" || dl.Key != "order-\uFFFD]0;pwned\uFFFD" ||
		dl.Type != "OrderCreated" || dl.Attempts != 10 || dl.Permanent || !dl.FailedAt.Equal(time.Date(2026, 11, 26, 9, 30, 0, 0, time.UTC)) {
		t.Errorf("dead_letter %+v", dl)
	}
	if len(dl.Error) > webhook.MaxErrorLen || !strings.HasPrefix(dl.Error, "broker said \uFFFD[2J\uFFFD\uFFFD\uFFFD\uFFFD é") || !strings.HasSuffix(dl.Error, "é…") {
		t.Errorf("error %d bytes %q…, want the text cleaned and cut to %d bytes", len(dl.Error), dl.Error[:40], webhook.MaxErrorLen)
	}
	if !strings.Contains(note.Text, "event 0193a5b2-7c1e-7d3f-9a4b-5c6d7e8f9a0b (topic orders") || !strings.Contains(note.Text, "dead-lettered after 10 failed attempt(s)") {
		t.Errorf("text %q", note.Text)
	}
	if s := n.Stats(); s != (webhook.Stats{Sent: 1}) {
		t.Errorf("stats %+v, want one sent", s)
	}
}

// TestWebhookBreakerOpenAndCloseOnly: of a breaker that opens, probes and
// reopens, then probes and closes, only the opening and the closing are
// sent, in order.
func TestWebhookBreakerOpenAndCloseOnly(t *testing.T) {
	srv := newHookServer(t, nil)
	var logs testkit.Buffer
	n := newNotifier(t, config(srv.URL, &logs))
	for _, s := range []producer.BreakerState{producer.BreakerOpen, producer.BreakerHalfOpen, producer.BreakerOpen,
		producer.BreakerHalfOpen, producer.BreakerClosed} {
		n.BreakerChanged(s)
	}
	start(t, n).stop(t) // sends what is queued
	notes := srv.notes(t)
	if len(notes) != 2 {
		t.Fatalf("%d POSTs, want 2: %+v", len(notes), notes)
	}
	if b := notes[0].Breaker; notes[0].Kind != "breaker" || b == nil || b.From != "closed" || b.To != "open" || !strings.Contains(notes[0].Text, "breaker open") {
		t.Errorf("first %+v %+v, want closed to open", notes[0], b)
	}
	if b := notes[1].Breaker; notes[1].Kind != "breaker" || b == nil || b.From != "half-open" || b.To != "closed" || b.OpenSeconds <= 0 {
		t.Errorf("second %+v %+v, want half-open to closed with the time it was open", notes[1], b)
	}
}

// TestWebhookRetriesServerErrors: 503 twice, then 429, then 200: the
// notification is sent four times and delivered once.
func TestWebhookRetriesServerErrors(t *testing.T) {
	srv := newHookServer(t, func(i int, w http.ResponseWriter, _ *http.Request) {
		switch i {
		case 0, 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 2:
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.WriteHeader(http.StatusOK)
		}
	})
	var logs testkit.Buffer
	n := newNotifier(t, config(srv.URL, &logs))
	r := start(t, n)
	n.OnDeadLetter(context.Background(), deadLetter("order-1", "refused"))
	srv.waitRequests(t, 4)
	r.stop(t)
	if got := len(srv.got()); got != 4 {
		t.Errorf("%d POSTs, want 4", got)
	}
	if s := n.Stats(); s != (webhook.Stats{Sent: 1}) {
		t.Errorf("stats %+v, want one sent", s)
	}
}

// TestWebhookWaitsTheRetryAfter: a 503 with Retry-After: 1 delays the
// retry by at least that second, measured between the two requests at the
// server, though Backoff alone would retry within milliseconds.
func TestWebhookWaitsTheRetryAfter(t *testing.T) {
	srv := newHookServer(t, func(i int, w http.ResponseWriter, _ *http.Request) {
		if i == 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	var logs testkit.Buffer
	cfg := config(srv.URL, &logs)
	if cfg.Backoff.Max > 10*time.Millisecond {
		t.Fatalf("Backoff.Max %v; the test needs a backoff far below the Retry-After", cfg.Backoff.Max)
	}
	n := newNotifier(t, cfg)
	r := start(t, n)
	n.OnDeadLetter(context.Background(), deadLetter("order-1", "refused"))
	srv.waitRequests(t, 2)
	r.stop(t)
	got := srv.got()
	if gap := got[1].at.Sub(got[0].at); gap < time.Second {
		t.Errorf("the retry came %v after the 503, want at least its Retry-After of 1s", gap)
	}
	if s := n.Stats(); s != (webhook.Stats{Sent: 1}) {
		t.Errorf("stats %+v, want one sent", s)
	}
}

// TestWebhookGivesUpAfterTheRetries: a server that always fails gets the
// first POST and Retries more, and the notification counts as failed.
func TestWebhookGivesUpAfterTheRetries(t *testing.T) {
	srv := newHookServer(t, func(int, http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }) // a dropped connection
	var logs testkit.Buffer
	cfg := config(srv.URL, &logs)
	cfg.Retries = 2
	n := newNotifier(t, cfg)
	n.OnDeadLetter(context.Background(), deadLetter("order-1", "refused"))
	start(t, n).stop(t)
	if got := len(srv.got()); got != 3 {
		t.Errorf("%d POSTs, want 3 (1 + 2 retries)", got)
	}
	if s := n.Stats(); s != (webhook.Stats{Failed: 1}) {
		t.Errorf("stats %+v, want one failed", s)
	}
	if !strings.Contains(logs.String(), `"msg":"webhook notification not delivered"`) {
		t.Errorf("no log of the failure:\n%s", logs.String())
	}
}

// TestWebhookClientErrorsAreNotRetried: a 400 and a redirect are final:
// one POST each, counted as failed, and the redirect is not followed.
func TestWebhookClientErrorsAreNotRetried(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(int, http.ResponseWriter, *http.Request)
		log    string
	}{
		{"400", func(_ int, w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "invalid_payload", http.StatusBadRequest)
		},
			"answered 400 Bad Request: invalid_payload"},
		{"307", func(_ int, w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
		},
			"redirects are not followed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newHookServer(t, tc.answer)
			var logs testkit.Buffer
			n := newNotifier(t, config(srv.URL+"/hook", &logs))
			n.OnDeadLetter(context.Background(), deadLetter("order-1", "refused"))
			start(t, n).stop(t)
			if got := len(srv.got()); got != 1 {
				t.Errorf("%d POSTs, want 1", got)
			}
			if s := n.Stats(); s != (webhook.Stats{Failed: 1}) {
				t.Errorf("stats %+v, want one failed", s)
			}
			if !strings.Contains(logs.String(), tc.log) {
				t.Errorf("log without %q:\n%s", tc.log, logs.String())
			}
		})
	}
}

// TestWebhookHangingServerNeverBlocks: with the server hanging on the
// first POST, many more notifications return at once: the queue fills,
// the rest are dropped and counted, and the drop is logged once. At the
// drain deadline Run gives up on the queued ones and says how many.
func TestWebhookHangingServerNeverBlocks(t *testing.T) {
	srv := newHookServer(t, hang)
	var logs testkit.Buffer
	cfg := config(srv.URL, &logs)
	cfg.QueueSize = 10
	cfg.DrainTimeout = 100 * time.Millisecond
	n := newNotifier(t, cfg)
	r := start(t, n)
	n.BreakerChanged(producer.BreakerOpen)
	srv.waitRequests(t, 1) // the sender is stuck in it

	const more = 5000
	returned := make(chan struct{})
	go func() {
		defer close(returned)
		for i := range more {
			n.OnDeadLetter(context.Background(), deadLetter(fmt.Sprint("order-", i), "refused"))
		}
	}()
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("queuing notifications blocked behind a hanging server")
	}
	if s := n.Stats(); s.Dropped != more-10 || s.Sent != 0 {
		t.Errorf("stats %+v, want %d dropped", s, more-10)
	}
	if c := strings.Count(logs.String(), "webhook queue full"); c != 1 {
		t.Errorf("the full queue was logged %d times, want once", c)
	}
	// The drain gives up on the hanging POST after DrainTimeout, not after
	// the 60s stop allows.
	stopping := time.Now()
	r.stop(t)
	if took := time.Since(stopping); took > 5*time.Second {
		t.Errorf("Run returned %v after its context ended, want about DrainTimeout (%v)", took, cfg.DrainTimeout)
	}
	if s := n.Stats(); s.Abandoned != 11 {
		t.Errorf("stats %+v, want the 10 queued and the one in flight abandoned", s)
	}
	if !strings.Contains(logs.String(), `"msg":"webhook stopped"`) || !strings.Contains(logs.String(), `"abandoned":11`) {
		t.Errorf("no log of what was abandoned:\n%s", logs.String())
	}
}

// TestWebhookShutdownDrains: notifications queued when Run's context
// ends are all sent.
func TestWebhookShutdownDrains(t *testing.T) {
	srv := newHookServer(t, nil)
	var logs testkit.Buffer
	n := newNotifier(t, config(srv.URL, &logs))
	for i := range 5 {
		n.OnDeadLetter(context.Background(), deadLetter(fmt.Sprint("order-", i), "refused"))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	n.Run(ctx)
	notes := srv.notes(t)
	if len(notes) != 5 {
		t.Fatalf("%d POSTs after the drain, want 5", len(notes))
	}
	for i, note := range notes {
		if note.DeadLetter == nil || note.DeadLetter.Key != fmt.Sprint("order-", i) {
			t.Errorf("POST %d: %+v, want the dead letters in order", i, note.DeadLetter)
		}
	}
	if s := n.Stats(); s != (webhook.Stats{Sent: 5}) {
		t.Errorf("stats %+v", s)
	}
}

// TestWebhookNeverPrintsSecrets: the URL's password and path and the
// headers' values reach the server but never a log or an error, even
// when the server echoes them or cannot be reached.
func TestWebhookNeverPrintsSecrets(t *testing.T) {
	secrets := []string{"s3cret", "T0K3N", "h3ader"}
	srv := newHookServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad "+r.Header.Get("X-Token")+" "+r.URL.Path, http.StatusInternalServerError)
	})
	var logs testkit.Buffer
	cfg := config(strings.Replace(srv.URL, "http://", "http://app:s3cret@", 1)+"/services/T0K3N", &logs)
	cfg.Header = http.Header{"X-Token": {"h3ader"}}
	cfg.Retries = 1
	n := newNotifier(t, cfg)
	n.OnDeadLetter(context.Background(), deadLetter("order-1", "refused"))
	start(t, n).stop(t)
	got := srv.got()
	if len(got) != 2 || got[0].user != "app" || got[0].pass != "s3cret" || got[0].header.Get("X-Token") != "h3ader" {
		t.Fatalf("the server got %d POSTs (%+v), want 2 with the credentials", len(got), got)
	}

	cfg = config("http://app:s3cret@127.0.0.1:1/services/T0K3N", &logs) // nothing listens
	cfg.Header = http.Header{"Authorization": {"Bearer h3ader"}}
	cfg.Retries = webhook.NoRetries
	n = newNotifier(t, cfg)
	n.OnDeadLetter(context.Background(), deadLetter("order-1", "refused"))
	start(t, n).stop(t)
	if s := n.Stats(); s.Failed != 1 {
		t.Errorf("stats %+v, want the unreachable server's notification failed", s)
	}
	for _, want := range []string{"http://app:xxxxx@127.0.0.1:1/…", "not delivered"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs without %q:\n%s", want, logs.String())
		}
	}

	printed := logs.String()
	if u, _ := url.Parse("https://s3cret@hooks.example.com/T0K3N?key=s3cret"); webhook.Redacted(u) != "https://xxxxx@hooks.example.com/…" {
		t.Errorf("Redacted(%q) = %q, want the user and path masked", u, webhook.Redacted(u))
	}
	for _, raw := range []string{"ftp://app:s3cret@host/T0K3N", "http://app:s3cret@host:port/T0K3N", "http://app:s3cret@/T0K3N", "http://app:s3cret@host/T0K3N\x00"} {
		_, err := webhook.New(webhook.Config{URL: raw})
		if err == nil {
			t.Errorf("New accepted %q", raw)
			continue
		}
		printed += err.Error()
	}
	_, err := webhook.New(webhook.Config{URL: "https://host/", Header: http.Header{"X-Token": {"h3ader\r\nX-Evil: 1"}}})
	if err == nil {
		t.Error("New accepted a header value with a line break")
	} else {
		printed += err.Error()
	}
	for _, s := range secrets {
		if strings.Contains(printed, s) {
			t.Errorf("%q printed:\n%s", s, printed)
		}
	}
}

// TestWebhookConfigErrorsNameTheField: each field out of range is refused
// by its name.
func TestWebhookConfigErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		cfg  webhook.Config
		want string
	}{
		{webhook.Config{}, "URL: missing"},
		{webhook.Config{URL: "https://h/", Timeout: time.Millisecond}, "Timeout 1ms"},
		{webhook.Config{URL: "https://h/", Timeout: time.Hour}, "Timeout 1h0m0s"},
		{webhook.Config{URL: "https://h/", Retries: 11}, "Retries 11"},
		{webhook.Config{URL: "https://h/", Retries: -2}, "Retries -2"},
		{webhook.Config{URL: "https://h/", QueueSize: 10001}, "QueueSize 10001"},
		{webhook.Config{URL: "https://h/", DrainTimeout: -time.Second}, "DrainTimeout -1s"},
		{webhook.Config{URL: "https://h/", Backoff: backoff.Backoff{Factor: 1000}}, "Backoff.Factor"},
		{webhook.Config{URL: "https://h/", Header: http.Header{"Bad Name": {"x"}}}, `Header: name "Bad Name"`},
		{webhook.Config{URL: "https://h/", Header: http.Header{"Host": {"x"}}}, "Header: Host is set by the HTTP client"},
		{webhook.Config{URL: "https://h/", Header: http.Header{"X-Big": {strings.Repeat("a", 9000)}}}, "the value of X-Big is 9000 bytes"},
	} {
		_, err := webhook.New(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// TestWebhookParseHeader: "Name: value" as curl takes it; a malformed one
// is refused without its value.
func TestWebhookParseHeader(t *testing.T) {
	name, value, err := webhook.ParseHeader("Authorization:  Bearer abc:def ")
	if err != nil || name != "Authorization" || value != "Bearer abc:def" {
		t.Errorf("ParseHeader: %q %q %v", name, value, err)
	}
	for _, bad := range []string{"Bearer s3cret", "Bad Name: s3cret", ": s3cret", "X-Token: s3cret\x1b"} {
		if _, _, err := webhook.ParseHeader(bad); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ParseHeader(%q): %v, want an error without the value", bad, err)
		}
	}
}

// TestWebhookMasksEchoedSecretsWhole: a secret the server echoes is masked
// before the answer is cut for the log, so a token across the cut leaves
// no part of it; the lone user of the URL, the basic authentication it
// makes and each path segment are masked too; a short header value ("1")
// is not a secret and leaves the answer readable.
func TestWebhookMasksEchoedSecretsWhole(t *testing.T) {
	const token = "Zq8xW3vT5nB7mK9pL2hJ4gF6dS1aR0yE"
	basic := base64.StdEncoding.EncodeToString([]byte("app:s3cret"))
	for _, tc := range []struct {
		name, url, echo string
		secrets         []string
		want            string
	}{
		{"token across the cut", "/api/webhooks/" + token, strings.Repeat("x", 150) + " Cannot POST /api/webhooks/" + token, []string{token[:8]}, "Cannot POST"},
		{"a path segment alone", "/hooks/" + token, "unknown hook " + token, []string{token[:8]}, "unknown hook xxxxx"},
		{"basic authentication", "/hook", "bad Authorization: Basic " + basic, []string{basic[:8]}, "Basic xxxxx"},
		{"a short header value", "/hook", "upstream 502 failed", nil, "upstream 502 failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newHookServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				http.Error(w, tc.echo, http.StatusNotFound)
			})
			var logs testkit.Buffer
			cfg := config(strings.Replace(srv.URL, "http://", "http://app:s3cret@", 1)+tc.url, &logs)
			cfg.Header = http.Header{"X-Version": {"1"}}
			n := newNotifier(t, cfg)
			n.OnDeadLetter(context.Background(), deadLetter("order-1", "refused"))
			start(t, n).stop(t)
			printed := logs.String()
			for _, s := range tc.secrets {
				if strings.Contains(printed, s) {
					t.Errorf("%q printed:\n%s", s, printed)
				}
			}
			if !strings.Contains(printed, tc.want) {
				t.Errorf("the log lacks %q:\n%s", tc.want, printed)
			}
		})
	}
	u, _ := url.Parse("https://" + token + "@hooks.example.com/")
	if got := webhook.Secrets(u); !slices.Contains(got, token) {
		t.Errorf("Secrets(%q) = %q, want the lone user among them", u, got)
	}
}

// TestWebhookTextIsNeverChatMarkup: a key that a chat service would read
// as a mention or a link reaches the text escaped (&, <, >), and the
// dead letter's own fields as it is.
func TestWebhookTextIsNeverChatMarkup(t *testing.T) {
	srv := newHookServer(t, nil)
	var logs testkit.Buffer
	n := newNotifier(t, config(srv.URL+"/hook", &logs))
	r := start(t, n)
	n.OnDeadLetter(context.Background(), deadLetter("<!channel> & <https://evil.example|click>", "refused"))
	srv.waitRequests(t, 1)
	r.stop(t)
	note := srv.notes(t)[0]
	if strings.ContainsAny(note.Text, "<>") || !strings.Contains(note.Text, "&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;") {
		t.Errorf("text %q, want the key escaped", note.Text)
	}
	if note.DeadLetter.Key != "<!channel> & <https://evil.example|click>" {
		t.Errorf("dead_letter.key %q, want the key as it is", note.DeadLetter.Key)
	}
}
