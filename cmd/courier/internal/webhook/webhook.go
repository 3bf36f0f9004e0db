// Package webhook pages from courier relay: a Notifier POSTs a JSON
// notification to one URL for each dead-lettered event (OnDeadLetter, for
// producer.RelayConfig.OnDeadLetter) and each time the relay's circuit
// breaker around Kafka opens or closes (BreakerChanged, a
// producer.BreakerChangedHook).
//
// It never blocks the relay: the relay's calls only put the notification
// in a bounded queue, which Run empties from its own goroutine. When the
// queue is full the notification is dropped, counted (Stats) and logged,
// at most once a minute. Each POST has a timeout; network errors, 5xx and
// 429 are retried with backoff (a Retry-After of up to MaxRetryAfter is
// honoured), any other answer is final. When Run's context ends it sends
// what is queued within Config.DrainTimeout and then gives up, saying how
// many notifications it abandoned.
//
// A body never holds an event's payload. Text from outside (keys, error
// messages) is valid UTF-8 with control characters replaced and cut to a
// bound. The URL's password and path and the headers' values are never
// logged: the URL is shown as scheme://user:xxxxx@host/….
package webhook

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/internal/redact"
	"github.com/courierkit/courier/internal/textcut"
	"github.com/courierkit/courier/producer"
)

// Defaults and bounds of Config.
const (
	// DefaultTimeout bounds one POST, from MinTimeout to MaxTimeout.
	DefaultTimeout = 5 * time.Second
	MinTimeout     = 100 * time.Millisecond
	MaxTimeout     = time.Minute
	// DefaultRetries is how many times a failed POST is sent again, at
	// most MaxRetries; NoRetries sends it once.
	DefaultRetries = 3
	MaxRetries     = 10
	NoRetries      = -1
	// DefaultQueueSize is how many notifications wait for the sender, at
	// most MaxQueueSize.
	DefaultQueueSize = 100
	MaxQueueSize     = 10000
	// DefaultDrainTimeout is how long Run sends what is queued once its
	// context ended, at most MaxTimeout.
	DefaultDrainTimeout = 10 * time.Second
	// MaxRetryAfter caps the wait a Retry-After header asks for.
	MaxRetryAfter = time.Minute
	// MaxHeaders bounds Config.Header: names, and values per name.
	MaxHeaders = 32
	// MaxHeaderValueLen bounds each header value, in bytes.
	MaxHeaderValueLen = 8 << 10
	// MaxErrorLen bounds the error text of a dead letter, and
	// MaxFieldLen every other text field, in bytes.
	MaxErrorLen = 2048
	MaxFieldLen = 256
)

// DefaultBackoff spaces the retries of a POST: 500ms, 1s, 2s … up to 30s,
// ±20%.
var DefaultBackoff = backoff.Backoff{Base: 500 * time.Millisecond, Factor: 2, Max: 30 * time.Second, Jitter: 0.2}

// dropLogInterval is the least time between two logs of a full queue.
const dropLogInterval = time.Minute

// Kinds of notification.
const (
	KindDeadLetter = "dead_letter"
	KindBreaker    = "breaker"
)

// Version is the version of the JSON body.
const Version = 1

// Config configures a Notifier.
type Config struct {
	// URL receives the POSTs: http or https, with a host. A user:password
	// in it is sent as basic authentication and never printed. Required.
	URL string
	// Header is added to each POST, e.g. Authorization. At most MaxHeaders
	// names, each a valid token and not one the client sets itself (Host,
	// Content-Length, Transfer-Encoding, Connection), each value at most
	// MaxHeaderValueLen bytes without control characters. Values are never
	// logged. Defaults to none.
	Header http.Header
	// Timeout bounds each POST, from MinTimeout (100ms) to MaxTimeout
	// (1m). Defaults to 5s.
	Timeout time.Duration
	// Retries is how many times a POST that failed for a network error, a
	// 5xx or a 429 is sent again, at most MaxRetries (10); NoRetries for
	// none. Defaults to 3.
	Retries int
	// Backoff spaces the retries. Zero fields take DefaultBackoff's.
	Backoff backoff.Backoff
	// QueueSize is how many notifications may wait for the sender; more are
	// dropped. At most MaxQueueSize (10,000). Defaults to 100.
	QueueSize int
	// DrainTimeout is how long Run keeps sending once its context ended,
	// at most MaxTimeout (1m). Defaults to 10s.
	DrainTimeout time.Duration
	// Relay names the relay in each body, e.g. its CloudEvents source.
	// Defaults to "courier".
	Relay string
	// Host names the machine in each body. Defaults to os.Hostname.
	Host string
	// Table is the relay's outbox, schema.table, in each body. Defaults to
	// none.
	Table string
	// Logger receives what went wrong. Defaults to slog.Default().
	Logger *slog.Logger
}

