package psp_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/examples/payouts/psp"
	"github.com/courierkit/courier/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// start starts a Server and a Client of it, both closed at the test's end.
func start(t *testing.T, timeout time.Duration) (*psp.Server, *psp.Client) {
	t.Helper()
	s, err := psp.Start()
	if err != nil {
		t.Fatal(err)
	}
	c := psp.NewClient(s.URL(), timeout)
	t.Cleanup(func() {
		c.Close()
		s.Close()
	})
	return s, c
}

var valid = psp.Payout{ID: "evt-1", OrderID: "ord-1", AmountCents: 1250, Currency: "EUR"}

func TestPayOKIsIdempotent(t *testing.T) {
	t.Parallel()
	s, c := start(t, 0)
	ctx := context.Background()
	for range 3 {
		if err := c.Pay(ctx, valid); err != nil {
			t.Fatalf("Pay: %v", err)
		}
	}
	other := valid
	other.ID = "evt-2"
	if err := c.Pay(ctx, other); err != nil {
		t.Fatalf("Pay: %v", err)
	}
	if got := s.Paid(); got != 2 {
		t.Errorf("Paid() = %d, want 2", got)
	}
	if got := s.Calls(); got != 4 {
		t.Errorf("Calls() = %d, want 4", got)
	}
	if got := s.Duplicates(); got != 2 {
		t.Errorf("Duplicates() = %d, want 2", got)
	}
	if p, ok := s.PaidPayout("evt-1"); !ok || p != valid {
		t.Errorf("PaidPayout(evt-1) = %+v, %v; want %+v, true", p, ok, valid)
	}
}

func TestPayConcurrentSameIDPaysOnce(t *testing.T) {
	t.Parallel()
	s, c := start(t, 0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := c.Pay(context.Background(), valid); err != nil {
				t.Errorf("Pay: %v", err)
			}
		})
	}
	wg.Wait()
	if s.Paid() != 1 || s.Duplicates() != 7 || s.Calls() != 8 {
		t.Errorf("Paid, Duplicates, Calls = %d, %d, %d; want 1, 7, 8", s.Paid(), s.Duplicates(), s.Calls())
	}
}

func TestPayRejectedIsPermanent(t *testing.T) {
	t.Parallel()
	s, c := start(t, 0)
	for _, tc := range []struct {
		name   string
		p      psp.Payout
		reason string
	}{
		{"zero amount", psp.Payout{ID: "a", AmountCents: 0, Currency: "EUR"}, "amount_cents is 0; it must be above 0"},
		{"negative amount", psp.Payout{ID: "b", AmountCents: -5, Currency: "EUR"}, "amount_cents is -5; it must be above 0"},
		{"no currency", psp.Payout{ID: "c", AmountCents: 100}, "currency is empty; send an ISO 4217 code, e.g. EUR"},
		{"no id", psp.Payout{AmountCents: 100, Currency: "EUR"}, "id is empty; send an idempotency key, e.g. the event id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Pay(context.Background(), tc.p)
			var perm *consumer.PermanentError
			if !errors.As(err, &perm) {
				t.Fatalf("Pay = %v, want a consumer.PermanentError", err)
			}
			var serr *psp.StatusError
			if !errors.As(err, &serr) || serr.StatusCode != 422 || serr.Reason != tc.reason {
				t.Fatalf("Pay = %v, want a 422 StatusError with reason %q", err, tc.reason)
			}
			if want := "permanent: psp: 422 Unprocessable Entity: " + tc.reason; err.Error() != want {
				t.Errorf("Pay error = %q, want %q", err, want)
			}
		})
	}
	if s.Paid() != 0 || s.Calls() != 4 {
		t.Errorf("Paid, Calls = %d, %d; want 0, 4", s.Paid(), s.Calls())
	}
}

