package kafkaauth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/courierkit/courier/internal/testkit"
)

// clock is a test's time, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// source hands out tok-1, tok-2, … valid for life, or fails while fail
// is set.
type source struct {
	clock   *clock
	life    time.Duration
	fetches atomic.Int32
	fail    atomic.Bool
	gate    chan struct{} // when set, each fetch waits for it
	entered atomic.Int32  // fetches begun
}

func (s *source) fetch(ctx context.Context) (Token, error) {
	s.entered.Add(1)
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return Token{}, ctx.Err()
		}
	}
	n := s.fetches.Add(1)
	if s.fail.Load() {
		return Token{}, errors.New("the identity provider is down")
	}
	return Token{Value: fmt.Sprintf("tok-%d", n), Expiry: s.clock.Now().Add(s.life)}, nil
}

func newTestTokens(t *testing.T, s *source) *Tokens {
	t.Helper()
	tokens, err := NewTokens("the test source", s.fetch, map[string]string{"logicalCluster": "lkc-1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	tokens.now = s.clock.Now
	tokens.random = func() float64 { return 0.5 } // no jitter: 1s, 2s, 4s, …
	return tokens
}

func token(t *testing.T, tokens *Tokens) string {
	t.Helper()
	tok, err := tokens.Token()
	if err != nil {
		t.Fatalf("Token: %v", err)
	}
	if tok.Extensions["logicalCluster"] != "lkc-1" {
		t.Fatalf("extensions %v", tok.Extensions)
	}
	return tok.Token
}

// waitFetches waits until s has fetched n times.
func waitFetches(t *testing.T, s *source, n int32) {
	t.Helper()
	testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("%d fetches", n), func() bool { return s.fetches.Load() >= n })
}

func TestTokensAreKeptAndRefreshedBeforeTheyExpire(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	s := &source{clock: c, life: 100 * time.Second}
	tokens := newTestTokens(t, s)
	if got := token(t, tokens); got != "tok-1" {
		t.Fatalf("first token %q", got)
	}
	c.Add(79 * time.Second)
	if got := token(t, tokens); got != "tok-1" || s.fetches.Load() != 1 {
		t.Fatalf("before 80%% of its life: %q after %d fetches; want tok-1 kept", got, s.fetches.Load())
	}
	c.Add(2 * time.Second) // 81%: the next call starts a refresh and still hands out tok-1
	if got := token(t, tokens); got != "tok-1" {
		t.Fatalf("at 81%%: %q; want tok-1 while tok-2 is fetched", got)
	}
	waitFetches(t, s, 2)
	testkit.WaitFor(t, 10*time.Second, "tok-2 handed out", func() bool { return token(t, tokens) == "tok-2" })
	if n := s.fetches.Load(); n != 2 {
		t.Errorf("%d fetches; want 2", n)
	}
}

func TestAFailedRefreshKeepsTheTokenWhileItIsUsable(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	s := &source{clock: c, life: 1000 * time.Second}
	tokens := newTestTokens(t, s)
	token(t, tokens)
	s.fail.Store(true)
	c.Add(850 * time.Second)
	if got := token(t, tokens); got != "tok-1" {
		t.Fatalf("at 85%%: %q", got)
	}
	waitFetches(t, s, 2)
	c.Add(100 * time.Second) // 95%: a fetch in the foreground fails; tok-1 is still usable
	if got := token(t, tokens); got != "tok-1" || s.fetches.Load() != 3 {
		t.Fatalf("at 95%% with the source down: %q after %d fetches; want tok-1 after a third fetch", got, s.fetches.Load())
	}
	c.Add(30 * time.Second) // 98%: within maxSkew of its expiry, tok-1 is no longer handed out
	_, err := tokens.Token()
	var te *TokenError
	if !errors.As(err, &te) || te.Source != "the test source" || !strings.Contains(err.Error(), "the identity provider is down") {
		t.Fatalf("at 98%% with the source down: %v; want a TokenError naming the source", err)
	}
	before := s.fetches.Load()
	if _, err2 := tokens.Token(); err2 == nil || s.fetches.Load() != before {
		t.Fatalf("within the backoff of a failure: %v after %d more fetches; want the same failure, no fetch", err2, s.fetches.Load()-before)
	}
	s.fail.Store(false)
	c.Add(time.Minute) // past the longest backoff
	if got := token(t, tokens); !strings.HasPrefix(got, "tok-") {
		t.Fatalf("the source is back: %q", got)
	}
}

func TestFailuresBackOffExponentially(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	s := &source{clock: c, life: time.Hour}
	s.fail.Store(true)
	tokens := newTestTokens(t, s)
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
		if _, err := tokens.Token(); err == nil {
			t.Fatal("a token from a failing source")
		}
		if n := s.fetches.Load(); n != int32(i+1) {
			t.Fatalf("failure %d: %d fetches", i+1, n)
		}
		c.Add(wait - time.Millisecond)
		if _, err := tokens.Token(); err == nil || s.fetches.Load() != int32(i+1) {
			t.Fatalf("within %v of failure %d: a fetch", wait, i+1)
		}
		c.Add(time.Millisecond)
	}
}