// Notification is the JSON body of a POST. Kind says which of DeadLetter
// and Breaker is set.
type Notification struct {
	Version int       `json:"version"`
	Kind    string    `json:"kind"`
	Time    time.Time `json:"time"`
	Relay   string    `json:"relay"`
	Host    string    `json:"host"`
	Table   string    `json:"table,omitempty"`
	// Text is one line for people; chat webhooks such as Slack's show it.
	// Its &, < and > are escaped as &amp;, &lt; and &gt;, as Slack asks,
	// so that a key such as <!channel> is shown, never acted on; the
	// fields of DeadLetter and Breaker hold the text as it is.
	Text       string      `json:"text"`
	DeadLetter *DeadLetter `json:"dead_letter,omitempty"`
	Breaker    *Breaker    `json:"breaker,omitempty"`
}

// DeadLetter is an event the relay gave up on, without its payload.
type DeadLetter struct {
	EventID       string    `json:"event_id"`
	Topic         string    `json:"topic"`
	Key           string    `json:"key"`
	Type          string    `json:"type"`
	TenantID      string    `json:"tenant_id,omitempty"`
	CorrelationID string    `json:"correlation_id,omitempty"`
	Attempts      int       `json:"attempts"`
	Permanent     bool      `json:"permanent"`
	Error         string    `json:"error"`
	FirstFailedAt time.Time `json:"first_failed_at"`
	FailedAt      time.Time `json:"failed_at"`
}

// Breaker is a change of the circuit breaker around Kafka: to "open" when
// the relay stops publishing, to "closed" when it resumes. OpenSeconds,
// on closing, is how long it was not closed.
type Breaker struct {
	From        string  `json:"from"`
	To          string  `json:"to"`
	OpenSeconds float64 `json:"open_seconds,omitempty"`
}

// Stats counts the notifications of a Notifier.
type Stats struct {
	// Sent were answered 2xx.
	Sent int64
	// Failed were refused (a 3xx or 4xx other than 429) or still failing
	// after the retries.
	Failed int64
	// Dropped met a full queue.
	Dropped int64
	// Abandoned were queued or in flight when the drain timed out.
	Abandoned int64
}

// Notifier sends the notifications; see the package doc.
type Notifier struct {
	cfg     Config
	url     *url.URL
	secrets []string // masked in whatever is logged
	client  *http.Client
	log     *slog.Logger
	queue   chan Notification

	breakerMu  sync.Mutex
	breaker    producer.BreakerState
	openedAt   time.Time
	lastDropNS atomic.Int64
	running    atomic.Bool

	sent, failed, dropped, abandoned atomic.Int64
	// longestSecret is the length of the longest of secrets.
	longestSecret int
}

// The relay's hook interface a Notifier implements.
var _ producer.BreakerChangedHook = (*Notifier)(nil)