func TestPayFailIsTransient(t *testing.T) {
	t.Parallel()
	s, c := start(t, 0)
	s.SetMode(psp.ModeFail)
	err := c.Pay(context.Background(), valid)
	var serr *psp.StatusError
	if !errors.As(err, &serr) || serr.StatusCode != 503 {
		t.Fatalf("Pay = %v, want a 503 StatusError", err)
	}
	var perm *consumer.PermanentError
	var ra *consumer.RetryAfterError
	if errors.As(err, &perm) || errors.As(err, &ra) || !errors.Is(err, consumer.ErrUnavailable) {
		t.Fatalf("Pay = %v, want a transient error marked consumer.Unavailable", err)
	}
	if want := "psp: 503 Service Unavailable: the PSP is down (stub in ModeFail)"; err.Error() != want {
		t.Errorf("Pay error = %q, want %q", err, want)
	}
	s.SetMode(psp.ModeOK)
	if err := c.Pay(context.Background(), valid); err != nil {
		t.Fatalf("Pay after recovery: %v", err)
	}
	if s.Paid() != 1 || s.Calls() != 2 || s.Duplicates() != 0 {
		t.Errorf("Paid, Calls, Duplicates = %d, %d, %d; want 1, 2, 0", s.Paid(), s.Calls(), s.Duplicates())
	}
}

func TestPayTimeout(t *testing.T) {
	t.Parallel()
	s, c := start(t, 50*time.Millisecond)
	s.SetMode(psp.ModeTimeout)
	err := c.Pay(context.Background(), valid)
	if !errors.Is(err, psp.ErrTimeout) {
		t.Fatalf("Pay = %v, want ErrTimeout", err)
	}
	if want := "psp: timeout after 50ms"; err.Error() != want {
		t.Errorf("Pay error = %q, want %q", err, want)
	}
	if !consumer.IsUnavailable(err) {
		t.Errorf("Pay = %v, want an error a consumer.Breaker counts", err)
	}
	if s.Paid() != 0 || s.Calls() != 1 {
		t.Errorf("Paid, Calls = %d, %d; want 0, 1", s.Paid(), s.Calls())
	}
}

func TestPayCallerContextEnds(t *testing.T) {
	t.Parallel()
	s, c := start(t, time.Minute)
	s.SetMode(psp.ModeTimeout)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Pay(ctx, valid) }()
	waitFor(t, func() bool { return s.Calls() == 1 })
	cancel()
	err := <-done
	if !errors.Is(err, context.Canceled) || errors.Is(err, psp.ErrTimeout) {
		t.Fatalf("Pay = %v, want context.Canceled and no ErrTimeout", err)
	}
}

func TestCloseEndsHangingCalls(t *testing.T) {
	t.Parallel()
	s, err := psp.Start()
	if err != nil {
		t.Fatal(err)
	}
	c := psp.NewClient(s.URL(), time.Minute)
	defer c.Close()
	s.SetMode(psp.ModeTimeout)
	done := make(chan error, 1)
	go func() { done <- c.Pay(context.Background(), valid) }()
	waitFor(t, func() bool { return s.Calls() == 1 })
	s.Close()
	if err := <-done; err == nil || errors.Is(err, psp.ErrTimeout) || !consumer.IsUnavailable(err) {
		t.Fatalf("Pay = %v, want a connection error, which a consumer.Breaker counts", err)
	}
	s.Close() // idempotent
}

func TestPayRateLimitIsRetryAfter(t *testing.T) {
	t.Parallel()
	s, c := start(t, 0)
	s.SetMode(psp.ModeRateLimit)
	s.SetRetryAfter(2500 * time.Millisecond)
	err := c.Pay(context.Background(), valid)
	var ra *consumer.RetryAfterError
	if !errors.As(err, &ra) || ra.Delay != 3*time.Second {
		t.Fatalf("Pay = %v, want consumer.RetryAfter(…, 3s) (2.5s rounded up to whole seconds)", err)
	}
	var serr *psp.StatusError
	if !errors.As(err, &serr) || serr.StatusCode != 429 {
		t.Fatalf("Pay = %v, want a 429 StatusError", err)
	}
	if s.Paid() != 0 {
		t.Errorf("Paid() = %d, want 0", s.Paid())
	}
}

func TestPayUnreachable(t *testing.T) {
	t.Parallel()
	s, err := psp.Start()
	if err != nil {
		t.Fatal(err)
	}
	url := s.URL()
	s.Close()
	c := psp.NewClient(url, time.Second)
	defer c.Close()
	err = c.Pay(context.Background(), valid)
	var perm *consumer.PermanentError
	if err == nil || errors.As(err, &perm) || errors.Is(err, psp.ErrTimeout) || !consumer.IsUnavailable(err) {
		t.Fatalf("Pay = %v, want a transient connection error, which a consumer.Breaker counts", err)
	}
	t.Logf("Pay to a closed PSP: %v", err)
}

