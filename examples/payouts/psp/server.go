// Package psp is the payout example's payment service provider (PSP): its
// client, the part to copy into a worker of your own, and an in-process
// HTTP stub of the PSP, so the example and `courier demo` run without a
// real one.
//
// The Server accepts payouts at POST /payouts and pays each Payout.ID at
// most once (PSP-side idempotency): a second call for a paid ID is answered
// 200 and counted in Duplicates, never paid again. SetMode makes it fail
// (503), hang (until the request's context ends) or rate-limit (429 with
// Retry-After), so a worker's retries, breaker and dead-letter paths can be
// watched against it.
//
// The Client's errors steer a consumer.Handler and a consumer.Breaker: a
// refused payout (422) is consumer.Permanent; a PSP that is down (502, 503,
// 504, a timeout) is consumer.Unavailable, and so is a rate limit (429,
// with consumer.RetryAfter); a connection error is a network error. A
// Breaker counts these, and not the other answers (a 500 for one payout).
package psp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Path is where the Server accepts payouts (POST, a JSON Payout).
const Path = "/payouts"

// DefaultRetryAfter is the Retry-After a Server in ModeRateLimit sends until
// SetRetryAfter changes it.
const DefaultRetryAfter = time.Second

// Payout is one payment to make. Its JSON form is the request body of
// POST /payouts.
type Payout struct {
	// ID is the idempotency key, e.g. the event id (ce_id): the PSP pays an
	// ID at most once. Required.
	ID string `json:"id"`
	// OrderID is the order the payout settles.
	OrderID string `json:"order_id"`
	// AmountCents is the amount in minor units; it must be above 0.
	AmountCents int64 `json:"amount_cents"`
	// Currency is the ISO 4217 code, e.g. "EUR". Required.
	Currency string `json:"currency"`
}

// Mode is how a Server answers payouts.
type Mode int

// Modes of a Server.
const (
	// ModeOK pays valid payouts (200) and refuses invalid ones (422).
	ModeOK Mode = iota
	// ModeFail answers every call 503 Service Unavailable.
	ModeFail
	// ModeTimeout answers nothing: the call hangs until its request's
	// context ends (the client gives up or the Server closes).
	ModeTimeout
	// ModeRateLimit answers every call 429 Too Many Requests with a
	// Retry-After header (see SetRetryAfter).
	ModeRateLimit
)

// String returns the mode's name, e.g. "fail".
func (m Mode) String() string {
	switch m {
	case ModeOK:
		return "ok"
	case ModeFail:
		return "fail"
	case ModeTimeout:
		return "timeout"
	case ModeRateLimit:
		return "rate_limit"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Server is a stub PSP listening on 127.0.0.1. Its methods are safe for
// concurrent use. Close it when done.
type Server struct {
	srv      *http.Server
	url      string
	closed   chan struct{} // closed by Close: hanging calls return
	serveErr chan error

	mu         sync.Mutex
	mode       Mode
	retryAfter time.Duration
	revert     *time.Timer // from SetModeFor
	paid       map[string]Payout
	calls      int
	duplicates int
	inflight   int        // handlers running
	idle       *sync.Cond // on mu: signalled when inflight drops to 0
	isClosed   bool       // no handler starts once set
	closeOnce  sync.Once
}

// Start starts a Server in ModeOK on a free port of 127.0.0.1.
func Start() (*Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("psp stub: listen on 127.0.0.1: %w", err)
	}
	s := &Server{
		url:        "http://" + ln.Addr().String(),
		closed:     make(chan struct{}),
		serveErr:   make(chan error, 1),
		retryAfter: DefaultRetryAfter,
		paid:       map[string]Payout{},
	}
	s.idle = sync.NewCond(&s.mu)
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path, s.handlePayout)
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { s.serveErr <- s.srv.Serve(ln) }()
	return s, nil
}

// URL returns the Server's base URL, e.g. "http://127.0.0.1:43121"; pass it
// to NewClient.
func (s *Server) URL() string { return s.url }

// Close stops the Server: calls in flight (hanging ones too) end, and
// Close returns once their handlers have. Close is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.stopRevert()
		s.isClosed = true
		s.mu.Unlock()
		close(s.closed)
		_ = s.srv.Close()
		<-s.serveErr
		s.mu.Lock()
		for s.inflight > 0 {
			s.idle.Wait()
		}
		s.mu.Unlock()
	})
}

