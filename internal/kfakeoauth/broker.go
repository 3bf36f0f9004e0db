// Package kfakeoauth makes an in-process kfake cluster an OAUTHBEARER
// broker that checks what clients send, for tests: kfake itself speaks
// only PLAIN and SCRAM. Its controls (kfake's ControlKey) take each
// SASL/OAUTHBEARER handshake and authentication before kfake does, parse
// the client's first message (RFC 7628: the GS2 header, auth=Bearer
// <token>, the extensions), verify the token with a Verifier (Issuer for
// OIDC tokens, MSK for AWS MSK IAM tokens) and refuse a bad one as Kafka
// does, with a challenge and then SASL_AUTHENTICATION_FAILED. A good one
// is handed on to kfake as the PLAIN login of a user whose password only
// the test knows, so kfake's own SASL state machine keeps every other
// request from a connection that has not signed in, and reauthentication
// (KIP-368, connections.max.reauth.ms) works as kfake implements it.
package kfakeoauth

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Verifier checks a token and its extensions.
type Verifier interface {
	Verify(token string, extensions map[string]string) error
}

// Broker is the OAUTHBEARER side of a kfake cluster and what it saw.
type Broker struct {
	verifier Verifier
	admin    string // the PLAIN user tokens are logged in as
	password string

	mu          sync.Mutex
	connections int      // ApiVersions requests: one per new connection
	handshakes  int      // OAUTHBEARER handshakes, first and reauthentications
	accepted    int      // tokens verified
	refusals    []string // why each refused token was refused
	tokens      []string
	extensions  []map[string]string
}

// New returns a broker that verifies tokens with verifier. Pass Options
// to the kfake cluster, then Install it.
func New(verifier Verifier) *Broker {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return &Broker{verifier: verifier, admin: "kfakeoauth-admin", password: hex.EncodeToString(b)}
}

// Options are the kfake options the cluster needs: SASL on, the PLAIN
// user good tokens are handed on as, and a session lifetime of reauth
// (0: none) after which clients must reauthenticate.
func (b *Broker) Options(reauth time.Duration) []kfake.Opt {
	opts := []kfake.Opt{kfake.EnableSASL(), kfake.Superuser(sarama.SASLTypePlaintext, b.admin, b.password)}
	if reauth > 0 {
		ms := strconv.FormatInt(reauth.Milliseconds(), 10)
		opts = append(opts, kfake.BrokerConfigs(map[string]string{"connections.max.reauth.ms": ms}))
	}
	return opts
}

// Admin signs cfg in with PLAIN as the broker's own user, for a test's
// setup (creating topics, reading what was written) that is not under
// test.
func (b *Broker) Admin(cfg *sarama.Config) *sarama.Config {
	cfg.Net.SASL.Enable = true
	cfg.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	cfg.Net.SASL.Version = sarama.SASLHandshakeV1
	cfg.Net.SASL.User, cfg.Net.SASL.Password = b.admin, b.password
	return cfg
}

// Install puts the broker's controls on cluster.
func (b *Broker) Install(cluster *kfake.Cluster) {
	cluster.ControlKey(int16(kmsg.ApiVersions), func(kmsg.Request) (kmsg.Response, error, bool) {
		b.mu.Lock()
		b.connections++
		b.mu.Unlock()
		return nil, nil, false
	})
	cluster.ControlKey(int16(kmsg.SASLHandshake), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		r := req.(*kmsg.SASLHandshakeRequest)
		switch r.Mechanism {
		case sarama.SASLTypeOAuth:
			b.mu.Lock()
			b.handshakes++
			b.mu.Unlock()
			r.Mechanism = sarama.SASLTypePlaintext // kfake expects the PLAIN login the token becomes
			return nil, nil, false
		case sarama.SASLTypePlaintext: // the test's own setup; kfake checks the password
			return nil, nil, false
		}
		resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		resp.SupportedMechanisms = []string{sarama.SASLTypeOAuth}
		return resp, nil, true
	})
	cluster.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		r := req.(*kmsg.SASLAuthenticateRequest)
		msg := string(r.SASLAuthBytes)
		resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		switch {
		case msg == "\x01" || msg == `\x01`: // the client ends the exchange after a refusal (Sarama sends the 4 characters)
			resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
			text := "Authentication failed during authentication due to invalid credentials with SASL mechanism OAUTHBEARER"
			resp.ErrorMessage = &text
			return resp, nil, true
		case strings.HasPrefix(msg, "\x00") || strings.Count(msg, "\x00") == 2: // PLAIN: the test's own setup
			return nil, nil, false
		}
		token, extensions, err := ParseClientFirst(msg)
		if err == nil {
			err = b.verifier.Verify(token, extensions)
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		if err != nil {
			b.refusals = append(b.refusals, err.Error())
			resp.SASLAuthBytes = []byte(`{"status":"invalid_token"}`) // RFC 7628 3.2.2; the client answers with %x01
			return resp, nil, true
		}
		b.accepted++
		b.tokens = append(b.tokens, token)
		b.extensions = append(b.extensions, extensions)
		r.SASLAuthBytes = []byte("\x00" + b.admin + "\x00" + b.password)
		return nil, nil, false
	})
}

