package kafkaauth

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/backoff"
	"github.com/courierkit/courier/internal/textcut"
)

// Token is a bearer token and the time it expires.
type Token struct {
	Value  string
	Expiry time.Time
}

// DefaultTokenTimeout bounds one token fetch when its source sets no
// timeout of its own.
const DefaultTokenTimeout = 10 * time.Second

// MaxTokenBytes is the longest token a Tokens hands out: a JWT with many
// claims is a few kilobytes, an MSK IAM token under two.
const MaxTokenBytes = 16 << 10

// refreshShare is the share of a token's lifetime after which a Tokens
// fetches the next one in the background, and lastShare the share after
// which it waits for that fetch before it hands the token out. A token is
// taken for expired maxSkew (at most a tenth of its life) before it
// expires, for brokers whose clocks run ahead.
const (
	refreshShare = 0.8
	lastShare    = 0.9
	maxSkew      = 30 * time.Second
)

// failureBackoff is the wait after consecutive failed fetches before the
// next one: 1s, 2s, 4s, … up to 30s, each spread over ±20%, so that many
// clients do not ask a failing identity provider together.
var failureBackoff = backoff.Backoff{Base: time.Second, Factor: 2, Max: 30 * time.Second, Jitter: 0.2}

// Tokens hands Sarama the OAUTHBEARER token of a source (an identity
// provider, AWS's signer, a fixed value) and keeps it. Once refreshShare
// of its lifetime has passed it fetches the next one in the background (on
// a timer, as long as the tokens are used, and on the next call), and goes
// on handing out the current one; past lastShare a call waits for that
// fetch, and still gets the current token if the fetch fails. A call with
// no usable token waits for one fetch that every waiting caller shares,
// bounded by the source's timeout. After a failed fetch, callers that need
// a token get its error until the backoff (failureBackoff) has passed; the
// error names the source and says what to check.
//
// It is a sarama.AccessTokenProvider: pass it to OAuthBearer.
type Tokens struct {
	source     string
	fetch      func(ctx context.Context) (Token, error)
	extensions map[string]string
	timeout    time.Duration
	now        func() time.Time
	random     func() float64

	fetching sync.Mutex // held by the one fetch under way

	mu         sync.Mutex // guards what follows
	token      Token
	got        time.Time // when token was fetched
	ended      uint64    // fetches that ended, well or not
	refreshing bool
	used       bool // Token was called since the timer last fired
	failure    error
	failures   int       // consecutive failed fetches
	retryAt    time.Time // no fetch before this, after a failure
}

// NewTokens returns the Tokens of a source of your own: fetch returns a
// new token within its context's deadline (timeout; 0 is
// DefaultTokenTimeout), and source names it in errors ("the token file
// /var/run/token", say). The extensions (RFC 7628: keys of letters, values
// of printable ASCII) go with every token; a broker that does not know one
// ignores it.
func NewTokens(source string, fetch func(ctx context.Context) (Token, error), extensions map[string]string, timeout time.Duration) (*Tokens, error) {
	if fetch == nil {
		return nil, errors.New("kafkaauth: NewTokens needs a fetch function")
	}
	if timeout < 0 {
		return nil, fmt.Errorf("kafkaauth: token timeout %v: use a positive duration, or 0 for %v", timeout, DefaultTokenTimeout)
	}
	if timeout == 0 {
		timeout = DefaultTokenTimeout
	}
	if err := CheckExtensions(extensions); err != nil {
		return nil, err
	}
	return &Tokens{source: source, fetch: fetch, extensions: maps.Clone(extensions), timeout: timeout, now: time.Now, random: rand.Float64}, nil
}

// StaticToken hands out the one token given, which never expires as far
// as courier knows: for tests and for brokers that take a fixed token.
func StaticToken(token string, extensions map[string]string) (*Tokens, error) {
	if err := checkTokenValue(token); err != nil {
		return nil, fmt.Errorf("kafkaauth: the static token %w", err)
	}
	forever := time.Now().AddDate(100, 0, 0)
	return NewTokens("the static token", func(context.Context) (Token, error) {
		return Token{Value: token, Expiry: forever}, nil
	}, extensions, 0)
}