// New returns a Notifier for cfg, after applying the defaults; an invalid
// field is an error naming it, without the URL's password or path or a
// header's value. Call Run to send.
func New(cfg Config) (*Notifier, error) {
	cfg = cfg.withDefaults()
	u, err := ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("URL: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Notifier{
		cfg:   cfg,
		url:   u,
		log:   cfg.Logger.With("webhook", Redacted(u)),
		queue: make(chan Notification, cfg.QueueSize),
		client: &http.Client{
			// Its own connections, which Run closes when it returns.
			Transport: http.DefaultTransport.(*http.Transport).Clone(),
			// A redirect is answered, not followed: it would carry the
			// headers elsewhere.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
	var values []string
	for _, vs := range cfg.Header {
		values = append(values, vs...)
	}
	n.secrets = Secrets(u, values...)
	for _, secret := range n.secrets {
		n.longestSecret = max(n.longestSecret, len(secret))
	}
	return n, nil
}

func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Retries == 0 {
		c.Retries = DefaultRetries
	}
	c.Backoff = c.Backoff.WithDefaults(DefaultBackoff)
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = DefaultDrainTimeout
	}
	if c.Relay == "" {
		c.Relay = "courier"
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Timeout < MinTimeout || c.Timeout > MaxTimeout:
		return fmt.Errorf("Timeout %v: use %v to %v", c.Timeout, MinTimeout, MaxTimeout)
	case c.Retries != NoRetries && (c.Retries < 0 || c.Retries > MaxRetries):
		return fmt.Errorf("Retries %d: use 1 to %d, or NoRetries", c.Retries, MaxRetries)
	case c.QueueSize < 1 || c.QueueSize > MaxQueueSize:
		return fmt.Errorf("QueueSize %d: use 1 to %d", c.QueueSize, MaxQueueSize)
	case c.DrainTimeout < 0 || c.DrainTimeout > MaxTimeout:
		return fmt.Errorf("DrainTimeout %v: use a positive duration up to %v", c.DrainTimeout, MaxTimeout)
	case len(c.Header) > MaxHeaders:
		return fmt.Errorf("Header has %d names: use at most %d", len(c.Header), MaxHeaders)
	}
	if err := c.Backoff.Validate(); err != nil {
		return fmt.Errorf("Backoff.%w", err)
	}
	for name, values := range c.Header {
		if err := checkHeader(name, values); err != nil {
			return fmt.Errorf("Header: %w", err)
		}
	}
	return nil
}

// reservedHeaders are set by the HTTP client itself.
var reservedHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection"}

// checkHeader refuses a name that is not an HTTP token or that the client
// sets, and a value too long or holding a control character; the error
// names the header, never its value.
func checkHeader(name string, values []string) error {
	if !isToken(name) {
		return fmt.Errorf("name %q: use letters, digits and !#$%%&'*+-.^_`|~, e.g. Authorization", name)
	}
	for _, r := range reservedHeaders {
		if strings.EqualFold(name, r) {
			return fmt.Errorf("%s is set by the HTTP client; leave it out", r)
		}
	}
	if len(values) > MaxHeaders {
		return fmt.Errorf("%s has %d values: use at most %d", name, len(values), MaxHeaders)
	}
	for _, v := range values {
		if len(v) > MaxHeaderValueLen {
			return fmt.Errorf("the value of %s is %d bytes: use at most %d", name, len(v), MaxHeaderValueLen)
		}
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
				return fmt.Errorf("the value of %s holds a control character at byte %d; remove it", name, i)
			}
		}
	}
	return nil
}

// isToken reports whether s is an HTTP token (RFC 9110 section 5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// ParseHeader reads "Name: value", as curl's -H takes it, for Header. Its
// error names the header by position and name, never by value.
func ParseHeader(s string) (name, value string, err error) {
	name, value, ok := strings.Cut(s, ":")
	if !ok {
		return "", "", errors.New(`no ":"; use "Name: value", e.g. "Authorization: Bearer <token>"`)
	}
	name, value = strings.TrimSpace(name), strings.TrimSpace(value)
	if err := checkHeader(name, []string{value}); err != nil {
		return "", "", err
	}
	return name, value, nil
}

// ParseURL parses and checks a webhook URL: http or https with a host. Its
// error shows the URL as Redacted does, or nothing of it when it cannot be
// parsed (the parser's message would quote it).
func ParseURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("missing; give the http or https address that receives the notifications")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("not a URL; give one such as https://hooks.example.com/courier")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("%q: use an http:// or https:// URL", Redacted(u))
	case u.Host == "" || u.Hostname() == "":
		return nil, fmt.Errorf("%q has no host; use one such as https://hooks.example.com/courier", Redacted(u))
	}
	return u, nil
}

