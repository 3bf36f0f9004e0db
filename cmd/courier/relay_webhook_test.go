package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/goleak"

	"github.com/courierkit/courier/cmd/courier/internal/webhook"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// pager is a webhook endpoint that keeps each POST; hang makes it answer
// none until the client gives up.
type pager struct {
	srv   *httptest.Server
	mu    sync.Mutex
	posts []*http.Request
	// bodies[i] is the body of posts[i].
	bodies [][]byte
}

func newPager(t *testing.T, hang bool) *pager {
	t.Helper()
	p := &pager{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.posts, p.bodies = append(p.posts, r.Clone(r.Context())), append(p.bodies, body)
		p.mu.Unlock()
		if hang {
			<-r.Context().Done()
		}
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// received returns how many POSTs came, and their bodies.
func (p *pager) received() (int, [][]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.posts), append([][]byte(nil), p.bodies...)
}

// url is the pager's address with a password and a token in the path.
func (p *pager) url() string {
	return strings.Replace(p.srv.URL, "http://", "http://app:s3cret@", 1) + "/services/T0K3N"
}

// flagSecrets are what the tests' webhook flags hold that must never be
// printed.
var flagSecrets = []string{"s3cret", "T0K3N", "h3ader"}

// TestRelayWebhookPagesADeadLetter: `courier relay --webhook-url` POSTs
// one notification for an event the broker refuses for good, with the
// documented body and the --webhook-header, and without the event's
// payload; the URL's password and token and the header's value are never
// printed. Once the relay stops, none of its goroutines is left. Not
// parallel: it counts goroutines.
func TestRelayWebhookPagesADeadLetter(t *testing.T) {
	o := newOutboxDB(t)
	k := testkit.NewKafka(t, testkit.InProcess()) // the test injects a refusal
	topic := k.Topic(t, 1)
	k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.PolicyViolation})
	p := newPager(t, false)
	ev := event(topic, "order-1", "OrderCreated")
	ev.Payload = []byte(`{"card":"4111-PAYLOAD"}`)
	id := o.enqueue(t, ev)[0]
	before := goleak.IgnoreCurrent()

	r := startRelay(t, append(o.flags(), "--brokers", strings.Join(k.Brokers, ","), "--log-format", "json", "--poll-interval", "50ms",
		"--source", "orders-service", "--webhook-url", p.url(), "--webhook-header", "Authorization: Bearer h3ader")...)
	if started := waitLog(t, &r.stderr, "relay started"); started["webhook"] != "http://app:xxxxx@"+p.srv.Listener.Addr().String()+"/…" {
		t.Errorf("relay started with webhook %v, want the URL without its password and path", started["webhook"])
	}
	testkit.WaitFor(t, 30*time.Second, "the dead letter's POST", func() bool { n, _ := p.received(); return n >= 1 })
	if code := r.stop(t); code != exitOK {
		t.Fatalf("relay exit %d, want 0\n%s", code, r.stderr.String())
	}

	n, bodies := p.received()
	if n != 1 {
		t.Fatalf("%d POSTs, want 1", n)
	}
	post := p.posts[0]
	if user, pass, _ := post.BasicAuth(); post.Header.Get("Authorization") != "Bearer h3ader" || user != "" && pass != "s3cret" {
		t.Errorf("POST headers %v, want the --webhook-header", post.Header)
	}
	if post.URL.Path != "/services/T0K3N" || post.Header.Get("Content-Type") != "application/json" {
		t.Errorf("POST %s as %q", post.URL.Path, post.Header.Get("Content-Type"))
	}
	if strings.Contains(string(bodies[0]), "PAYLOAD") {
		t.Errorf("the body holds the event's payload:\n%s", bodies[0])
	}
	var note webhook.Notification
	if err := json.Unmarshal(bodies[0], &note); err != nil {
		t.Fatalf("body %s: %v", bodies[0], err)
	}
	dl := note.DeadLetter
	if note.Kind != webhook.KindDeadLetter || note.Relay != "orders-service" || note.Table != o.Schema+".courier_outbox" || dl == nil {
		t.Fatalf("notification %s", bodies[0])
	}
	if dl.EventID != id.String() || dl.Topic != topic || dl.Key != "order-1" || dl.Type != "OrderCreated" || dl.Attempts != 1 ||
		!dl.Permanent || !strings.Contains(dl.Error, "POLICY_VIOLATION") {
		t.Errorf("dead_letter %+v, want the refused event", dl)
	}
	if stopped := waitLog(t, &r.stderr, "webhook stopped"); stopped["sent"] != 1.0 || stopped["abandoned"] != 0.0 {
		t.Errorf("webhook stopped with %v, want 1 sent", stopped)
	}
	for _, s := range flagSecrets {
		if strings.Contains(r.stdout.String()+r.stderr.String(), s) {
			t.Errorf("%q printed:\n%s%s", s, r.stdout.String(), r.stderr.String())
		}
	}
	goleak.VerifyNone(t, append(testkit.KfakeConnections(), before)...)
}

