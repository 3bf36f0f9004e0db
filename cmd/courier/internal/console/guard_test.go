package console_test

import (
	"context"
	"html"
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/cmd/courier/internal/console"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// client is a browser-like HTTP client of a console: it keeps cookies,
// follows no redirect, and sends the headers a browser sends for the
// console's own forms unless a test overrides them.
type client struct {
	t    testing.TB
	base string
	http *http.Client
	// csrf is the anti-forgery token of the last page read.
	csrf string
}

func newClient(t testing.TB, base string) *client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, base: base, http: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// do sends a request of form with headers and returns its status, body
// and headers.
func (c *client) do(method, path string, form url.Values, headers map[string]string) (int, string, http.Header) {
	c.t.Helper()
	if form == nil {
		return c.send(method, path, nil, headers)
	}
	all := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": c.base, "Sec-Fetch-Site": "same-origin"}
	maps.Copy(all, headers)
	return c.send(method, path, strings.NewReader(form.Encode()), all)
}

// raw sends a request with body as it is (do encodes a form), from the
// console's origin unless headers say otherwise, and returns its status
// and body.
func (c *client) raw(method, path, body string, headers map[string]string) (int, string) {
	c.t.Helper()
	all := map[string]string{"Origin": c.base, "Sec-Fetch-Site": "same-origin"}
	maps.Copy(all, headers)
	status, page, _ := c.send(method, path, strings.NewReader(body), all)
	return status, page
}

// send sends a request with headers (an empty value removes one, Host
// names the host) and keeps the anti-forgery token of the page it gets.
func (c *client) send(method, path string, body io.Reader, headers map[string]string) (int, string, http.Header) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, c.base+path, body)
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range headers {
		switch {
		case k == "Host":
			req.Host = v
		case v == "":
			req.Header.Del(k)
		default:
			req.Header.Set(k, v)
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	if m := csrfInput.FindSubmatch(b); m != nil {
		c.csrf = string(m[1])
	}
	return resp.StatusCode, string(b), resp.Header
}

// get is do for a GET.
func (c *client) get(path string) (int, string) {
	c.t.Helper()
	status, body, _ := c.do(http.MethodGet, path, nil, nil)
	return status, body
}

// TestAConsoleWithoutTokensAnswersOnlyLoopbackNames: a page asked for
// under another host name (a DNS-rebinding page) is refused; localhost,
// 127.0.0.1 and [::1] are served.
func TestAConsoleWithoutTokensAnswersOnlyLoopbackNames(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	c := newClient(t, r.url)
	port := strings.TrimPrefix(r.url, "http://127.0.0.1:")
	for host, want := range map[string]int{"evil.example:" + port: http.StatusForbidden, "10.0.0.7:" + port: http.StatusForbidden,
		"localhost:" + port: http.StatusOK, "127.0.0.1:" + port: http.StatusOK, "[::1]:" + port: http.StatusOK} {
		status, body, _ := c.do(http.MethodGet, "/", nil, map[string]string{"Host": host})
		if status != want {
			t.Errorf("Host %s: status %d, want %d (%.200s)", host, status, want, body)
		}
		if want == http.StatusForbidden && !strings.Contains(body, "DNS-rebinding") {
			t.Errorf("Host %s: the refusal does not say why: %.300s", host, body)
		}
	}
}

// TestTokensGuardEveryPage: with tokens, every page but the sign-in and
// the static files needs a session or a bearer token; a wrong token is
// refused; the audit names the token's holder.
func TestTokensGuardEveryPage(t *testing.T) {
	t.Parallel()
	const token = "s3cr3t-t0ken-of-ana-0123456789"
	r := newRig(t, func(c *console.Config) { c.Tokens = map[string]string{"ana": token} })
	c := newClient(t, r.url)
	for _, path := range []string{"/", "/outbox/events", "/dlq", "/health", "/audit"} {
		status, _, h := c.do(http.MethodGet, path, nil, nil)
		if status != http.StatusSeeOther || !strings.HasPrefix(h.Get("Location"), "/login") {
			t.Errorf("GET %s without signing in: %d to %q, want a redirect to /login", path, status, h.Get("Location"))
		}
	}
	if status, _, _ := c.do(http.MethodPost, "/outbox/requeue", url.Values{"expect": {"0"}}, nil); status != http.StatusUnauthorized {
		t.Errorf("POST without signing in: %d, want 401", status)
	}
	if status, _ := c.get("/static/console.css"); status != http.StatusOK {
		t.Errorf("the stylesheet: %d, want 200", status)
	}
	if status, body, _ := c.do(http.MethodPost, "/login", url.Values{"token": {"s3cr3t-t0ken-of-ana-0123456788"}, "next": {"/audit"}}, nil); status != http.StatusUnauthorized || strings.Contains(body, token) {
		t.Errorf("a wrong token: %d, want 401 without the token in the page", status)
	}
	status, _, h := c.do(http.MethodPost, "/login", url.Values{"token": {token}, "next": {"//evil.example/x"}}, nil)
	if status != http.StatusSeeOther || h.Get("Location") != "/" {
		t.Errorf("signing in with next=//evil.example/x: %d to %q, want a redirect to / (never to another site)", status, h.Get("Location"))
	}
	status, body := c.get("/")
	if status != http.StatusOK || !strings.Contains(body, "ana") {
		t.Errorf("signed in: %d, and the page names %v the holder", status, strings.Contains(body, "ana"))
	}
	bearer := newClient(t, r.url)
	if status, _, _ := bearer.do(http.MethodGet, "/outbox/events", nil, map[string]string{"Authorization": "Bearer " + token}); status != http.StatusOK {
		t.Errorf("a bearer token: %d, want 200", status)
	}
	if status, _, _ := bearer.do(http.MethodGet, "/outbox/events", nil, map[string]string{"Authorization": "Bearer nope-nope-nope-nope-nope"}); status != http.StatusSeeOther {
		t.Errorf("a wrong bearer token: %d, want the sign-in redirect", status)
	}
	ids := r.deadLettered(t, producer.Event{Topic: "t.none-" + t.Name(), Key: "k", Type: "T", Payload: []byte(`{}`)})
	c.get("/outbox/requeue?status=dead_lettered")
	if status, body, _ := c.do(http.MethodPost, "/outbox/requeue", url.Values{"csrf": {c.csrf}, "status": {"dead_lettered"}, "expect": {"1"}}, nil); status != http.StatusSeeOther {
		t.Fatalf("requeue: %d %.300s", status, body)
	}
	if got := r.status(t, ids[0]); got != producer.StatusPending {
		t.Errorf("after the requeue the event is %s, want pending", got)
	}
	entries, err := r.admin.AuditLog(context.Background(), 0, 10)
	if err != nil || len(entries) != 1 || entries[0].Actor != "ana" || entries[0].Action != "outbox.requeue" || entries[0].Count != 1 {
		t.Errorf("audit %+v, %v: want one requeue of 1 event by ana", entries, err)
	}
	if status, _, _ := c.do(http.MethodPost, "/logout", url.Values{"csrf": {c.csrf}}, nil); status != http.StatusSeeOther {
		t.Errorf("logout: %d", status)
	}
	if status, _ := c.get("/"); status != http.StatusSeeOther {
		t.Errorf("after logout: %d, want the sign-in redirect", status)
	}
}

// TestForgedRequestsChangeNothing: a POST without the session's
// anti-forgery token, with a stale one, from another origin, marked
// cross-site by the browser, or naming no origin at all is refused, and
// the event stays dead-lettered; the same POST from the console's page
// requeues it.
func TestForgedRequestsChangeNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	ids := r.deadLettered(t, producer.Event{Topic: "t.none-" + t.Name(), Key: "k", Type: "T", Payload: []byte(`{}`)})
	c := newClient(t, r.url)
	c.get("/outbox/requeue?status=dead_lettered")
	form := func(csrf string) url.Values {
		return url.Values{"csrf": {csrf}, "status": {"dead_lettered"}, "expect": {"1"}}
	}
	for name, tc := range map[string]struct {
		form    url.Values
		headers map[string]string
	}{
		"no token":          {form: url.Values{"status": {"dead_lettered"}, "expect": {"1"}}},
		"a stale token":     {form: form("bm90LXRoZS10b2tlbi1vZi10aGlzLXNlc3Npb24")},
		"another origin":    {form: form(c.csrf), headers: map[string]string{"Origin": "http://evil.example"}},
		"cross-site":        {form: form(c.csrf), headers: map[string]string{"Sec-Fetch-Site": "cross-site"}},
		"no origin":         {form: form(c.csrf), headers: map[string]string{"Origin": "", "Sec-Fetch-Site": ""}},
		"a referer of evil": {form: form(c.csrf), headers: map[string]string{"Origin": "", "Referer": "http://evil.example/page"}},
	} {
		status, body, _ := c.do(http.MethodPost, "/outbox/requeue", tc.form, tc.headers)
		if status != http.StatusForbidden || !strings.Contains(body, "cross-site") {
			t.Errorf("%s: %d, want 403 saying it may be a cross-site request (%.200s)", name, status, body)
		}
	}
	if got := r.status(t, ids[0]); got != producer.StatusDeadLettered {
		t.Fatalf("a refused request changed the event to %s", got)
	}
	if status, _, _ := c.do(http.MethodPost, "/outbox/requeue", form(c.csrf), nil); status != http.StatusSeeOther {
		t.Fatalf("the console's own request: %d", status)
	}
	if got := r.status(t, ids[0]); got != producer.StatusPending {
		t.Errorf("after the console's own request the event is %s, want pending", got)
	}
}

