package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Cookie names.
const (
	sessionCookie = "courier_console_session"
	csrfField     = "csrf"
)

// sessionTTL is how long a signed-in session lasts without use.
const sessionTTL = 12 * time.Hour

// maxSessions bounds the sessions held in memory; the oldest go first.
const maxSessions = 10000

// session is one browser's: who signed in and its anti-forgery token.
type session struct {
	actor string
	csrf  string
	seen  time.Time
	// bearer is set for a request a bearer token authenticated: a
	// script's, which a browser cannot forge (it sends Authorization
	// cross-site only after a preflight the console never answers).
	bearer bool
	// signedIn is set for a session of a sign-in, which can sign out.
	signedIn bool
}

// guard authenticates requests and refuses forged ones.
type guard struct {
	tokens   map[string]string // token → actor; empty: no sign-in (loopback only)
	mu       sync.Mutex
	sessions map[string]*session // by session id, of those signed in with a token
	// key signs the anti-forgery tokens of a console without tokens,
	// whose browsers keep only a random id: no state per browser.
	key []byte
}

func newGuard(tokens map[string]string) *guard {
	byToken := make(map[string]string, len(tokens))
	for name, token := range tokens {
		byToken[token] = name
	}
	return &guard{tokens: byToken, sessions: map[string]*session{}, key: []byte(randomToken())}
}

// anonymous returns the session of a browser at a console without tokens:
// its anti-forgery token is the browser id signed with the guard's key.
func (g *guard) anonymous(id, actor string) *session {
	mac := hmac.New(sha256.New, g.key)
	mac.Write([]byte(id))
	return &session{actor: actor, csrf: base64.RawURLEncoding.EncodeToString(mac.Sum(nil))}
}

// isBrowserID reports whether id can be one randomToken made.
func isBrowserID(id string) bool {
	b, err := base64.RawURLEncoding.DecodeString(id)
	return err == nil && len(b) == 32
}

// randomToken returns 32 random bytes in URL-safe base64.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand panics on a broken source)
	return base64.RawURLEncoding.EncodeToString(b)
}

// actorOfToken returns who holds token, comparing in constant time.
func (g *guard) actorOfToken(token string) (string, bool) {
	found, actor := false, ""
	for t, name := range g.tokens {
		if subtle.ConstantTimeCompare([]byte(t), []byte(token)) == 1 {
			found, actor = true, name
		}
	}
	return actor, found
}

// newSession starts a session for actor and returns its id.
func (g *guard) newSession(actor string) (string, *session) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	for id, s := range g.sessions {
		if now.Sub(s.seen) > sessionTTL {
			delete(g.sessions, id)
		}
	}
	if len(g.sessions) >= maxSessions {
		var oldestID string
		var oldest time.Time
		for id, s := range g.sessions {
			if oldestID == "" || s.seen.Before(oldest) {
				oldestID, oldest = id, s.seen
			}
		}
		delete(g.sessions, oldestID)
	}
	id := randomToken()
	s := &session{actor: actor, csrf: randomToken(), seen: now, signedIn: true}
	g.sessions[id] = s
	return id, s
}

// lookup returns the live session of id.
func (g *guard) lookup(id string) (*session, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	s, ok := g.sessions[id]
	if !ok || time.Since(s.seen) > sessionTTL {
		delete(g.sessions, id)
		return nil, false
	}
	s.seen = time.Now()
	return s, true
}

// end forgets the session id.
func (g *guard) end(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.sessions, id)
}

// setSessionCookie hands the browser its session id: not readable by
// script, sent only to this console's own pages.
func setSessionCookie(w http.ResponseWriter, r *http.Request, id string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil, MaxAge: maxAge})
}

// IsLoopbackHost reports whether host (a Host header or a listen address)
// names this machine's loopback: localhost, 127.0.0.0/8 or ::1, with or
// without a port.
func IsLoopbackHost(host string) bool {
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// crossSite reports whether the browser marked r as sent by another site,
// other than a top-level navigation (a link followed): such a request is
// refused whatever it asks, so that another site's page cannot make the
// console work for it.
func crossSite(r *http.Request) bool {
	return r.Header.Get("Sec-Fetch-Site") == "cross-site" &&
		!(r.Method == http.MethodGet && r.Header.Get("Sec-Fetch-Mode") == "navigate")
}

// sameOrigin refuses a request that changes something unless it comes from
// the console's own pages: Sec-Fetch-Site, when the browser sends it, says
// same-origin; Origin, when sent, is this console; else Referer is.
func sameOrigin(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return fmt.Errorf("the request came from another site (Sec-Fetch-Site: %s)", site)
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		origin = r.Header.Get("Referer")
	}
	if origin == "" {
		return fmt.Errorf("the request names no Origin or Referer, so it cannot be told apart from a forged one")
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host != r.Host {
		return fmt.Errorf("the request came from another origin than this console (%s)", r.Host)
	}
	return nil
}

// securityHeaders are sent with every response: no script or style but
// the console's own, no framing, no caching, no sniffing.
func securityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "+
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
}