// TestRelayWebhookHangingEndpointDoesNotSlowTheRelay: with the webhook
// hanging on the first dead letter's POST and its queue (of 1) full, the
// relay dead-letters more events, dropping their notifications, and goes
// on publishing; when it stops it gives the webhook --shutdown-timeout,
// then exits 0 saying what it dropped and abandoned.
func TestRelayWebhookHangingEndpointDoesNotSlowTheRelay(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	k := testkit.NewKafka(t, testkit.InProcess()) // the test injects a refusal
	refused, fine := k.Topic(t, 1), k.Topic(t, 2)
	k.Cluster.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: refused, Err: kerr.PolicyViolation, Count: -1})
	p := newPager(t, true)
	var dead []producer.Event
	for i := range 5 {
		dead = append(dead, event(refused, fmt.Sprint("order-", i), "OrderCreated"))
	}
	o.enqueue(t, dead...)

	r := startRelay(t, append(o.flags(), "--brokers", strings.Join(k.Brokers, ","), "--log-format", "json", "--poll-interval", "50ms",
		"--shutdown-timeout", "1s", "--webhook-url", p.url(), "--webhook-timeout", "1m", "--webhook-queue", "1")...)
	testkit.WaitFor(t, 30*time.Second, "the events to be dead-lettered", func() bool { return o.count(t, "status = 'dead_lettered'") == len(dead) })
	testkit.WaitFor(t, 30*time.Second, "the first dead letter's POST to hang", func() bool { n, _ := p.received(); return n == 1 })
	var batch []producer.Event
	for i := range 50 {
		batch = append(batch, event(fine, fmt.Sprint("order-", i%5), "OrderCreated"))
	}
	o.enqueue(t, batch...)
	testkit.WaitFor(t, 30*time.Second, "the relay to publish behind the hanging webhook", func() bool {
		return o.count(t, "status = 'published'") == len(batch)
	})
	if code := r.stop(t); code != exitOK {
		t.Fatalf("relay exit %d, want 0\n%s", code, r.stderr.String())
	}
	if n, _ := p.received(); n != 1 {
		t.Errorf("%d POSTs, want only the one that hung", n)
	}
	stopped := waitLog(t, &r.stderr, "webhook stopped")
	dropped, _ := stopped["dropped"].(float64)
	abandoned, _ := stopped["abandoned"].(float64)
	if dropped < 3 || dropped+abandoned != float64(len(dead)) || stopped["sent"] != 0.0 || stopped["level"] != "WARN" {
		t.Errorf("webhook stopped with %v, want the %d notifications dropped (3 or more) or abandoned", stopped, len(dead))
	}
}

// TestRelayWebhookUsageErrors: bad webhook options exit 2 naming the flag
// (or variable), before anything connects, without printing the URL's
// password or token or a header's value.
func TestRelayWebhookUsageErrors(t *testing.T) {
	nowhere := []string{"relay", "--database-url", "postgres://app@127.0.0.1:1/shop?connect_timeout=1", "--brokers", "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--webhook-url", "ftp://app:s3cret@hooks.example.com/T0K3N"}, `--webhook-url "ftp://app:xxxxx@hooks.example.com/…": use an http:// or https:// URL`},
		{[]string{"--webhook-url", "https://app:s3cret@hooks.example.com:port/T0K3N"}, "--webhook-url not a URL"},
		{[]string{"--webhook-url", "https:///T0K3N"}, "has no host"},
		{[]string{"--webhook-header", "Authorization: Bearer h3ader"}, "--webhook-header needs --webhook-url"},
		{[]string{"--webhook-url", "https://h/T0K3N", "--webhook-header", "Authorization Bearer h3ader"}, `--webhook-header (header 1): no ":"`},
		{[]string{"--webhook-url", "https://h/T0K3N", "--webhook-header", "X-A: 1", "--webhook-header", "X-Token: h3ader\x1b"}, "--webhook-header (header 2): the value of X-Token holds a control character"},
		{[]string{"--webhook-url", "https://h/", "--webhook-timeout", "0s"}, "--webhook-timeout 0s"},
		{[]string{"--webhook-url", "https://h/", "--webhook-timeout", "2m"}, "--webhook-timeout 2m0s"},
		{[]string{"--webhook-url", "https://h/", "--webhook-retries", "-1"}, "--webhook-retries -1: use 0 to 10"},
		{[]string{"--webhook-url", "https://h/", "--webhook-retries", "11"}, "--webhook-retries 11"},
		{[]string{"--webhook-url", "https://h/", "--webhook-queue", "0"}, "--webhook-queue 0: use 1 to 10000"},
		{[]string{"--webhook-url", "https://h/", "--webhook-queue", "10001"}, "--webhook-queue 10001"},
	} {
		code, out, errOut := courier(t, append(nowhere, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("courier relay %q: exit %d, want %d saying %q\n%s%s", tc.args, code, exitUsage, tc.want, out, errOut)
		}
		for _, s := range flagSecrets {
			if strings.Contains(out+errOut, s) {
				t.Errorf("courier relay %q printed %q:\n%s%s", tc.args, s, out, errOut)
			}
		}
	}

	t.Setenv("COURIER_WEBHOOK_URL", "https://hooks.example.com/T0K3N")
	t.Setenv("COURIER_WEBHOOK_HEADER", "X-A: 1\nX-Token: h3ader\nbroken h3ader")
	if code, out, errOut := courier(t, nowhere...); code != exitUsage || !strings.Contains(errOut, "--webhook-header (header 3)") ||
		strings.Contains(out+errOut, "h3ader") {
		t.Errorf("COURIER_WEBHOOK_HEADER with a broken third line: exit %d, want %d naming it without its value\n%s%s", code, exitUsage, out, errOut)
	}
	if code, out, _ := courier(t, "relay", "--help"); code != exitOK || !strings.Contains(out, "COURIER_WEBHOOK_URL") || !strings.Contains(out, "--webhook-header") {
		t.Errorf("courier relay --help: exit %d, want the webhook flags and variables\n%s", code, out)
	}
}