// TestReadOnlyHidesAndRefusesActions: a read-only console shows no action
// and refuses every one posted to it, changing nothing.
func TestReadOnlyHidesAndRefusesActions(t *testing.T) {
	t.Parallel()
	r := newRig(t, func(c *console.Config) { c.ReadOnly = true })
	ids := r.deadLettered(t, producer.Event{Topic: "t.none-" + t.Name(), Key: "k", Type: "T", Payload: []byte(`{}`)})
	c := newClient(t, r.url)
	for _, path := range []string{"/outbox/events", "/outbox/events/" + ids[0].String(), "/outbox/requeue?status=dead_lettered"} {
		status, body := c.get(path)
		if status != http.StatusOK || strings.Contains(body, "requeue-matching") || strings.Contains(body, `id="confirm"`) ||
			strings.Contains(body, "requeue-event") || !strings.Contains(body, "read-only") {
			t.Errorf("%s: %d; read-only pages must show no action and say read-only", path, status)
		}
	}
	for _, path := range []string{"/outbox/requeue", "/outbox/purge", "/dlq/x.dlq/replay"} {
		status, body, _ := c.do(http.MethodPost, path, url.Values{"csrf": {c.csrf}, "status": {"dead_lettered"}, "expect": {"1"}}, nil)
		if status != http.StatusForbidden || !strings.Contains(body, "read-only") {
			t.Errorf("POST %s: %d, want 403 read-only", path, status)
		}
	}
	if got := r.status(t, ids[0]); got != producer.StatusDeadLettered {
		t.Errorf("a read-only console changed the event to %s", got)
	}
}

