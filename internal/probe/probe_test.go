package probe_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/courierkit/courier/internal/probe"
)

func TestAProbeAnswersGetAndHeadWithItsVerdict(t *testing.T) {
	for _, tc := range []struct {
		method string
		ok     bool
		status int
		body   bool
	}{
		{http.MethodGet, true, 200, true},
		{http.MethodGet, false, 503, true},
		{http.MethodHead, true, 200, false},
		{http.MethodPost, true, 405, true},
	} {
		p := probe.Func(func() (bool, any) { return tc.ok, probe.Plain{Status: "live", Reason: "Run is running"} })
		rec := httptest.NewRecorder()
		p.ServeHTTP(rec, httptest.NewRequest(tc.method, "/livez", nil))
		if rec.Code != tc.status || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Cache-Control") != "no-store" {
			t.Errorf("%s ok=%v: %d %v", tc.method, tc.ok, rec.Code, rec.Header())
		}
		if got := rec.Body.Len() > 0; got != tc.body {
			t.Errorf("%s: a body %v, want %v", tc.method, got, tc.body)
		}
		if tc.status == 405 && rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("405 without Allow: %v", rec.Header())
		}
		if tc.body {
			var a probe.Plain
			if err := json.Unmarshal(rec.Body.Bytes(), &a); err != nil || a.Status == "" {
				t.Errorf("%s: body %q: %v", tc.method, rec.Body, err)
			}
		}
	}
}

func TestRoundKeepsReasonsShort(t *testing.T) {
	if got := probe.Round(1234567 * time.Microsecond); got != 1235*time.Millisecond {
		t.Errorf("1.234567s: %v", got)
	}
	if got := probe.Round(12345 * time.Millisecond); got != 12300*time.Millisecond {
		t.Errorf("12.345s: %v", got)
	}
}
