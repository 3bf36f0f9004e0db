package main

import (
	"maps"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/courierkit/courier/internal/testkit"
)

// consoleURL waits for the console's first line and returns its address.
func consoleURL(t *testing.T, p *relayProcess) string {
	t.Helper()
	line := regexp.MustCompile(`courier console[^:]*: (http://\S+/) `)
	var url string
	testkit.WaitFor(t, 30*time.Second, "the console's address on stdout", func() bool {
		m := line.FindStringSubmatch(p.stdout.String())
		if m != nil {
			url = m[1]
		}
		return m != nil || !p.running()
	})
	if url == "" {
		t.Fatalf("the console exited without serving:\n%s%s", p.stdout.String(), p.stderr.String())
	}
	return url
}

// TestConsoleServesUntilSIGTERM: `courier console` on the loopback serves
// the outbox, dead-letter and health pages without sign-in, and exits 0
// on SIGTERM.
func TestConsoleServesUntilSIGTERM(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	k := testkit.NewKafka(t)
	p := startRelayProcess(t, "console", "--database-url", o.URL, "--schema", o.Schema, "--brokers", strings.Join(k.Brokers, ","),
		"--listen", "127.0.0.1:0")
	base := consoleURL(t, p)
	for path, want := range map[string]string{"": "pending", "outbox/events": "event(s) match", "dlq": "dead-letter topics", "health": "Consumer groups", "audit": "Nothing done"} {
		if code, body := httpGet(t, base+path); code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET /%s: %d, want 200 with %q\n%.500s", path, code, want, body)
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(t, 30*time.Second); code != exitOK {
		t.Errorf("exit %d after SIGTERM, want 0", code)
	}
}

// TestConsoleBeyondTheLoopbackNeedsATokenToSignIn: listening on every
// address with COURIER_CONSOLE_TOKEN set, the console sends a browser to
// its sign-in page, and a bearer token opens the pages.
func TestConsoleBeyondTheLoopbackNeedsATokenToSignIn(t *testing.T) {
	t.Parallel()
	const token = "a-token-of-twenty-four-chars"
	o := newOutboxDB(t)
	k := testkit.NewKafka(t)
	p := startProcessWithEnv(t, []string{"COURIER_CONSOLE_TOKEN=ana:" + token}, "console", "--database-url", o.URL, "--schema", o.Schema,
		"--brokers", strings.Join(k.Brokers, ","), "--listen", "0.0.0.0:0")
	base := consoleURL(t, p)
	port := base[strings.LastIndex(base, ":")+1 : len(base)-1]
	local := "http://127.0.0.1:" + port
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(local + "/outbox/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/login") {
		t.Errorf("without a token: %d to %q, want the sign-in page", resp.StatusCode, resp.Header.Get("Location"))
	}
	req, err := http.NewRequest(http.MethodGet, local+"/outbox/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err = client.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("with the token: %d, want 200", resp.StatusCode)
	}
	if strings.Contains(p.stdout.String()+p.stderr.String(), token) {
		t.Errorf("the console printed its token")
	}
}

// TestConsoleUsageErrorsExitTwo: an address beyond the loopback without
// tokens, tokens too short or malformed, a relay URL that is no http URL
// or holds a password, bad retry delays and a bad schema are refused
// before anything is served.
func TestConsoleUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	base := []string{"console", "--database-url", "postgres://app:s3cr3t@127.0.0.1:1/shop?connect_timeout=1", "--brokers", "127.0.0.1:1"}
	for _, args := range [][]string{
		{"--listen", "0.0.0.0:8080"},
		{"--listen", "nonsense"},
		{"--relay", "ftp://relay:9090/healthz"},
		{"--relay", "http://user:pw@relay:9090/healthz"},
		{"--retry-delays", "0s"},
		{"--schema", "Bad-Schema"},
		{"extra"},
	} {
		code, out, errOut := courier(t, append(append([]string{}, base...), args...)...)
		if code != exitUsage || strings.Contains(out+errOut, "s3cr3t") {
			t.Errorf("courier console %v: exit %d, want %d without the password\n%s%s", args, code, exitUsage, out, errOut)
		}
	}
	for _, env := range []string{"COURIER_CONSOLE_TOKEN=short", "COURIER_CONSOLE_TOKEN=ana:a-token-of-twenty-four-chars,bob",
		"COURIER_CONSOLE_TOKEN=ana:a-token-of-twenty-four-chars,ana:another-token-of-24-chars"} {
		p := startProcessWithEnv(t, []string{env}, append(append([]string{}, base...), "--listen", "0.0.0.0:0")...)
		if code := p.exitCode(t, 30*time.Second); code != exitUsage || strings.Contains(p.stderr.String(), "a-token-of") {
			t.Errorf("%s: exit %d, want %d without the token in the message\n%s", env, code, exitUsage, p.stderr.String())
		}
	}
}

// TestParseTokens: one token is named "token"; pairs are name:token.
func TestParseTokens(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]map[string]string{
		"":                   {},
		"abc":                {"token": "abc"},
		"ana:x, bob:y":       {"ana": "x", "bob": "y"},
		"ana:x:with-a-colon": {"ana": "x:with-a-colon"},
	} {
		got, err := parseTokens(raw)
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("parseTokens(%q) = %v, %v; want %v", raw, got, err, want)
		}
	}
	for _, raw := range []string{"ana:x,bob", "ana:x,ana:y"} {
		if _, err := parseTokens(raw); err == nil {
			t.Errorf("parseTokens(%q) took it", raw)
		}
	}
}