// String names the source, never a token.
func (t *Tokens) String() string { return t.source }

// Token returns the current token with the extensions, fetching one first
// if none is left that can be used. It implements
// sarama.AccessTokenProvider.
func (t *Tokens) Token() (*sarama.AccessToken, error) {
	tok, err := t.current()
	if err != nil {
		return nil, err
	}
	return &sarama.AccessToken{Token: tok.Value, Extensions: maps.Clone(t.extensions)}, nil
}

// current returns a usable token (see Tokens).
func (t *Tokens) current() (Token, error) {
	now := t.now()
	t.mu.Lock()
	t.used = true
	tok, ended := t.token, t.ended
	usable := t.usable(now)
	if usable && now.Before(t.shareOfLife(lastShare)) {
		if !now.Before(t.shareOfLife(refreshShare)) {
			t.startRefresh(now)
		}
		t.mu.Unlock()
		return tok, nil
	}
	if t.failure != nil && now.Before(t.retryAt) {
		err := t.failure
		t.mu.Unlock()
		if usable {
			return tok, nil
		}
		return Token{}, err
	}
	t.mu.Unlock()

	t.fetching.Lock()
	defer t.fetching.Unlock()
	t.mu.Lock()
	if t.ended != ended { // a fetch ended while this call waited: its outcome is this call's
		tok, err, ok := t.token, t.failure, t.usable(t.now())
		t.mu.Unlock()
		if ok {
			return tok, nil
		}
		return Token{}, err
	}
	t.mu.Unlock()
	fresh, err := t.fetchOne()
	if err != nil {
		t.mu.Lock()
		ok := t.usable(t.now())
		t.mu.Unlock()
		if ok {
			return tok, nil
		}
	}
	return fresh, err
}

// usable reports whether the current token may still be handed out: it
// has not expired, with maxSkew (at most a tenth of its life) to spare;
// t.mu is held.
func (t *Tokens) usable(now time.Time) bool {
	if t.token.Value == "" {
		return false
	}
	skew := min(maxSkew, t.token.Expiry.Sub(t.got)/10)
	return now.Before(t.token.Expiry.Add(-skew))
}

// shareOfLife is when share of the current token's lifetime has passed;
// t.mu is held.
func (t *Tokens) shareOfLife(share float64) time.Time {
	life := t.token.Expiry.Sub(t.got)
	return t.got.Add(time.Duration(float64(life) * share))
}

// startRefresh starts a background fetch unless one is under way or a
// failure's backoff has not passed; t.mu is held.
func (t *Tokens) startRefresh(now time.Time) {
	if t.refreshing || t.failure != nil && now.Before(t.retryAt) {
		return
	}
	t.refreshing = true
	go t.refresh()
}

// refresh fetches the next token in the background; the current one
// stays in use until it expires, whatever happens.
func (t *Tokens) refresh() {
	t.fetching.Lock()
	_, _ = t.fetchOne() // a failure is kept in t.failure
	t.fetching.Unlock()
	t.mu.Lock()
	t.refreshing = false
	t.mu.Unlock()
}

// timerFired refreshes the token at refreshShare of its life if it was
// used since the timer last fired: a Tokens nobody uses any more stops
// fetching.
func (t *Tokens) timerFired() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.used {
		t.used = false
		t.startRefresh(t.now())
	}
}