func TestSetModeFor(t *testing.T) {
	t.Parallel()
	s, c := start(t, 0)
	s.SetModeFor(psp.ModeFail, 50*time.Millisecond)
	if err := c.Pay(context.Background(), valid); err == nil {
		t.Fatal("Pay succeeded during the outage")
	}
	waitFor(t, func() bool { return s.Mode() == psp.ModeOK })
	if err := c.Pay(context.Background(), valid); err != nil {
		t.Fatalf("Pay after the outage: %v", err)
	}

	// A later SetModeFor replaces a pending revert: ModeOK comes back
	// after the later one's duration, not the earlier one's.
	s.SetModeFor(psp.ModeFail, time.Millisecond)
	s.SetModeFor(psp.ModeRateLimit, 50*time.Millisecond)
	set := time.Now()
	waitFor(t, func() bool { return s.Mode() == psp.ModeOK })
	if elapsed := time.Since(set); elapsed < 50*time.Millisecond {
		t.Errorf("ModeOK came back after %v, want the later SetModeFor's 50ms", elapsed)
	}
}

// waitFor waits for cond with testkit.WaitFor.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 5*time.Second, "the PSP stub's state", cond)
}

// TestPayForeignAnswers: answers the stub never sends (another PSP's, a
// proxy's) are classified all the same.
func TestPayForeignAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		answer    func(http.ResponseWriter)
		want      string
		permanent bool
		delay     time.Duration // > 0: want consumer.RetryAfter with it
		down      bool          // want consumer.IsUnavailable: a Breaker counts it
	}{
		{"202 is accepted", func(w http.ResponseWriter) { w.WriteHeader(http.StatusAccepted) }, "", false, 0, false},
		{"500 with an HTML body", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte("<html>oops</html>"))
		}, "psp: 500 Internal Server Error", false, 0, false},
		{"400 is transient: only 422 is a refusal", func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadRequest) }, "psp: 400 Bad Request", false, 0, false},
		{"422 without a body", func(w http.ResponseWriter) { w.WriteHeader(http.StatusUnprocessableEntity) }, "permanent: psp: 422 Unprocessable Entity", true, 0, false},
		{"429 without Retry-After waits 1s", func(w http.ResponseWriter) { w.WriteHeader(http.StatusTooManyRequests) }, "psp: 429 Too Many Requests (retry after 1s)", false, time.Second, true},
		{"429 with a Retry-After of 7s", func(w http.ResponseWriter) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(http.StatusTooManyRequests)
		}, "psp: 429 Too Many Requests (retry after 7s)", false, 7 * time.Second, true},
		{"502 from a gateway", func(w http.ResponseWriter) { w.WriteHeader(http.StatusBadGateway) }, "psp: 502 Bad Gateway", false, 0, true},
		{"504 from a gateway", func(w http.ResponseWriter) { w.WriteHeader(http.StatusGatewayTimeout) }, "psp: 504 Gateway Timeout", false, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.answer(w) }))
			defer srv.Close()
			c := psp.NewClient(srv.URL, time.Second)
			defer c.Close()
			err := c.Pay(context.Background(), valid)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Pay = %v, want nil", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Pay = %v, want %q", err, tc.want)
			}
			var perm *consumer.PermanentError
			if errors.As(err, &perm) != tc.permanent {
				t.Errorf("Pay = %v: permanent %t, want %t", err, !tc.permanent, tc.permanent)
			}
			var ra *consumer.RetryAfterError
			if got := errors.As(err, &ra); got != (tc.delay > 0) || (got && ra.Delay != tc.delay) {
				t.Errorf("Pay = %v, want a RetryAfter of %v: %t", err, tc.delay, tc.delay > 0)
			}
			if got := consumer.IsUnavailable(err); got != tc.down {
				t.Errorf("consumer.IsUnavailable(%v) = %t, want %t", err, got, tc.down)
			}
		})
	}
}