// minSecretLen is the shortest value, path segment or query value Secrets
// counts as a secret: a shorter one ("prod", "1") is too common to mask
// wherever it appears, and too short to be a credential.
const minSecretLen = 6

// Secrets returns what must never be printed of a webhook at u sent with
// headerValues (the values of its headers): the URL's password, its user
// when it has no password, the basic authentication they make, its path
// and query and each of their segments and values, and each header value
// and each word of it (the token of "Bearer <token>"). Pieces shorter than
// 6 bytes are left out, but a password or lone user of 3 or more.
func Secrets(u *url.URL, headerValues ...string) []string {
	var out []string
	add := func(min int, values ...string) {
		for _, v := range values {
			if len(v) >= min {
				out = append(out, v)
			}
		}
	}
	out = append(out, redact.Secrets(u.String())...)
	if u.User != nil {
		user := u.User.Username()
		if pw, ok := u.User.Password(); ok {
			add(3, pw)
			add(minSecretLen, base64.StdEncoding.EncodeToString([]byte(user+":"+pw)))
		} else {
			add(3, user)
		}
	}
	add(minSecretLen, u.EscapedPath(), u.Path, u.RawQuery)
	add(minSecretLen, strings.Split(u.Path, "/")...)
	for _, vs := range u.Query() {
		add(minSecretLen, vs...)
	}
	for _, v := range headerValues {
		v = strings.TrimSpace(v)
		add(minSecretLen, v)
		add(minSecretLen, strings.Fields(v)...)
	}
	return out
}

// Redacted shows u without its password, path or query, which may hold
// secrets (chat services put their token in the path):
// https://user:xxxxx@hooks.example.com/…. A user without a password,
// often a token itself, is masked too: https://xxxxx@hooks.example.com/….
func Redacted(u *url.URL) string {
	shown := url.URL{Scheme: u.Scheme, Host: u.Host}
	if u.User != nil {
		if _, ok := u.User.Password(); ok {
			shown.User = url.UserPassword(u.User.Username(), redact.Mask)
		} else {
			shown.User = url.User(redact.Mask) // a user alone is often a token
		}
	}
	s := shown.String()
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Opaque != "" {
		s += "/…"
	}
	return s
}

// OnDeadLetter queues a notification of d; it never blocks. Its signature
// is producer.RelayConfig.OnDeadLetter's.
func (n *Notifier) OnDeadLetter(_ context.Context, d producer.DeadLetter) {
	dl := &DeadLetter{
		EventID:       d.EventID.String(),
		Topic:         clean(d.Topic, MaxFieldLen),
		Key:           clean(d.Key, MaxFieldLen),
		Type:          clean(d.Type, MaxFieldLen),
		TenantID:      clean(d.TenantID, MaxFieldLen),
		CorrelationID: clean(d.CorrelationID, MaxFieldLen),
		Attempts:      d.Attempts,
		Permanent:     d.Permanent,
		Error:         clean(d.Error, MaxErrorLen),
		FirstFailedAt: d.FirstFailedAt.UTC(),
		FailedAt:      d.FailedAt.UTC(),
	}
	why := fmt.Sprintf("after %d failed attempt(s)", dl.Attempts)
	if dl.Permanent {
		why = "for good"
	}
	n.enqueue(KindDeadLetter, fmt.Sprintf("event %s (topic %s, key %s) dead-lettered %s: %s",
		dl.EventID, dl.Topic, dl.Key, why, clean(dl.Error, MaxFieldLen)), func(note *Notification) { note.DeadLetter = dl })
}