// SetMode makes the Server answer every call from now on in mode m. It
// cancels a pending SetModeFor revert.
func (s *Server) SetMode(m Mode) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopRevert()
	s.mode = m
}

// SetModeFor makes the Server answer in mode m for d, then in ModeOK again,
// e.g. SetModeFor(ModeFail, 10*time.Second) for a 10s outage.
func (s *Server) SetModeFor(m Mode, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopRevert()
	s.mode = m
	var t *time.Timer
	t = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.revert == t { // not replaced by a later SetMode/SetModeFor
			s.mode = ModeOK
			s.revert = nil
		}
	})
	s.revert = t
}

func (s *Server) stopRevert() {
	if s.revert != nil {
		s.revert.Stop()
		s.revert = nil
	}
}

// Mode returns the mode the Server answers in now.
func (s *Server) Mode() Mode {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mode
}

// SetRetryAfter sets the Retry-After of ModeRateLimit answers, rounded up
// to whole seconds as HTTP sends it (at least 1s). Defaults to 1s.
func (s *Server) SetRetryAfter(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retryAfter = d
}

// Paid returns how many distinct payouts (by ID) the Server accepted.
func (s *Server) Paid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.paid)
}

// PaidPayout returns the payout paid under id, if any.
func (s *Server) PaidPayout(id string) (Payout, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.paid[id]
	return p, ok
}

// Calls returns how many calls reached the Server, refused and duplicate
// ones included.
func (s *Server) Calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// Duplicates returns how many calls asked to pay an ID paid already; they
// were answered 200 and paid nothing.
func (s *Server) Duplicates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.duplicates
}

// result is the JSON body of every answer.
type result struct {
	Status string `json:"status"`          // "paid", "duplicate", "rejected", "unavailable", "rate_limited"
	Error  string `json:"error,omitempty"` // why, when not paid
}

func (s *Server) handlePayout(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	if s.isClosed {
		s.mu.Unlock()
		return
	}
	s.inflight++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.inflight--; s.inflight == 0 {
			s.idle.Broadcast()
		}
		s.mu.Unlock()
	}()

	var p Payout
	decodeErr := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&p)

	s.mu.Lock()
	s.calls++
	mode, retryAfter := s.mode, s.retryAfter
	s.mu.Unlock()

	switch mode {
	case ModeFail:
		reply(w, http.StatusServiceUnavailable, result{Status: "unavailable", Error: "the PSP is down (stub in ModeFail)"})
		return
	case ModeTimeout:
		select {
		case <-r.Context().Done():
		case <-s.closed:
		}
		// Drop the connection without an answer: a handler that just
		// returned would answer 200, as if it had paid.
		panic(http.ErrAbortHandler)
	case ModeRateLimit:
		secs := max(int64((retryAfter+time.Second-1)/time.Second), 1)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		reply(w, http.StatusTooManyRequests, result{Status: "rate_limited", Error: "too many requests (stub in ModeRateLimit)"})
		return
	}

	if err := validate(p, decodeErr); err != nil {
		reply(w, http.StatusUnprocessableEntity, result{Status: "rejected", Error: err.Error()})
		return
	}
	s.mu.Lock()
	_, dup := s.paid[p.ID]
	if dup {
		s.duplicates++
	} else {
		s.paid[p.ID] = p
	}
	s.mu.Unlock()
	if dup {
		reply(w, http.StatusOK, result{Status: "duplicate"})
		return
	}
	reply(w, http.StatusOK, result{Status: "paid"})
}

// validate says why the PSP refuses a payout, or nil.
func validate(p Payout, decodeErr error) error {
	switch {
	case decodeErr != nil:
		return fmt.Errorf("body is not a JSON payout: %v", decodeErr)
	case p.ID == "":
		return errors.New("id is empty; send an idempotency key, e.g. the event id")
	case p.AmountCents <= 0:
		return fmt.Errorf("amount_cents is %d; it must be above 0", p.AmountCents)
	case p.Currency == "":
		return errors.New("currency is empty; send an ISO 4217 code, e.g. EUR")
	}
	return nil
}

func reply(w http.ResponseWriter, code int, body result) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}
