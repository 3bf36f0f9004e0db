package kafkaauth

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"

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
// fetches the next one in the background, lastShare the share after which
// it waits for that fetch before it hands the token out, and
// failureBackoff how long after a failed fetch it waits before it fetches
// again.
const (
	refreshShare   = 0.8
	lastShare      = 0.9
	failureBackoff = time.Second
)

// Tokens hands Sarama the OAUTHBEARER token of a source (an identity
// provider, AWS's signer, a fixed value) and keeps it: once refreshShare of
// its lifetime has passed, the next call starts a fetch of the next one in
// the background and goes on handing out the current one until it expires.
// Only with no token left that has not expired does a call wait, for one
// fetch that every caller shares, bounded by the source's timeout. A failed
// fetch is handed to the callers that needed a token for a second before
// the next fetch; its error names the source and says what to check.
//
// It is a sarama.AccessTokenProvider: pass it to OAuthBearer.
type Tokens struct {
	source     string
	fetch      func(ctx context.Context) (Token, error)
	extensions map[string]string
	timeout    time.Duration
	now        func() time.Time

	fetching sync.Mutex // held by the one fetch under way

	mu         sync.Mutex // guards what follows
	token      Token
	got        time.Time // when token was fetched
	refreshing bool
	failure    error
	failedAt   time.Time
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
	return &Tokens{source: source, fetch: fetch, extensions: maps.Clone(extensions), timeout: timeout, now: time.Now}, nil
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
// if none is left that has not expired. It implements
// sarama.AccessTokenProvider.
func (t *Tokens) Token() (*sarama.AccessToken, error) {
	tok, err := t.current()
	if err != nil {
		return nil, err
	}
	return &sarama.AccessToken{Token: tok.Value, Extensions: maps.Clone(t.extensions)}, nil
}

// current returns a token that has not expired, starting a background
// refresh past refreshShare of its lifetime. Past lastShare, when the
// broker's clock running ahead could take it for expired, it waits for the
// fetch instead, and hands out the token it has if that fetch fails.
func (t *Tokens) current() (Token, error) {
	now := t.now()
	t.mu.Lock()
	tok := t.token
	valid := tok.Value != "" && now.Before(tok.Expiry)
	if valid && now.Before(t.shareOfLife(lastShare)) {
		if !t.refreshing && !now.Before(t.shareOfLife(refreshShare)) && !t.backingOff(now) {
			t.refreshing = true
			go t.refresh()
		}
		t.mu.Unlock()
		return tok, nil
	}
	if t.backingOff(now) {
		err := t.failure
		t.mu.Unlock()
		if valid {
			return tok, nil
		}
		return Token{}, err
	}
	t.mu.Unlock()

	t.fetching.Lock()
	defer t.fetching.Unlock()
	t.mu.Lock()
	if t.token != tok { // a fetch ended while this call waited
		tok = t.token
		t.mu.Unlock()
		return tok, nil
	}
	t.mu.Unlock()
	fresh, err := t.fetchOne()
	if err != nil && valid && t.now().Before(tok.Expiry) {
		return tok, nil
	}
	return fresh, err
}

// shareOfLife is when share of the current token's lifetime has passed;
// t.mu is held.
func (t *Tokens) shareOfLife(share float64) time.Time {
	life := t.token.Expiry.Sub(t.got)
	return t.got.Add(time.Duration(float64(life) * share))
}

// backingOff reports whether a fetch failed less than failureBackoff ago;
// t.mu is held.
func (t *Tokens) backingOff(now time.Time) bool {
	return t.failure != nil && now.Sub(t.failedAt) < failureBackoff
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

// fetchOne fetches a token and keeps it, or keeps the failure; t.fetching
// is held.
func (t *Tokens) fetchOne() (Token, error) {
	ctx, cancel := context.WithTimeout(context.Background(), t.timeout)
	defer cancel()
	started := t.now()
	tok, err := t.fetch(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		err = &TokenError{Source: t.source, Reason: fmt.Sprintf("no token within %v: is it reachable from here, and up?", t.timeout)}
	case err == nil:
		err = t.check(tok, started)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err != nil {
		var te *TokenError
		if !errors.As(err, &te) {
			err = &TokenError{Source: t.source, Reason: textcut.Line(err.Error(), 300, isControl)}
		}
		t.failure, t.failedAt = err, t.now()
		return Token{}, err
	}
	t.token, t.got, t.failure = tok, started, nil
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
// and what to check. Neither holds a secret or a token.
type TokenError struct {
	Source string
	Reason string
}

func (e *TokenError) Error() string { return "kafkaauth: " + e.Source + ": " + e.Reason }

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