// BreakerChanged queues a notification when the breaker opens (from
// closed) and when it closes; the half-open probes between, and the
// reopenings after a failed probe, are not sent. It never blocks.
func (n *Notifier) BreakerChanged(state producer.BreakerState) {
	n.breakerMu.Lock()
	from := n.breaker
	n.breaker = state
	var open time.Duration
	switch {
	case state == producer.BreakerOpen && from == producer.BreakerClosed:
		n.openedAt = time.Now()
	case state == producer.BreakerClosed && from != producer.BreakerClosed && !n.openedAt.IsZero():
		open = time.Since(n.openedAt)
	default:
		n.breakerMu.Unlock()
		return
	}
	n.breakerMu.Unlock()
	b := &Breaker{From: from.String(), To: state.String(), OpenSeconds: open.Seconds()}
	text := "Kafka circuit breaker open: the relay stopped publishing until Kafka answers"
	if state == producer.BreakerClosed {
		text = fmt.Sprintf("Kafka circuit breaker closed after %v: the relay publishes again", open.Round(time.Second))
	}
	n.enqueue(KindBreaker, text, func(note *Notification) { note.Breaker = b })
}

// enqueue queues a notification of kind, or drops it when the queue is
// full.
func (n *Notifier) enqueue(kind, text string, set func(*Notification)) {
	note := Notification{Version: Version, Kind: kind, Time: time.Now().UTC(), Relay: clean(n.cfg.Relay, MaxFieldLen),
		Host: clean(n.cfg.Host, MaxFieldLen), Table: clean(n.cfg.Table, MaxFieldLen)}
	note.Text = chatEscaper.Replace(fmt.Sprintf("courier relay %s on %s: %s", note.Relay, note.Host, text))
	set(&note)
	select {
	case n.queue <- note:
	default:
		dropped := n.dropped.Add(1)
		now := time.Now().UnixNano()
		last := n.lastDropNS.Load()
		if (last == 0 || now-last >= int64(dropLogInterval)) && n.lastDropNS.CompareAndSwap(last, now) {
			n.log.Warn("webhook queue full: notification dropped (logged at most once a minute)",
				"kind", kind, "dropped_total", dropped, "queue_size", n.cfg.QueueSize)
		}
	}
}

// Stats returns what the Notifier did so far.
func (n *Notifier) Stats() Stats {
	return Stats{Sent: n.sent.Load(), Failed: n.failed.Load(), Dropped: n.dropped.Load(), Abandoned: n.abandoned.Load()}
}

// Run sends the queued notifications until ctx ends, then for up to
// Config.DrainTimeout what is still queued (a POST in flight when ctx
// ends goes on), and logs what it did. Call it once, after the relay
// starts, and end ctx once the relay's Run returned, so that its last
// dead letters are sent.
func (n *Notifier) Run(ctx context.Context) {
	if n.running.Swap(true) {
		n.log.Error("webhook Notifier.Run called twice; the second call returns at once")
		return
	}
	// send lives until the drain deadline, which starts when ctx ends.
	send, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	context.AfterFunc(ctx, func() { time.AfterFunc(n.cfg.DrainTimeout, cancel) })
	defer n.client.CloseIdleConnections()

	for ctx.Err() == nil {
		select {
		case note := <-n.queue:
			n.deliver(send, note)
		case <-ctx.Done():
		}
	}
	n.drain(send)
	stats := n.Stats()
	level := slog.LevelInfo
	if stats.Failed+stats.Dropped+stats.Abandoned > 0 {
		level = slog.LevelWarn
	}
	n.log.Log(context.WithoutCancel(ctx), level, "webhook stopped", "sent", stats.Sent, "failed", stats.Failed,
		"dropped", stats.Dropped, "abandoned", stats.Abandoned, "drain_timeout", n.cfg.DrainTimeout.String())
}

// drain delivers what is queued, until the queue is empty.
func (n *Notifier) drain(ctx context.Context) {
	for {
		select {
		case note := <-n.queue:
			n.deliver(ctx, note)
		default:
			return
		}
	}
}