func TestCallersWithoutATokenShareOneFetch(t *testing.T) {
	for _, failing := range []bool{false, true} {
		t.Run(fmt.Sprintf("failing=%v", failing), func(t *testing.T) {
			c := &clock{now: time.Unix(1_800_000_000, 0)}
			s := &source{clock: c, life: time.Hour, gate: make(chan struct{})}
			s.fail.Store(failing)
			tokens := newTestTokens(t, s)
			var wg, started sync.WaitGroup
			got := make([]error, 8)
			for i := range got {
				started.Add(1)
				wg.Go(func() {
					started.Done()
					_, got[i] = tokens.Token()
				})
			}
			started.Wait()
			testkit.WaitFor(t, 10*time.Second, "the first fetch", func() bool { return s.entered.Load() == 1 })
			close(s.gate)
			wg.Wait()
			for i, err := range got {
				if (err != nil) != failing {
					t.Errorf("caller %d: %v", i, err)
				}
			}
			if n := s.fetches.Load(); n != 1 {
				t.Errorf("%d fetches for 8 callers; want 1", n)
			}
		})
	}
}

func TestAPanickingOrStuckSourceFailsAsATokenError(t *testing.T) {
	for name, fetch := range map[string]func(context.Context) (Token, error){
		"panics":          func(context.Context) (Token, error) { panic("boom\x1b[2J") },
		"ignores its ctx": func(context.Context) (Token, error) { select {} },
	} {
		t.Run(name, func(t *testing.T) {
			tokens, err := NewTokens("src", fetch, nil, 50*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			_, err = tokens.Token()
			if _, ok := errors.AsType[*TokenError](err); !ok || strings.ContainsRune(err.Error(), 0x1b) {
				t.Fatalf("%q; want a TokenError without control characters", err)
			}
		})
	}
}

func TestASlowSourceFailsWithinItsTimeout(t *testing.T) {
	s := &source{clock: &clock{now: time.Now()}, life: time.Hour, gate: make(chan struct{})}
	tokens, err := NewTokens("the slow source", s.fetch, nil, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tokens.Token()
	if err == nil || !strings.Contains(err.Error(), "the slow source: no token within 50ms") {
		t.Fatalf("a source that never answers: %v", err)
	}
}

func TestTokensRefuseWhatABrokerCouldNotTake(t *testing.T) {
	c := &clock{now: time.Unix(1_800_000_000, 0)}
	for _, tc := range []struct {
		name, token string
		expiry      time.Duration
		want        string
	}{
		{"empty", "", time.Hour, "is empty"},
		{"a space", "two words", time.Hour, `holds ' ' at byte 3`},
		{"a control character", "tok\x01auth=Bearer x", time.Hour, `holds '\x01'`},
		{"too long", strings.Repeat("a", MaxTokenBytes+1), time.Hour, "more than the 16384"},
		{"already expired", "good-token", -time.Second, "before it arrived"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tokens, err := NewTokens("src", func(context.Context) (Token, error) {
				return Token{Value: tc.token, Expiry: c.Now().Add(tc.expiry)}, nil
			}, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			tokens.now = c.Now
			_, err = tokens.Token()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want %q", err, tc.want)
			}
			if tc.token != "" && len(tc.token) < 100 && strings.Contains(err.Error(), tc.token) {
				t.Errorf("the error quotes the token: %v", err)
			}
		})
	}
}

func TestExtensionsABrokerCannotParseAreRefused(t *testing.T) {
	for _, tc := range []struct {
		ext  map[string]string
		want string
	}{
		{map[string]string{"auth": "x"}, "reserved"},
		{map[string]string{"logical-cluster": "x"}, "letters only"},
		{map[string]string{"logicalCluster": "lkc\x01x"}, "printable ASCII"},
		{map[string]string{"": "x"}, "letters only"},
	} {
		if err := CheckExtensions(tc.ext); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v; want %q", tc.ext, err, tc.want)
		}
	}
	if err := CheckExtensions(map[string]string{"logicalCluster": "lkc-abc12", "identityPoolId": "pool-Ab1"}); err != nil {
		t.Errorf("Confluent Cloud's extensions: %v", err)
	}
}

// expiringCredentials are temporary AWS credentials that expire at
// expires.
type expiringCredentials struct{ expires time.Time }

func (e expiringCredentials) Retrieve(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "ASIATEST", SecretAccessKey: "s", SessionToken: "t", CanExpire: true, Expires: e.expires}, nil
}

func TestMSKTokensExpireWithTheirCredentials(t *testing.T) {
	for name, in := range map[string]time.Duration{"credentials for 3 more minutes": 3 * time.Minute, "credentials for an hour": time.Hour} {
		t.Run(name, func(t *testing.T) {
			expires := time.Now().Add(in).Truncate(time.Second)
			tokens, err := MSKIAM{Region: "eu-west-1", Credentials: expiringCredentials{expires}}.Tokens(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tokens.Token(); err != nil {
				t.Fatal(err)
			}
			tokens.mu.Lock()
			got := tokens.token.Expiry
			tokens.mu.Unlock()
			want := expires
			if limit := time.Now().Add(15 * time.Minute); limit.Before(want) {
				want = limit
			}
			if got.After(want.Add(time.Second)) || got.Before(want.Add(-2*time.Second)) {
				t.Errorf("the token expires at %s; want %s, when the first of it and its credentials does", got, want)
			}
		})
	}
}
