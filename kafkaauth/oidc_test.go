package kafkaauth_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/courierkit/courier/kafkaauth"
)

const secret = "client-s3cret-value"

// endpoint serves answer at /token and returns the credentials for it.
func endpoint(t *testing.T, answer http.HandlerFunc) kafkaauth.ClientCredentials {
	t.Helper()
	srv := httptest.NewServer(answer)
	t.Cleanup(srv.Close)
	return kafkaauth.ClientCredentials{TokenURL: srv.URL + "/token?tenant=x", ClientID: "relay", ClientSecret: secret, Timeout: 2 * time.Second}
}

func fetch(t *testing.T, cc kafkaauth.ClientCredentials) (string, error) {
	t.Helper()
	tokens, err := cc.Tokens()
	if err != nil {
		t.Fatalf("Tokens: %v", err)
	}
	tok, err := tokens.Token()
	if err != nil {
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), base64.StdEncoding.EncodeToString([]byte("relay:"+secret))) {
			t.Errorf("the error holds the client secret: %v", err)
		}
		return "", err
	}
	return tok.Token, nil
}

func jsonAnswer(status int, body any) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(body)
	}
}

func TestClientCredentialsSendTheGrantTheScopesAndTheSecret(t *testing.T) {
	var form url.Values
	var user, pass string
	cc := endpoint(t, func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		form, user, pass = r.PostForm, "", ""
		user, pass, _ = r.BasicAuth()
		jsonAnswer(200, map[string]any{"access_token": "eyJ.abc.def", "token_type": "bearer", "expires_in": "3600"})(w, r)
	})
	cc.Scopes = []string{"kafka", "api://events/.default"}
	cc.Params = url.Values{"audience": {"kafka-broker"}}
	got, err := fetch(t, cc)
	if err != nil || got != "eyJ.abc.def" {
		t.Fatalf("token %q, %v", got, err)
	}
	if form.Get("grant_type") != "client_credentials" || form.Get("scope") != "kafka api://events/.default" || form.Get("audience") != "kafka-broker" {
		t.Errorf("form %v", form)
	}
	if user != "relay" || pass != secret || form.Get("client_secret") != "" {
		t.Errorf("credentials: basic %q:%q, form secret %q; want them in the Authorization header only", user, pass, form.Get("client_secret"))
	}
}

func TestAnEndpointThatRefusesBasicAuthGetsTheSecretInTheForm(t *testing.T) {
	var asked atomic.Int32
	cc := endpoint(t, func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		_ = r.ParseForm()
		if _, _, basic := r.BasicAuth(); basic || r.PostForm.Get("client_secret") != secret {
			jsonAnswer(401, map[string]string{"error": "invalid_client"})(w, r)
			return
		}
		jsonAnswer(200, map[string]any{"access_token": "form-token", "expires_in": 3600})(w, r)
	})
	tokens, err := cc.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	if tok, err := tokens.Token(); err != nil || tok.Token != "form-token" {
		t.Fatalf("%v, %v", tok, err)
	}
	if n := asked.Load(); n != 2 {
		t.Errorf("%d requests; want the header, then the form", n)
	}
}

func TestTokenEndpointFailuresNameTheEndpointAndTheFix(t *testing.T) {
	// Port 1 is never a test's: a closed httptest server's port can be
	// taken at once by a parallel subtest's server, which then answers.
	downURL := "http://127.0.0.1:1/token"
	huge := strings.Repeat("x", 2<<20)
	for _, tc := range []struct {
		name   string
		answer http.HandlerFunc
		url    string
		want   []string
	}{
		{name: "down", url: downURL, want: []string{"the OAuth token endpoint " + downURL, "cannot reach it", "connection refused", "is the token URL right"}},
		{name: "slow", answer: func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.ReadAll(r.Body) // then the server sees the client hang up
			<-r.Context().Done()
		}, want: []string{"/token: no token within 2s"}},
		{name: "wrong secret, echoed", answer: jsonAnswer(401, map[string]string{"error": "invalid_client", "error_description": "bad secret " + secret + " for relay\x1b[31m"}),
			want: []string{`HTTP 401 "invalid_client": "bad secret xxxxx for relay\ufffd[31m"`, "check the client id and secret"}},
		{name: "wrong scope", answer: jsonAnswer(400, map[string]string{"error": "invalid_scope"}), want: []string{"check the scope"}},
		{name: "grant not allowed", answer: jsonAnswer(400, map[string]string{"error": "unauthorized_client"}), want: []string{"allow the client-credentials grant"}},
		{name: "not the token endpoint", answer: http.NotFound, want: []string{"HTTP 404", "token_endpoint"}},
		{name: "provider error", answer: jsonAnswer(503, map[string]string{"error": "temporarily_unavailable"}), want: []string{"HTTP 503", "courier asks again"}},
		{name: "a login page", answer: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html>sign in</html>"))
		}, want: []string{"HTTP 200 but no JSON token answer", "text/html"}},
		{name: "no token", answer: jsonAnswer(200, map[string]any{"token_type": "Bearer"}), want: []string{"without an access_token"}},
		{name: "a token with a control character", answer: jsonAnswer(200, map[string]any{"access_token": "ab\x01auth=Bearer evil"}), want: []string{`holds '\x01' at byte 2`}},
		{name: "not a bearer token", answer: jsonAnswer(200, map[string]any{"access_token": "abc", "token_type": "mac"}), want: []string{`type "mac", not Bearer`}},
		{name: "a bad lifetime", answer: jsonAnswer(200, map[string]any{"access_token": "abc", "expires_in": "soon"}), want: []string{`expires_in "soon"`}},
		{name: "a lifetime that is no number", answer: jsonAnswer(200, map[string]any{"access_token": "abc", "expires_in": "NaN"}), want: []string{`expires_in "NaN" is not a number of seconds from 1`}},
		{name: "a lifetime too short to use", answer: jsonAnswer(200, map[string]any{"access_token": "abc", "expires_in": 0.001}), want: []string{`expires_in "0.001"`}},
		{name: "a redirect", answer: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "http://evil.example.com/steal?x=1", http.StatusTemporaryRedirect)
		}, want: []string{"HTTP 307, a redirect to http://evil.example.com/steal: courier follows none"}},
		{name: "a huge answer", answer: func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(huge)) }, want: []string{"more than 1048576 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cc := kafkaauth.ClientCredentials{TokenURL: tc.url, ClientID: "relay", ClientSecret: secret, Timeout: 2 * time.Second}
			if tc.answer != nil {
				cc = endpoint(t, tc.answer)
			}
			_, err := fetch(t, cc)
			var te *kafkaauth.TokenError
			if err == nil || !errorsAs(err, &te) {
				t.Fatalf("%v; want a TokenError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\nwant it to say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), "tenant=x") {
				t.Errorf("the error quotes the token URL's query: %v", err)
			}
			if strings.ContainsFunc(err.Error(), func(r rune) bool { return r < 0x20 }) {
				t.Errorf("the error holds a control character: %q", err)
			}
		})
	}
}