// TestAnActionTouchesExactlyTheConfirmedCount: a requeue or purge whose
// set changed since its confirmation (another event matches now) does
// nothing, writes no audit row, and shows the set as it is now.
func TestAnActionTouchesExactlyTheConfirmedCount(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	topic := "t.none-" + t.Name()
	ids := r.deadLettered(t, producer.Event{Topic: topic, Key: "a", Type: "T", Payload: []byte(`{}`)},
		producer.Event{Topic: topic, Key: "b", Type: "T", Payload: []byte(`{}`)})
	c := newClient(t, r.url)
	for _, action := range []string{"requeue", "purge"} {
		c.get("/outbox/" + action + "?status=dead_lettered")
		status, body, _ := c.do(http.MethodPost, "/outbox/"+action, url.Values{"csrf": {c.csrf}, "status": {"dead_lettered"}, "expect": {"1"}}, nil)
		if status != http.StatusConflict || !strings.Contains(body, "The set changed") || !strings.Contains(body, `id="confirm-count">2<`) {
			t.Errorf("%s of 1 confirmed while 2 match: %d, want 409 showing the 2 (%.300s)", action, status, body)
		}
	}
	for _, id := range ids {
		if got := r.status(t, id); got != producer.StatusDeadLettered {
			t.Errorf("an unconfirmed action changed an event to %s", got)
		}
	}
	if entries, err := r.admin.AuditLog(context.Background(), 0, 10); err != nil || len(entries) != 0 {
		t.Errorf("audit %+v, %v: want no row for actions that did nothing", entries, err)
	}
}