// deliver POSTs note, retrying what may succeed later, until it is sent,
// refused, out of retries, or ctx ends.
func (n *Notifier) deliver(ctx context.Context, note Notification) {
	attrs := []any{"kind", note.Kind}
	if note.DeadLetter != nil {
		attrs = append(attrs, "event_id", note.DeadLetter.EventID)
	}
	if ctx.Err() != nil {
		n.abandoned.Add(1)
		return
	}
	body, err := json.Marshal(note)
	if err != nil { // cannot happen: every field is a string, number, bool or time
		n.failed.Add(1)
		n.log.Error("webhook notification not encoded", append(attrs, "error", err)...)
		return
	}
	retries := max(n.cfg.Retries, 0)
	for attempt := 1; ; attempt++ {
		retryAfter, err := n.post(ctx, body)
		if err == nil {
			n.sent.Add(1)
			return
		}
		if ctx.Err() != nil {
			n.abandoned.Add(1)
			n.log.Warn("webhook notification abandoned at the drain deadline", append(attrs, "attempts", attempt)...)
			return
		}
		var final finalError
		if errors.As(err, &final) || attempt > retries {
			n.failed.Add(1)
			n.log.Warn("webhook notification not delivered", append(attrs, "attempts", attempt, "error", n.mask(err.Error()))...)
			return
		}
		wait := n.cfg.Backoff.Delay(attempt, rand.Float64)
		if retryAfter > 0 {
			wait = retryAfter
		}
		n.log.Debug("webhook POST failed; will retry", append(attrs, "attempt", attempt, "wait", wait.String(), "error", n.mask(err.Error()))...)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			n.abandoned.Add(1)
			n.log.Warn("webhook notification abandoned at the drain deadline", append(attrs, "attempts", attempt)...)
			return
		case <-timer.C:
		}
	}
}

// finalError is an answer that retrying will not change.
type finalError struct{ err error }

func (f finalError) Error() string { return f.err.Error() }

// post sends body once. A retriable failure may come with the wait its
// Retry-After header asks for.
func (n *Notifier) post(ctx context.Context, body []byte) (retryAfter time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.url.String(), bytes.NewReader(body))
	if err != nil {
		return 0, finalError{errors.New("cannot make the request")}
	}
	for name, values := range n.cfg.Header {
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	req.Header.Set("Content-Type", "application/json")
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "courier-relay")
	}
	resp, err := n.client.Do(req)
	if err != nil {
		// A *url.Error quotes the URL, path and all: keep only its cause.
		if uerr, ok := errors.AsType[*url.Error](err); ok {
			err = uerr.Err
		}
		if ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %v", n.cfg.Timeout)
		}
		return 0, err
	}
	defer resp.Body.Close()
	// The start of the body, masked before it is cut: a secret the server
	// echoes across the cut is masked whole.
	read, _ := io.ReadAll(io.LimitReader(resp.Body, int64(256+n.longestSecret)))
	snippet := n.mask(string(read))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return 0, nil
	}
	err = fmt.Errorf("answered %s: %s", resp.Status, clean(snippet, 200))
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()), err
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return 0, finalError{fmt.Errorf("answered %s: redirects are not followed; give the final URL", resp.Status)}
	}
	return 0, finalError{err}
}

// parseRetryAfter reads a Retry-After header, seconds or an HTTP date,
// capped at MaxRetryAfter; 0 when it is missing, unreadable or past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int(MaxRetryAfter/time.Second))) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return min(t.Sub(now), MaxRetryAfter)
	}
	return 0
}

// mask removes the URL's secrets and the header values from s.
func (n *Notifier) mask(s string) string { return redact.String(s, n.secrets) }

// chatEscaper escapes what chat services (Slack, Mattermost) read as
// markup in a message's text: mentions such as <!channel>, and links.
var chatEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// clean returns s as valid UTF-8 on one line, its other control
// characters (C0, DEL, C1) as U+FFFD, cut to at most limit bytes on a
// rune boundary, "…" marking the cut (textcut.Line).
func clean(s string, limit int) string { return textcut.Line(s, limit, isControl) }

// isControl reports whether r is a control character: C0, DEL or C1.
func isControl(r rune) bool { return r < ' ' || r >= 0x7f && r < 0xa0 }
