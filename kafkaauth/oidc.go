package kafkaauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/courierkit/courier/internal/redact"
	"github.com/courierkit/courier/internal/textcut"
)

// ClientCredentials fetches OAUTHBEARER tokens from an OAuth 2.0 / OpenID
// Connect token endpoint with the client-credentials grant (RFC 6749
// section 4.4), as Confluent Cloud, Strimzi with Keycloak, Azure Event
// Hubs with Microsoft Entra ID and other OIDC brokers take them.
type ClientCredentials struct {
	// TokenURL is the token endpoint, e.g.
	// https://login.microsoftonline.com/<tenant>/oauth2/v2.0/token; https
	// unless its host is a loopback address.
	TokenURL string
	// ClientID and ClientSecret are the client's credentials. The secret
	// is sent in an HTTP Basic Authorization header, or in the form if the
	// endpoint refuses that (client_secret_basic, else _post), and is never
	// printed.
	ClientID     string
	ClientSecret string
	// Scopes are asked for in the scope parameter; none: the endpoint's
	// default.
	Scopes []string
	// Params are more form parameters some endpoints want (Auth0's
	// audience, Entra ID v1's resource); they may not set grant_type,
	// scope, client_id or client_secret.
	Params url.Values
	// Extensions go with every token in the SASL message (Confluent Cloud:
	// logicalCluster and identityPoolId).
	Extensions map[string]string
	// Timeout bounds one token request; 0 is DefaultTokenTimeout.
	Timeout time.Duration
	// RootCAs, when set, are the CAs the endpoint's certificate is
	// checked against instead of the system's (a Keycloak behind a
	// private CA, say).
	RootCAs *x509.CertPool
	// HTTPClient sends the requests; nil is a client of its own (TLS 1.2
	// or later, RootCAs or the system's CAs, the environment's proxy, no
	// redirects). A client of yours should not follow redirects either: Go
	// sends the form, with the secret when it goes there, to wherever a
	// 307 or 308 points.
	HTTPClient *http.Client
}

// String describes the credentials without their secret.
func (c ClientCredentials) String() string {
	return fmt.Sprintf("OAuth client %q at %s", c.ClientID, shownURL(c.TokenURL))
}

// GoString is String, so that %#v prints no secret either.
func (c ClientCredentials) GoString() string { return c.String() }

// LogValue is String, for log/slog.
func (c ClientCredentials) LogValue() slog.Value { return slog.StringValue(c.String()) }

// reservedParams are the form parameters ClientCredentials sets itself.
var reservedParams = []string{"grant_type", "scope", "client_id", "client_secret", "client_assertion", "client_assertion_type"}

// minLifetime is the shortest expires_in taken: a shorter one would make
// every broker connection ask the endpoint again.
const minLifetime = time.Second

// maxTokenResponse bounds the body of a token endpoint's answer that is
// read.
const maxTokenResponse = 1 << 20

// defaultLifetime is the lifetime given to a token whose answer has no
// expires_in and that is no JWT with an exp claim.
const defaultLifetime = 15 * time.Minute

// Tokens checks the credentials and returns their Tokens. Nothing is
// fetched until a broker connection asks.
func (c ClientCredentials) Tokens() (*Tokens, error) {
	endpoint, err := checkTokenURL(c.TokenURL)
	if err != nil {
		return nil, err
	}
	switch {
	case c.ClientID == "":
		return nil, errors.New("kafkaauth: the OAuth client id is empty: name the client the identity provider issued")
	case strings.IndexFunc(c.ClientID, isControl) >= 0:
		return nil, errors.New("kafkaauth: the OAuth client id holds a control character")
	case c.ClientSecret == "":
		return nil, fmt.Errorf("kafkaauth: the OAuth client %q has no secret", c.ClientID)
	}
	for key := range c.Params {
		if slices.Contains(reservedParams, key) {
			return nil, fmt.Errorf("kafkaauth: OAuth parameter %s is set by ClientCredentials itself: use its fields (ClientID, ClientSecret, Scopes)", key)
		}
	}
	c.Params = maps.Clone(c.Params)
	for _, s := range c.Scopes {
		if s == "" || strings.IndexFunc(s, func(r rune) bool { return r < 0x21 || r > 0x7e || r == '"' || r == '\\' }) >= 0 {
			return nil, fmt.Errorf("kafkaauth: OAuth scope %s: a scope is printable ASCII without spaces, quotes or backslashes (RFC 6749 section 3.3)", strconv.QuoteToASCII(s))
		}
	}
	f := &clientCredentialsFetch{c: c, endpoint: endpoint, client: c.HTTPClient}
	if f.client == nil {
		transport, ok := http.DefaultTransport.(*http.Transport)
		if ok {
			transport = transport.Clone()
		} else { // a service wrapped the default transport
			transport = &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true, IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second}
		}
		transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: c.RootCAs}
		f.client = &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte(url.QueryEscape(c.ClientID)+":"+url.QueryEscape(c.ClientSecret)))
	f.secrets = append(redact.HeaderSecrets(basic), redact.HeaderSecrets(c.ClientSecret)...)
	f.secrets = append(f.secrets, c.ClientSecret)
	return NewTokens("the OAuth token endpoint "+endpoint, f.fetch, c.Extensions, c.Timeout)
}