// TestSecurityHeaders: every answer forbids foreign script, framing,
// sniffing and caching.
func TestSecurityHeaders(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	c := newClient(t, r.url)
	for _, path := range []string{"/", "/nope", "/static/console.js"} {
		_, _, h := c.do(http.MethodGet, path, nil, nil)
		csp := h.Get("Content-Security-Policy")
		if !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe") ||
			h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" || h.Get("Cache-Control") != "no-store" {
			t.Errorf("%s: headers %v", path, h)
		}
	}
}

// TestABearerTokenRunsActions: a script with a bearer token posts an
// action without a form token or an Origin (a browser cannot send the
// Authorization header cross-site), filtered by key with the count the
// confirmation page gave, and it touches that key's event only; the audit
// names the token's holder; no session is kept for it.
func TestABearerTokenRunsActions(t *testing.T) {
	t.Parallel()
	const token = "token-of-the-nightly-job-42"
	r := newRig(t, func(c *console.Config) { c.Tokens = map[string]string{"nightly": token} })
	topic := "t.none-" + testkit.UniqueName(t, 60)
	ids := r.deadLettered(t, producer.Event{Topic: topic, Key: "k", Type: "T", Payload: []byte(`{}`)},
		producer.Event{Topic: topic, Key: "k-other", Type: "T", Payload: []byte(`{}`)})
	c := newClient(t, r.url)
	script := map[string]string{"Authorization": "Bearer " + token, "Origin": "", "Sec-Fetch-Site": ""}
	_, page, _ := c.do(http.MethodGet, "/outbox/requeue?status=dead_lettered&key=k", nil, script)
	if !strings.Contains(page, `id="confirm-count">1<`) {
		t.Fatalf("the confirmation of key k does not count 1:\n%.2000s", page)
	}
	status, body, _ := c.do(http.MethodPost, "/outbox/requeue", url.Values{"status": {"dead_lettered"}, "key": {"k"}, "expect": {"1"}}, script)
	if status != http.StatusSeeOther {
		t.Fatalf("a bearer requeue: %d %.300s", status, body)
	}
	if got, other := r.status(t, ids[0]), r.status(t, ids[1]); got != producer.StatusPending || other != producer.StatusDeadLettered {
		t.Errorf("after the bearer requeue of key k its event is %s and the other key's %s, want pending and dead_lettered", got, other)
	}
	entries, err := r.admin.AuditLog(context.Background(), 0, 10)
	if err != nil || len(entries) != 1 || entries[0].Actor != "nightly" {
		t.Errorf("audit %+v, %v: want the requeue by nightly", entries, err)
	}
}