// ParseClientFirst parses the client's first OAUTHBEARER message (RFC
// 7628 section 3.1): "n,[a=authzid]," then %x01, key=value pairs each
// ended by %x01 (auth=Bearer <token> among them), then %x01.
func ParseClientFirst(msg string) (token string, extensions map[string]string, err error) {
	gs2, rest, ok := strings.Cut(msg, "\x01")
	if !ok || !strings.HasPrefix(gs2, "n,") || !strings.HasSuffix(gs2, ",") || strings.Count(gs2, ",") != 2 {
		return "", nil, fmt.Errorf("the GS2 header %q is not n,, or n,a=<authzid>, (no channel binding)", gs2)
	}
	if authz := strings.TrimSuffix(strings.TrimPrefix(gs2, "n,"), ","); authz != "" && !strings.HasPrefix(authz, "a=") {
		return "", nil, fmt.Errorf("the GS2 header's authzid %q does not start with a=", authz)
	}
	if !strings.HasSuffix(rest, "\x01\x01") {
		return "", nil, errors.New("the message does not end with %x01%x01")
	}
	extensions = map[string]string{}
	for _, kv := range strings.Split(strings.TrimSuffix(rest, "\x01\x01"), "\x01") {
		key, value, ok := strings.Cut(kv, "=")
		if !ok || key == "" {
			return "", nil, fmt.Errorf("the pair %q is no key=value", kv)
		}
		if _, dup := extensions[key]; dup || key == "auth" && token != "" {
			return "", nil, fmt.Errorf("the key %q comes twice", key)
		}
		if key == "auth" {
			scheme, t, ok := strings.Cut(value, " ")
			if !ok || !strings.EqualFold(scheme, "Bearer") || t == "" {
				return "", nil, fmt.Errorf("auth is %q, not Bearer <token>", scheme)
			}
			token = t
			continue
		}
		extensions[key] = value
	}
	if token == "" {
		return "", nil, errors.New("no auth=Bearer <token> in the message")
	}
	return token, extensions, nil
}

// Counts is what the broker saw.
type Counts struct {
	// Connections is the number of connections opened (their ApiVersions
	// requests), the test's own included.
	Connections int
	// Handshakes counts OAUTHBEARER handshakes: a connection's first
	// and each reauthentication.
	Handshakes int
	// Accepted counts tokens verified.
	Accepted int
	// Refusals holds why each refused token was refused.
	Refusals []string
	// Tokens holds each accepted token, in order, and Extensions the
	// extensions that came with it.
	Tokens     []string
	Extensions []map[string]string
}

// Counts returns what the broker has seen so far.
func (b *Broker) Counts() Counts {
	b.mu.Lock()
	defer b.mu.Unlock()
	return Counts{Connections: b.connections, Handshakes: b.handshakes, Accepted: b.accepted,
		Refusals: append([]string(nil), b.refusals...), Tokens: append([]string(nil), b.tokens...), Extensions: append([]map[string]string(nil), b.extensions...)}
}

// SignedIn fails the test unless the broker accepted a token and refused
// none.
func (b *Broker) SignedIn(t testing.TB) Counts {
	t.Helper()
	c := b.Counts()
	if c.Accepted == 0 || len(c.Refusals) > 0 {
		t.Fatalf("the broker accepted %d tokens and refused %q", c.Accepted, c.Refusals)
	}
	return c
}

// Refused fails the test unless the broker accepted no token and refused
// one for a reason that says want.
func (b *Broker) Refused(t testing.TB, want string) {
	t.Helper()
	c := b.Counts()
	if c.Accepted != 0 || len(c.Refusals) == 0 || !strings.Contains(c.Refusals[0], want) {
		t.Fatalf("the broker accepted %d and refused %q; want a refusal for %q", c.Accepted, c.Refusals, want)
	}
}

// IsolateAWS keeps the AWS credential chain of a test off this machine's
// own: no config or credentials files, no instance metadata, none of the
// AWS_* variables that name credentials, a profile or a role.
func IsolateAWS(t testing.TB) {
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, name := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ROLE_ARN",
		"AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_ENDPOINT_URL_STS"} {
		t.Setenv(name, "")
	}
}