func TestTheSecretInTheFormIsTheAnswerWhenTheHeaderIsRefused(t *testing.T) {
	cc := endpoint(t, func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		if _, _, basic := r.BasicAuth(); basic {
			jsonAnswer(401, map[string]string{"error": "invalid_client"})(w, r)
			return
		}
		jsonAnswer(400, map[string]string{"error": "invalid_scope"})(w, r)
	})
	_, err := fetch(t, cc)
	if err == nil || !strings.Contains(err.Error(), "check the scope") {
		t.Fatalf("%v; want the form's answer: the scope is wrong, not the secret", err)
	}
	var te *kafkaauth.TokenError
	if !errorsAs(err, &te) || te.Status != 400 {
		t.Errorf("%#v; want Status 400", te)
	}
}

func TestASecretThatNeedsEscapingIsSentAsRFC6749Says(t *testing.T) {
	const awkward = "a:b+c%/ é"
	var header string
	cc := endpoint(t, func(w http.ResponseWriter, r *http.Request) {
		header = r.Header.Get("Authorization")
		jsonAnswer(200, map[string]any{"access_token": "t", "expires_in": 60})(w, r)
	})
	cc.ClientID, cc.ClientSecret = "relay:1", awkward
	if _, err := fetch(t, cc); err != nil {
		t.Fatal(err)
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(url.QueryEscape("relay:1")+":"+url.QueryEscape(awkward)))
	if header != want {
		t.Errorf("Authorization %q; want %q (each part form-encoded, RFC 6749 2.3.1)", header, want)
	}
}

func TestCredentialsPrintNoSecret(t *testing.T) {
	cc := kafkaauth.ClientCredentials{TokenURL: "https://idp.example.com/token?tenant=x", ClientID: "relay", ClientSecret: secret}
	for _, printed := range []string{fmt.Sprint(cc), fmt.Sprintf("%+v", cc), fmt.Sprintf("%#v", cc), fmt.Sprintf("%#v", kafkaauth.Plain("u", secret)), fmt.Sprintf("%v", kafkaauth.SCRAMSHA512("u", secret))} {
		if strings.Contains(printed, secret) || strings.Contains(printed, "tenant=x") {
			t.Errorf("printed: %s", printed)
		}
	}
}

func TestClientCredentialsRefuseABadConfiguration(t *testing.T) {
	good := kafkaauth.ClientCredentials{TokenURL: "https://idp.example.com/oauth2/token", ClientID: "relay", ClientSecret: secret}
	for _, tc := range []struct {
		name string
		edit func(*kafkaauth.ClientCredentials)
		want string
	}{
		{"no URL", func(c *kafkaauth.ClientCredentials) { c.TokenURL = "" }, "token URL is empty"},
		{"plain http", func(c *kafkaauth.ClientCredentials) { c.TokenURL = "http://idp.example.com/token" }, "plain http: use https"},
		{"credentials in the URL", func(c *kafkaauth.ClientCredentials) {
			c.TokenURL = "https://relay:" + secret + "@idp.example.com/token"
		}, "holds a user or password"},
		{"not a URL", func(c *kafkaauth.ClientCredentials) { c.TokenURL = "idp.example.com/token" }, "not an http(s) URL"},
		{"no client id", func(c *kafkaauth.ClientCredentials) { c.ClientID = "" }, "client id is empty"},
		{"no secret", func(c *kafkaauth.ClientCredentials) { c.ClientSecret = "" }, `client "relay" has no secret`},
		{"a scope with a space", func(c *kafkaauth.ClientCredentials) { c.Scopes = []string{"a b"} }, `scope "a b"`},
		{"a reserved extension", func(c *kafkaauth.ClientCredentials) { c.Extensions = map[string]string{"auth": "x"} }, "reserved"},
		{"a parameter it sets itself", func(c *kafkaauth.ClientCredentials) { c.Params = url.Values{"client_secret": {"x"}} }, "client_secret is set by ClientCredentials itself"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc := good
			tc.edit(&cc)
			_, err := cc.Tokens()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error holds the secret: %v", err)
			}
		})
	}
	loopback := good
	loopback.TokenURL = "http://127.0.0.1:8080/token"
	if _, err := loopback.Tokens(); err != nil {
		t.Errorf("http on loopback: %v", err)
	}
}

func errorsAs(err error, target **kafkaauth.TokenError) bool { return errors.As(err, target) }
