package psp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/courierkit/courier/consumer"
)

// DefaultTimeout is a Client's per-call timeout when NewClient is given 0
// or less.
const DefaultTimeout = 2 * time.Second

// ErrTimeout is matched by the error of a call that got no answer within
// the Client's timeout.
var ErrTimeout = errors.New("psp: timeout")

// StatusError is the error of a call the PSP answered with a status other
// than 2xx. Pay returns it wrapped: in consumer.Permanent for 422, in
// consumer.Unavailable for 502, 503 and 504, in consumer.RetryAfter and
// consumer.Unavailable for 429, bare otherwise; errors.As finds it.
type StatusError struct {
	// StatusCode is the HTTP status code, e.g. 503.
	StatusCode int
	// Status is the HTTP status line, e.g. "503 Service Unavailable".
	Status string
	// Reason is the PSP's explanation from the answer's body, if any.
	Reason string
}

func (e *StatusError) Error() string {
	if e.Reason == "" {
		return "psp: " + e.Status
	}
	return "psp: " + e.Status + ": " + e.Reason
}

// Client pays payouts through a PSP's HTTP API (a Server's, or one speaking
// the same protocol). It is safe for concurrent use.
type Client struct {
	url     string
	timeout time.Duration
	http    *http.Client
}

// NewClient returns a Client of the PSP at url (e.g. Server.URL()) that
// gives each call timeout to answer; 0 or less means DefaultTimeout.
func NewClient(url string, timeout time.Duration) *Client {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Client{
		url:     strings.TrimSuffix(url, "/"),
		timeout: timeout,
		http:    &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()},
	}
}

// Close closes the Client's idle connections. A Client can still be used
// after Close; it opens new ones.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Pay asks the PSP to pay p, with p.ID as the idempotency key, and returns
// nil once the PSP accepted it (paying it now or having paid it before).
// Its errors steer a consumer.Handler and a consumer.Breaker around Pay:
//
//   - 422 (the PSP refused p): consumer.Permanent(*StatusError), no retry
//     can fix it;
//   - 502, 503, 504 (the PSP, or its gateway, is down):
//     consumer.Unavailable(*StatusError), worth retrying, and counted by
//     a Breaker;
//   - 429: consumer.RetryAfter(consumer.Unavailable(*StatusError), the
//     answer's Retry-After, 1s when missing), counted by a Breaker too;
//   - a timeout: consumer.Unavailable of ErrTimeout; a connection error: a
//     plain error wrapping net/http's, which a Breaker counts too (see
//     consumer.IsUnavailable);
//   - other answers (a 500, a 400: about this payout): a plain
//     *StatusError, worth retrying, which a Breaker does not count, so one
//     payout the PSP chokes on cannot open it.
//
// When ctx ends first, the error wraps ctx.Err().
func (c *Client) Pay(ctx context.Context, p Payout) error {
	body, err := json.Marshal(p)
	if err != nil {
		return consumer.Permanent(fmt.Errorf("psp: encode payout %s: %w", p.ID, err))
	}
	callCtx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(callCtx, http.MethodPost, c.url+Path, bytes.NewReader(body))
	if err != nil {
		return consumer.Permanent(fmt.Errorf("psp: bad PSP URL %q: %w", c.url, err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", p.ID)

	resp, err := c.http.Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("psp: payout %s abandoned: %w", p.ID, ctx.Err())
		case callCtx.Err() != nil:
			return consumer.Unavailable(fmt.Errorf("%w after %v", ErrTimeout, c.timeout))
		}
		return fmt.Errorf("psp: unreachable at %s (is it running?): %w", c.url, err)
	}
	defer resp.Body.Close()
	var res result
	raw, readErr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		return nil // the answer's body is informative only
	}
	if readErr == nil {
		_ = json.Unmarshal(raw, &res)
	}
	serr := &StatusError{StatusCode: resp.StatusCode, Status: resp.Status, Reason: res.Error}
	switch resp.StatusCode {
	case http.StatusUnprocessableEntity:
		return consumer.Permanent(serr)
	case http.StatusTooManyRequests:
		return consumer.RetryAfter(consumer.Unavailable(serr), retryAfter(resp.Header.Get("Retry-After")))
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return consumer.Unavailable(serr)
	}
	return serr
}

// retryAfter parses a Retry-After header (seconds or an HTTP date); a
// missing or unparsable one means 1s.
func retryAfter(h string) time.Duration {
	if secs, err := strconv.ParseInt(strings.TrimSpace(h), 10, 64); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0)
	}
	return time.Second
}