// TestAnotherSitesPageGetsNothing: a request the browser marks as sent by
// another site's page (an image, a fetch) is refused, even a GET; a link
// followed from another site (a top-level navigation) opens the page.
func TestAnotherSitesPageGetsNothing(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	c := newClient(t, r.url)
	for mode, want := range map[string]int{"no-cors": http.StatusForbidden, "cors": http.StatusForbidden, "navigate": http.StatusOK} {
		status, _, _ := c.do(http.MethodGet, "/outbox/events", nil, map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": mode})
		if status != want {
			t.Errorf("a cross-site GET in mode %s: %d, want %d", mode, status, want)
		}
	}
}

// TestAPageNamingAMissingTopicCreatesNone: on a broker that creates the
// topics a client asks about (Kafka's auto.create.topics.enable), the
// dead-letter pages of a topic that does not exist answer 404 and create
// nothing.
func TestAPageNamingAMissingTopicCreatesNone(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess(), testkit.KfakeOptions(kfake.AllowAutoTopicCreation()))
	r := newRig(t, func(c *console.Config) { c.Brokers = k.Brokers })
	missing := "t.typo-" + testkit.UniqueName(t, 40) + ".dlq"
	c := newClient(t, r.url)
	for _, path := range []string{"/dlq/" + missing, "/dlq/" + missing + "/0/0"} {
		if status, body := c.get(path); status != http.StatusNotFound || !strings.Contains(body, "does not exist") {
			t.Errorf("GET %s: %d, want 404 saying the topic does not exist", path, status)
		}
	}
	admin, err := sarama.NewClusterAdmin(k.Brokers, k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	topics, err := admin.ListTopics()
	if err != nil {
		t.Fatal(err)
	}
	if _, created := topics[missing]; created {
		t.Errorf("the pages created topic %s", missing)
	}
}

// TestNoticesAreTheConsolesOwnWords: the status line after an action is
// built from a code and a count; text in the URL never reaches it.
func TestNoticesAreTheConsolesOwnWords(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	c := newClient(t, r.url)
	if _, body := c.get("/outbox/events?notice=Your+session+expired%2C+call+555-0100&done=drop&n=1"); strings.Contains(body, "555-0100") || strings.Contains(body, `role="status"`) {
		t.Errorf("a notice from the URL reached the page")
	}
	if _, body := c.get("/outbox/events?done=requeue&n=3"); !strings.Contains(body, "Requeue: 3 event(s).") {
		t.Errorf("the requeue's notice is missing")
	}
}

// TestSignInGoesOnOnlyToAPageOfTheConsole: a sign-in's next, from the
// sign-in page's link or its form, takes the browser on to a page of the
// console, cleaned, with its query; anything a browser could read as
// another host (a scheme, "//", a backslash, dot segments or encoded
// slashes that clean into one, a tab) or that names no page of the console
// sends it to / instead. Read as a browser reads a Location (backslashes
// are slashes, tabs and newlines dropped), every answer stays on the
// console's host.
func TestSignInGoesOnOnlyToAPageOfTheConsole(t *testing.T) {
	t.Parallel()
	const token = "s3cr3t-t0ken-of-ana-0123456789"
	r := newRig(t, func(c *console.Config) { c.Tokens = map[string]string{"ana": token} })
	base, err := url.Parse(r.url)
	if err != nil {
		t.Fatal(err)
	}
	for next, want := range map[string]string{
		"/audit":           "/audit",
		"/outbox/../audit": "/audit",
		"/outbox/events?status=dead_lettered&key=k%201": "/outbox/events?key=k+1&status=dead_lettered",
		"/dlq/orders.dlq/0/12":                          "/dlq/orders.dlq/0/12",
		"//evil.example/x":                              "/",
		"/\\evil.example/x":                             "/",
		"/./\\evil.example/x":                           "/",
		"/.//\\evil.example/x":                          "/",
		"/%5Cevil.example/x":                            "/",
		"/%2F%2Fevil.example/x":                         "/",
		"/%2f/evil.example":                             "/",
		"/outbox/../..//evil.example":                   "/",
		"/jobs/%2e%2e/%2e%2e//evil.example":             "/",
		"/\t/evil.example":                              "/",
		"/%09/evil.example":                             "/",
		"/\r\nLocation: https://evil.example":           "/",
		"https://evil.example/":                         "/",
		"http:/evil.example":                            "/",
		"javascript:alert(1)":                           "/",
		" /audit":                                       "/",
		"/login?next=//evil.example":                    "/",
		"/static/console.js":                            "/",
		"/no-such-page":                                 "/",
		"/" + strings.Repeat("a", 3000):                 "/",
	} {
		c := newClient(t, r.url)
		_, page, _ := c.do(http.MethodGet, "/login?next="+url.QueryEscape(next), nil, nil)
		if m := regexp.MustCompile(`name="next" value="([^"]*)"`).FindStringSubmatch(page); m == nil || html.UnescapeString(m[1]) != want {
			t.Errorf("the sign-in page for next %.80q carries %.200v, want %q", next, m, want)
		}
		status, _, h := c.do(http.MethodPost, "/login", url.Values{"token": {token}, "next": {next}}, nil)
		loc := h.Get("Location")
		if status != http.StatusSeeOther || loc != want {
			t.Errorf("signing in with next %.80q: %d to %.80q, want a redirect to %q", next, status, loc, want)
		}
		asBrowser := strings.NewReplacer("\\", "/", "\t", "", "\n", "", "\r", "").Replace(loc)
		if u, err := base.Parse(asBrowser); err != nil || u.Host != base.Host || u.Scheme != base.Scheme {
			t.Errorf("signing in with next %.80q: a browser goes on to %.80v (%v), off the console at %s", next, u, err, base.Host)
		}
	}
}
