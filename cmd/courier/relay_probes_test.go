package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/internal/testkit"
)

// TestRelayServesLivezAndReadyz: `courier relay --metrics-addr` serves the
// relay's probes beside /metrics and /healthz: /livez and /readyz answer
// 200 with their JSON once the relay runs and has made progress, /healthz
// answers as it did, and a POST to a probe is refused with 405.
func TestRelayServesLivezAndReadyz(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	k := testkit.NewKafka(t)
	r := startRelay(t, append(o.flags(), "--brokers", strings.Join(k.Brokers, ","), "--metrics-addr", "127.0.0.1:0",
		"--log-format", "json", "--poll-interval", "50ms")...)
	served := waitLog(t, &r.stderr, "serving metrics")
	if paths := served["paths"]; paths != "/metrics /healthz /livez /readyz" {
		t.Errorf("serving metrics on paths %q, want /metrics /healthz /livez /readyz", paths)
	}
	base := "http://" + served["addr"].(string)
	var code int
	var body string
	testkit.WaitFor(t, 30*time.Second, "GET /livez to answer 200", func() bool {
		code, body = httpGet(t, base+"/livez")
		return code == http.StatusOK
	})
	if !strings.Contains(body, `"status":"live"`) {
		t.Errorf("GET /livez: %d %s, want status live", code, body)
	}
	testkit.WaitFor(t, 30*time.Second, "GET /readyz to answer 200", func() bool {
		code, body = httpGet(t, base+"/readyz")
		return code == http.StatusOK
	})
	if !strings.Contains(body, `"status":"ready"`) || !strings.Contains(body, `"breaker":"closed"`) || !strings.Contains(body, `"held_partitions":0`) {
		t.Errorf("GET /readyz: %d %s, want ready with the breaker closed and no partition held", code, body)
	}
	if code, body := httpGet(t, base+"/healthz"); code != http.StatusOK || !strings.Contains(body, `"status":"ok"`) {
		t.Errorf("GET /healthz: %d %s, want 200 ok as before", code, body)
	}
	for _, path := range []string{"/livez", "/readyz"} {
		resp, err := http.Post(base+path, "application/json", nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("POST %s: %d, Allow %q; want 405 allowing GET, HEAD", path, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	if code := r.stop(t); code != exitOK {
		t.Errorf("courier relay exited %d, want 0", code)
	}
}
