package kfakeoauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Issuer is an OAuth token endpoint (the client-credentials grant) that
// issues HS256 JWTs for one client, and the Verifier of its tokens.
type Issuer struct {
	// URL is the token endpoint.
	URL string
	// CAFile, for an issuer of NewTLSIssuer, is a PEM file of the CA that
	// signed its certificate.
	CAFile   string
	clientID string
	secret   string
	key      []byte

	mu       sync.Mutex
	lifetime time.Duration
	now      func() time.Time
	answer   http.HandlerFunc // replaces the endpoint's answer (down, slow, garbage)
	issued   int
	requests int
	forms    []url.Values // each token request's form
}

// NewIssuer starts a token endpoint for the client that issues tokens
// valid for lifetime; it stops when the test ends.
func NewIssuer(t testing.TB, clientID, secret string, lifetime time.Duration) *Issuer {
	return newIssuer(t, clientID, secret, lifetime, httptest.NewServer)
}

// NewTLSIssuer is NewIssuer over https, with a certificate of a CA of its
// own (CAFile) that no system trusts.
func NewTLSIssuer(t testing.TB, clientID, secret string, lifetime time.Duration) *Issuer {
	return newIssuer(t, clientID, secret, lifetime, httptest.NewTLSServer)
}

func newIssuer(t testing.TB, clientID, secret string, lifetime time.Duration, start func(http.Handler) *httptest.Server) *Issuer {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	i := &Issuer{clientID: clientID, secret: secret, key: key, lifetime: lifetime, now: time.Now}
	srv := start(http.HandlerFunc(i.serve))
	t.Cleanup(srv.Close)
	i.URL = srv.URL + "/oauth2/token"
	if srv.TLS != nil {
		i.CAFile = filepath.Join(t.TempDir(), "issuer-ca.pem")
		cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
		if err := os.WriteFile(i.CAFile, cert, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return i
}

// Answer replaces the endpoint's answer with h (nil: tokens again).
func (i *Issuer) Answer(h http.HandlerFunc) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.answer = h
}

// SetNow sets the issuer's and the verifier's clock.
func (i *Issuer) SetNow(now func() time.Time) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.now = now
}

// Issued is the number of tokens issued.
func (i *Issuer) Issued() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.issued
}

// Scopes returns the scope parameter of each token request.
func (i *Issuer) Scopes() []string {
	var out []string
	for _, f := range i.Forms() {
		out = append(out, f.Get("scope"))
	}
	return out
}

// Forms returns the form of each token request that got a token.
func (i *Issuer) Forms() []url.Values {
	i.mu.Lock()
	defer i.mu.Unlock()
	return append([]url.Values(nil), i.forms...)
}

// Requests is the number of requests the endpoint answered, or is
// answering.
func (i *Issuer) Requests() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.requests
}

func (i *Issuer) serve(w http.ResponseWriter, r *http.Request) {
	i.mu.Lock()
	i.requests++
	answer, now, lifetime := i.answer, i.now(), i.lifetime
	i.mu.Unlock()
	if answer != nil {
		answer(w, r)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/oauth2/token" {
		http.NotFound(w, r)
		return
	}
	if err := r.ParseForm(); err != nil || r.PostForm.Get("grant_type") != "client_credentials" {
		oauthError(w, http.StatusBadRequest, "unsupported_grant_type", "only client_credentials")
		return
	}
	id, secret, ok := r.BasicAuth()
	if !ok {
		id, secret = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
	}
	if id != i.clientID || secret != i.secret {
		oauthError(w, http.StatusUnauthorized, "invalid_client", "client authentication failed")
		return
	}
	exp := now.Add(lifetime).Unix()
	claims, _ := json.Marshal(map[string]any{"iss": i.URL, "sub": id, "aud": "kafka", "iat": now.Unix(),
		"exp": exp, "scope": r.PostForm.Get("scope")})
	token := i.sign(claims)
	i.mu.Lock()
	i.issued++
	i.forms = append(i.forms, r.PostForm)
	i.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token, "token_type": "Bearer", "expires_in": int(time.Unix(exp, 0).Sub(now).Seconds())})
}

func oauthError(w http.ResponseWriter, status int, code, description string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": code, "error_description": description})
}

// Token returns a token of the issuer's that expires at exp, as if
// issued, for a test's static token.
func (i *Issuer) Token(exp time.Time) string {
	claims, _ := json.Marshal(map[string]any{"iss": i.URL, "sub": i.clientID, "aud": "kafka", "exp": exp.Unix()})
	return i.sign(claims)
}

func (i *Issuer) sign(claims []byte) string {
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." + enc.EncodeToString(claims)
	mac := hmac.New(sha256.New, i.key)
	mac.Write([]byte(head))
	return head + "." + enc.EncodeToString(mac.Sum(nil))
}

// Verify checks that the token is one of the issuer's, signed with its
// key, for the audience kafka, and not expired by the issuer's clock.
func (i *Issuer) Verify(token string, _ map[string]string) error {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("the token is no JWT")
	}
	mac := hmac.New(sha256.New, i.key)
	mac.Write([]byte(parts[0] + "." + parts[1]))
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
		return errors.New("the token's signature is not the issuer's")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return errors.New("the token's claims are not base64url")
	}
	var claims struct {
		Iss string `json:"iss"`
		Aud string `json:"aud"`
		Exp int64  `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return fmt.Errorf("the token's claims: %v", err)
	}
	i.mu.Lock()
	now := i.now()
	i.mu.Unlock()
	switch {
	case claims.Iss != i.URL:
		return fmt.Errorf("the token's issuer is %q", claims.Iss)
	case claims.Aud != "kafka":
		return fmt.Errorf("the token's audience is %q", claims.Aud)
	case now.Unix() >= claims.Exp:
		return fmt.Errorf("the token expired at %s", time.Unix(claims.Exp, 0).UTC().Format(time.RFC3339))
	}
	return nil
}