// checkTokenURL returns the token URL as errors name it (without query or
// fragment), refusing one that is not https to a host that is not
// loopback, or that carries credentials.
func checkTokenURL(raw string) (string, error) {
	if raw == "" {
		return "", errors.New("kafkaauth: the OAuth token URL is empty: name the identity provider's token endpoint, e.g. https://idp.example.com/oauth2/token")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return "", fmt.Errorf("kafkaauth: the OAuth token URL %s is not an http(s) URL with a host, e.g. https://idp.example.com/oauth2/token", strconv.QuoteToASCII(textcut.Cut(raw, 200, "…")))
	}
	if u.User != nil {
		return "", errors.New("kafkaauth: the OAuth token URL holds a user or password: give the client id and secret as such, not in the URL")
	}
	shown := shownURL(raw)
	if u.Scheme == "http" {
		ip := net.ParseIP(u.Hostname())
		if u.Hostname() != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return "", fmt.Errorf("kafkaauth: the OAuth token URL %s is plain http: use https, which keeps the client secret and the tokens from the network", shown)
		}
	}
	return shown, nil
}

// shownURL is a token URL as messages show it: without user, query or
// fragment.
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return strconv.QuoteToASCII(textcut.Cut(raw, 100, "…"))
	}
	return textcut.Line((&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String(), 200, isControl)
}

// clientCredentialsFetch is one ClientCredentials' fetch.
type clientCredentialsFetch struct {
	c        ClientCredentials
	endpoint string
	client   *http.Client
	secrets  []string    // the forms the secret may be echoed in
	inForm   atomic.Bool // the endpoint refused the secret in a header
}

// tokenAnswer is a token endpoint's answer (RFC 6749 sections 5.1, 5.2).
type tokenAnswer struct {
	AccessToken      string          `json:"access_token"`
	TokenType        string          `json:"token_type"`
	ExpiresIn        json.RawMessage `json:"expires_in"`
	Error            string          `json:"error"`
	ErrorDescription string          `json:"error_description"`
}

// fetch asks the endpoint for a token, again with the secret in the form
// when it refuses it in a header.
func (f *clientCredentialsFetch) fetch(ctx context.Context) (Token, error) {
	inForm := f.inForm.Load()
	tok, status, answer, err := f.ask(ctx, inForm)
	if err == nil || inForm || status != http.StatusUnauthorized && status != http.StatusBadRequest || answer.Error != "invalid_client" {
		return tok, err
	}
	// The endpoint refused the secret in the header: try it in the form
	// (client_secret_post). Unless that is refused as well, the form is
	// what the endpoint takes, and its answer is the one to report.
	tok, _, formAnswer, formErr := f.ask(ctx, true)
	if formErr == nil || formAnswer.Error != "invalid_client" {
		f.inForm.Store(true)
		return tok, formErr
	}
	return tok, err
}

// ask sends one token request.
func (f *clientCredentialsFetch) ask(ctx context.Context, inForm bool) (Token, int, tokenAnswer, error) {
	form := url.Values{"grant_type": {"client_credentials"}}
	for k, vs := range f.c.Params {
		form[k] = vs
	}
	if len(f.c.Scopes) > 0 {
		form.Set("scope", strings.Join(f.c.Scopes, " "))
	}
	if inForm {
		form.Set("client_id", f.c.ClientID)
		form.Set("client_secret", f.c.ClientSecret)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.c.TokenURL, strings.NewReader(form.Encode()))
	if err != nil {
		return Token{}, 0, tokenAnswer{}, f.fail("cannot build the request: %s", f.clean(err.Error()))
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if !inForm {
		req.SetBasicAuth(url.QueryEscape(f.c.ClientID), url.QueryEscape(f.c.ClientSecret))
	}
	sent := time.Now()
	resp, err := f.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return Token{}, 0, tokenAnswer{}, ctx.Err()
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return Token{}, 0, tokenAnswer{}, f.fail("cannot reach it: %s (is the token URL right, and the identity provider reachable from here?)", f.clean(err.Error()))
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse+1))
	if err != nil {
		if ctx.Err() != nil {
			return Token{}, resp.StatusCode, tokenAnswer{}, ctx.Err()
		}
		return Token{}, resp.StatusCode, tokenAnswer{}, f.fail("HTTP %d, then the answer broke off: %s", resp.StatusCode, f.clean(err.Error()))
	}
	if len(body) > maxTokenResponse {
		return Token{}, resp.StatusCode, tokenAnswer{}, f.fail("HTTP %d with an answer of more than %d bytes: that is no token endpoint's answer; is the token URL right?", resp.StatusCode, maxTokenResponse)
	}
	var answer tokenAnswer
	jsonErr := json.Unmarshal(body, &answer)
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		return Token{}, resp.StatusCode, answer, f.failStatus(resp.StatusCode, "HTTP %d, a redirect to %s: courier follows none (the form holds the secret); use the URL it points to as the token URL",
			resp.StatusCode, shownURL(resp.Header.Get("Location")))
	}
	if resp.StatusCode != http.StatusOK {
		return Token{}, resp.StatusCode, answer, f.refused(resp.StatusCode, answer, jsonErr == nil)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); jsonErr != nil || mt != "" && !strings.HasSuffix(mt, "json") {
		return Token{}, resp.StatusCode, answer, f.fail("HTTP 200 but no JSON token answer (Content-Type %s): is the token URL the token endpoint, not the issuer or a login page?",
			strconv.QuoteToASCII(textcut.Cut(resp.Header.Get("Content-Type"), 60, "…")))
	}
	if answer.AccessToken == "" {
		return Token{}, resp.StatusCode, answer, f.fail("HTTP 200 without an access_token: is the token URL the token endpoint?")
	}
	if answer.TokenType != "" && !strings.EqualFold(answer.TokenType, "bearer") {
		return Token{}, resp.StatusCode, answer, f.fail("it gave a token of type %s, not Bearer", strconv.QuoteToASCII(textcut.Cut(answer.TokenType, 40, "…")))
	}
	life, err := lifetime(answer)
	if err != nil {
		return Token{}, resp.StatusCode, answer, f.fail("%s", err)
	}
	return Token{Value: answer.AccessToken, Expiry: sent.Add(life)}, resp.StatusCode, answer, nil
}

