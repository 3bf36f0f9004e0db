// Package probe answers Kubernetes health probes for the consumer and
// the relay: a Func is an http.Handler that answers GET and HEAD with a
// verdict and a small JSON body, and 405 to any other method.
package probe

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"
)

// Func is an http.Handler that answers GET and HEAD with its verdict: 200
// when it reports ok, 503 otherwise, with its body as JSON,
// Content-Type application/json and Cache-Control no-store. Any other
// method gets 405 and Allow: GET, HEAD.
type Func func() (ok bool, body any)

// ServeHTTP answers the probe.
func (p Func) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	status, body := http.StatusMethodNotAllowed, any(Plain{Status: "method_not_allowed", Reason: "a probe answers GET and HEAD only"})
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		var ok bool
		ok, body = p()
		status = http.StatusServiceUnavailable
		if ok {
			status = http.StatusOK
		}
	} else {
		w.Header().Set("Allow", "GET, HEAD")
	}
	b, err := json.Marshal(body)
	if err != nil { // the answers are plain structs of strings, ints and bools
		b, status = []byte(`{"status":"error"}`), http.StatusInternalServerError
	}
	b = append(b, '\n')
	hd := w.Header()
	hd.Set("Content-Type", "application/json")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(b)
	}
}

// Plain is the body of a liveness answer, and of a refused method.
type Plain struct {
	Status string `json:"status"` // "live", "not_live" or "method_not_allowed"
	Reason string `json:"reason"`
}

// Liveness is the verdict and body of a liveness probe of a component
// whose Run is running, or has returned: live only while it runs.
func Liveness(running, returned bool) (bool, any) {
	switch {
	case running:
		return true, Plain{Status: "live", Reason: "Run is running"}
	case returned:
		return false, Plain{Status: "not_live", Reason: "Run has returned"}
	}
	return false, Plain{Status: "not_live", Reason: "Run has not started"}
}

// Round rounds d for a reason: to the millisecond, to 100ms past 10s.
func Round(d time.Duration) time.Duration {
	if d > 10*time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}
