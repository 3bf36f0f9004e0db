package testkit

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// AskProbe sends a GET to a health probe and returns its status and its
// JSON body decoded into T.
func AskProbe[T any](t testing.TB, probe http.Handler) (int, T) {
	t.Helper()
	w := httptest.NewRecorder()
	probe.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/probe", nil))
	var a T
	if err := json.Unmarshal(w.Body.Bytes(), &a); err != nil {
		t.Fatalf("probe answered %d with a body that is not JSON (%v): %q", w.Code, err, w.Body.String())
	}
	return w.Code, a
}

// CheckProbes serves each probe at its path and checks its HTTP surface:
// GET answers status with a JSON body of exactly the fields of want[path],
// Content-Type application/json and Cache-Control no-store; HEAD the same
// status and headers without a body; POST, PUT and DELETE 405, allowing
// GET and HEAD.
func CheckProbes(t testing.TB, status int, probes map[string]http.Handler, want map[string]map[string]any) {
	t.Helper()
	mux := http.NewServeMux()
	for path, h := range probes {
		mux.Handle(path, h)
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	do := func(method, path string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, string(body)
	}
	for path, fields := range want {
		resp, body := do(http.MethodGet, path)
		if resp.StatusCode != status {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, status)
		}
		if ct, cc := resp.Header.Get("Content-Type"), resp.Header.Get("Cache-Control"); ct != "application/json" || cc != "no-store" {
			t.Errorf("GET %s: Content-Type %q, Cache-Control %q; want application/json and no-store", path, ct, cc)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(body), &got); err != nil {
			t.Fatalf("GET %s: body %q is not JSON: %v", path, body, err)
		}
		if len(got) != len(fields) {
			t.Errorf("GET %s: fields %v, want exactly %v", path, got, fields)
		}
		for k, v := range fields {
			if got[k] != v {
				t.Errorf("GET %s: %s is %v, want %v (body %s)", path, k, got[k], v, body)
			}
		}

		resp, body = do(http.MethodHead, path)
		if resp.StatusCode != status || body != "" || resp.Header.Get("Content-Type") != "application/json" ||
			resp.Header.Get("Cache-Control") != "no-store" {
			t.Errorf("HEAD %s: %d %q %v, want %d with the headers and no body", path, resp.StatusCode, body, resp.Header, status)
		}

		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
			resp, body = do(method, path)
			if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" ||
				!strings.Contains(body, `"status":"method_not_allowed"`) {
				t.Errorf("%s %s: %d, Allow %q, body %q; want 405 allowing GET, HEAD", method, path, resp.StatusCode, resp.Header.Get("Allow"), body)
			}
		}
	}
}