// fetchOne fetches a token and keeps it, or keeps the failure; t.fetching
// is held. A fetch that ignores its context, or panics, fails as a
// TokenError at the timeout.
func (t *Tokens) fetchOne() (Token, error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	started := t.now()
	type result struct {
		tok Token
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- result{err: &TokenError{Source: t.source, Reason: textcut.Line(fmt.Sprintf("the token source panicked: %v", p), 300, isControl)}}
			}
		}()
		tok, err := t.fetch(ctx)
		done <- result{tok, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		r.err = ctx.Err()
	}
	tok, err := r.tok, r.err
	switch {
	case err != nil && ctx.Err() != nil:
		err = &TokenError{Source: t.source, Reason: fmt.Sprintf("no token within %v: is it reachable from here, and up?", t.timeout), Err: ctx.Err()}
	case err == nil:
		err = t.check(tok, started)
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ended++
	if err != nil {
		if _, ok := errors.AsType[*TokenError](err); !ok {
			err = &TokenError{Source: t.source, Reason: textcut.Line(err.Error(), 300, isControl), Err: err}
		}
		t.failures++
		t.failure, t.retryAt = err, now.Add(failureBackoff.Delay(t.failures, t.random))
		return Token{}, err
	}
	t.token, t.got, t.failure, t.failures = tok, started, nil, 0
	if life := tok.Expiry.Sub(started); life < 100*365*24*time.Hour {
		time.AfterFunc(time.Duration(float64(life)*refreshShare), t.timerFired)
	}
	return tok, nil
}

// check refuses a token a broker could not take, or one that has expired
// by the time it arrived.
func (t *Tokens) check(tok Token, fetched time.Time) error {
	if err := checkTokenValue(tok.Value); err != nil {
		return &TokenError{Source: t.source, Reason: "the token it gave " + err.Error()}
	}
	if !tok.Expiry.After(fetched) {
		return &TokenError{Source: t.source, Reason: fmt.Sprintf("the token it gave expired at %s, before it arrived (%s): check this machine's clock",
			tok.Expiry.UTC().Format(time.RFC3339), fetched.UTC().Format(time.RFC3339))}
	}
	return nil
}

// TokenError is a failure to get a token from a source: Source names it
// (its URL without query, or the AWS region), Reason says what went wrong
// and what to check, Status is the HTTP status a token endpoint answered
// (0 for none), and Err the error underneath, if any. None holds a secret
// or a token.
type TokenError struct {
	Source string
	Reason string
	Status int
	Err    error
}

func (e *TokenError) Error() string { return "kafkaauth: " + e.Source + ": " + e.Reason }

// Unwrap returns the error underneath (a context's deadline, say).
func (e *TokenError) Unwrap() error { return e.Err }

// checkTokenValue refuses a token that is empty, too long, or holds
// anything but the characters of RFC 6750's b64token, which a SASL
// message can carry as they are.
func checkTokenValue(token string) error {
	switch {
	case token == "":
		return errors.New("is empty")
	case len(token) > MaxTokenBytes:
		return fmt.Errorf("is %d bytes, more than the %d a token may be", len(token), MaxTokenBytes)
	}
	body := strings.TrimRight(token, "=")
	if body == "" {
		return errors.New("is only padding")
	}
	for i, r := range body {
		if !isTokenChar(r) {
			return fmt.Errorf("holds %s at byte %d, which a bearer token cannot (RFC 6750: letters, digits and -._~+/ then =)", strconv.QuoteRuneToASCII(r), i)
		}
	}
	return nil
}

func isTokenChar(r rune) bool {
	return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune("-._~+/", r)
}

// CheckExtensions refuses SASL/OAUTHBEARER extensions a broker cannot
// parse (RFC 7628 section 3.1: a key of letters, a value of printable
// ASCII, space and tab), and the reserved key "auth".
func CheckExtensions(extensions map[string]string) error {
	for _, key := range slices.Sorted(maps.Keys(extensions)) {
		value := extensions[key]
		if key == sarama.SASLExtKeyAuth {
			return errors.New(`kafkaauth: the extension key "auth" is reserved for the token: choose another`)
		}
		if key == "" || strings.IndexFunc(key, func(r rune) bool { return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z') }) >= 0 {
			return fmt.Errorf("kafkaauth: extension key %s: use letters only (RFC 7628), e.g. logicalCluster", strconv.QuoteToASCII(key))
		}
		if i := strings.IndexFunc(value, func(r rune) bool { return r != ' ' && r != '\t' && (r < 0x21 || r > 0x7e) }); i >= 0 {
			return fmt.Errorf("kafkaauth: extension %s: its value holds a character at byte %d that an extension cannot (printable ASCII only)", key, i)
		}
	}
	return nil
}

// isControl reports the runes a message printed from outside must not
// carry as they are.
func isControl(r rune) bool { return !strconv.IsPrint(r) }