// lifetime reads expires_in (a number, or a number in a string as some
// endpoints send it), else a JWT's exp claim, else defaultLifetime.
func lifetime(a tokenAnswer) (time.Duration, error) {
	if raw := strings.Trim(string(a.ExpiresIn), `"`); raw != "" && raw != "null" {
		seconds, err := strconv.ParseFloat(raw, 64)
		if err != nil || !(seconds >= minLifetime.Seconds() && seconds <= 366*24*3600) {
			return 0, fmt.Errorf("expires_in %s is not a number of seconds from 1 to a year", strconv.QuoteToASCII(textcut.Cut(raw, 40, "…")))
		}
		return time.Duration(seconds * float64(time.Second)), nil
	}
	if exp, ok := jwtExpiry(a.AccessToken); ok {
		if life := time.Until(exp); life > 0 {
			return life, nil
		}
	}
	return defaultLifetime, nil
}

// jwtExpiry reads the exp claim of a JWT without verifying it: only to
// know when to fetch the next one.
func jwtExpiry(token string) (time.Time, bool) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if json.Unmarshal(payload, &claims) != nil {
		return time.Time{}, false
	}
	exp, err := claims.Exp.Float64()
	if err != nil || exp <= 0 {
		return time.Time{}, false
	}
	return time.Unix(int64(exp), 0), true
}

// refused explains an answer other than 200.
func (f *clientCredentialsFetch) refused(status int, a tokenAnswer, isJSON bool) error {
	what := fmt.Sprintf("HTTP %d", status)
	if isJSON && a.Error != "" {
		what += " " + strconv.QuoteToASCII(f.clean(textcut.Cut(a.Error, 60, "…")))
		if a.ErrorDescription != "" {
			what += ": " + strconv.QuoteToASCII(f.clean(textcut.Cut(a.ErrorDescription, 200, "…")))
		}
	}
	var fix string
	switch {
	case a.Error == "invalid_client" || status == http.StatusUnauthorized:
		fix = "check the client id and secret"
	case a.Error == "invalid_scope":
		fix = "check the scope: ask only for scopes the client may have"
	case a.Error == "unauthorized_client" || a.Error == "unsupported_grant_type":
		fix = "allow the client-credentials grant for this client in the identity provider"
	case status == http.StatusNotFound || status == http.StatusMethodNotAllowed:
		fix = "is the token URL the token endpoint? (see the issuer's /.well-known/openid-configuration, its token_endpoint)"
	case status >= 500:
		fix = "the identity provider failed; courier asks again"
	default:
		fix = "check the token URL, the client id and secret, the scope and the extensions"
	}
	return f.failStatus(status, "%s (%s)", what, fix)
}

// fail is a TokenError of this endpoint.
func (f *clientCredentialsFetch) fail(format string, args ...any) error {
	return f.failStatus(0, format, args...)
}

// failStatus is a TokenError of this endpoint's answer with status.
func (f *clientCredentialsFetch) failStatus(status int, format string, args ...any) error {
	return &TokenError{Source: "the OAuth token endpoint " + f.endpoint, Reason: fmt.Sprintf(format, args...), Status: status}
}

// clean masks the secret in text from outside and puts it on one line.
func (f *clientCredentialsFetch) clean(s string) string {
	return textcut.Line(redact.String(s, f.secrets), 300, isControl)
}
