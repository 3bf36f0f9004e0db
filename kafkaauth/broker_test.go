package kafkaauth_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/internal/kfakeoauth"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/kafkaauth"
)

// checkingBroker starts an in-process cluster that signs clients in with
// OAUTHBEARER, verifying their tokens with v, with sessions of reauth (0:
// no reauthentication), and the topic "events".
func checkingBroker(t *testing.T, v kfakeoauth.Verifier, reauth time.Duration) (*kfakeoauth.Broker, []string) {
	t.Helper()
	b := kfakeoauth.New(v)
	k := testkit.NewKafka(t, testkit.InProcess(), testkit.KfakeOptions(append(b.Options(reauth), kfake.SeedTopics(2, "events"))...))
	b.Install(k.Cluster)
	return b, k.Brokers
}

// signIn connects with the tokens and produces one record, returning the
// client's error.
func signIn(t *testing.T, brokers []string, tokens sarama.AccessTokenProvider) error {
	t.Helper()
	base := sarama.NewConfig()
	base.Net.DialTimeout, base.Net.ReadTimeout = 5*time.Second, 5*time.Second
	base.Metadata.Retry.Max = 0
	base.Producer.Return.Successes = true
	cfg, err := kafkaauth.Connection{ClientID: "signin-test", SASL: kafkaauth.OAuthBearer(tokens)}.Config(base)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	producer, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		return err
	}
	defer producer.Close()
	_, _, err = producer.SendMessage(&sarama.ProducerMessage{Topic: "events", Value: sarama.StringEncoder("signed in")})
	return err
}

func TestClientCredentialsSignInToABrokerThatVerifiesTheToken(t *testing.T) {
	t.Parallel()
	issuer := kfakeoauth.NewIssuer(t, "relay", "s3cret-of-the-relay", time.Hour)
	broker, brokers := checkingBroker(t, issuer, 0)
	tokens, err := kafkaauth.ClientCredentials{TokenURL: issuer.URL, ClientID: "relay", ClientSecret: "s3cret-of-the-relay",
		Scopes: []string{"kafka", "events:write"}, Extensions: map[string]string{"logicalCluster": "lkc-abc12"}}.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	if err := signIn(t, brokers, tokens); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	c := broker.SignedIn(t)
	if ext := c.Extensions[0]; len(ext) != 1 || ext["logicalCluster"] != "lkc-abc12" {
		t.Errorf("the broker got the extensions %q; want logicalCluster=lkc-abc12", ext)
	}
	if n := issuer.Issued(); n != 1 {
		t.Errorf("the issuer issued %d tokens for %d sign-ins; want 1, shared", n, c.Accepted)
	}
	if s := issuer.Scopes(); len(s) != 1 || s[0] != "kafka events:write" {
		t.Errorf("scope asked for: %q", s)
	}
}

func TestTheBrokerRefusesABadOrExpiredToken(t *testing.T) {
	t.Parallel()
	issuer := kfakeoauth.NewIssuer(t, "relay", "s3cret-of-the-relay", time.Hour)
	other := kfakeoauth.NewIssuer(t, "relay", "s3cret-of-the-relay", time.Hour)
	for _, tc := range []struct {
		name, token, refusal string
	}{
		{"expired", issuer.Token(time.Now().Add(-time.Minute)), "expired"},
		{"another issuer's", other.Token(time.Now().Add(time.Hour)), "signature"},
		{"no JWT", "opaque-token-the-broker-does-not-know", "no JWT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			broker, brokers := checkingBroker(t, issuer, 0)
			tokens, err := kafkaauth.StaticToken(tc.token, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = signIn(t, brokers, tokens)
			if !errors.Is(err, sarama.ErrSASLAuthenticationFailed) || !strings.Contains(err.Error(), "invalid credentials with SASL mechanism OAUTHBEARER") {
				t.Fatalf("sign in with a bad token: %v; want the broker's SASL_AUTHENTICATION_FAILED", err)
			}
			broker.Refused(t, tc.refusal)
		})
	}
}

func TestMSKIAMSignsInWithAPresignedConnectRequest(t *testing.T) {
	kfakeoauth.IsolateAWS(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIACOURIERTEST0001")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "courier-test-secret-access-key")
	good := kfakeoauth.MSK{Region: "eu-west-1", AccessKeyID: "AKIACOURIERTEST0001", SecretAccessKey: "courier-test-secret-access-key"}
	tokens, err := kafkaauth.MSKIAM{Region: "eu-west-1"}.Tokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	broker, brokers := checkingBroker(t, good, 0)
	if err := signIn(t, brokers, tokens); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	broker.SignedIn(t)

	for _, tc := range []struct {
		name    string
		broker  kfakeoauth.MSK
		refusal string
	}{
		{"another region", kfakeoauth.MSK{Region: "us-east-1", AccessKeyID: good.AccessKeyID, SecretAccessKey: good.SecretAccessKey}, "not https://kafka.us-east-1.amazonaws.com/"},
		{"another key", kfakeoauth.MSK{Region: "eu-west-1", AccessKeyID: good.AccessKeyID, SecretAccessKey: "not-the-secret"}, "signature does not match"},
		{"expired", kfakeoauth.MSK{Region: "eu-west-1", AccessKeyID: good.AccessKeyID, SecretAccessKey: good.SecretAccessKey,
			Now: func() time.Time { return time.Now().Add(16 * time.Minute) }}, "expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			broker, brokers := checkingBroker(t, tc.broker, 0)
			err := signIn(t, brokers, tokens)
			if !errors.Is(err, sarama.ErrSASLAuthenticationFailed) {
				t.Fatalf("sign in: %v; want SASL_AUTHENTICATION_FAILED", err)
			}
			broker.Refused(t, tc.refusal)
		})
	}
}

func TestAClientWithoutAGoodTokenGetsNothingFromTheBroker(t *testing.T) {
	t.Parallel()
	issuer := kfakeoauth.NewIssuer(t, "relay", "s3cret-of-the-relay", time.Hour)
	broker, brokers := checkingBroker(t, issuer, 0)
	defer func() {
		if c := broker.Counts(); c.Accepted != 0 {
			t.Errorf("the broker accepted %d tokens from clients without one", c.Accepted)
		}
	}()
	for _, tc := range []struct {
		name string
		sasl kafkaauth.Mechanism
	}{
		{"no SASL", kafkaauth.Mechanism{}},
		{"PLAIN with a guessed password", kafkaauth.Plain("kfakeoauth-admin", "guess")},
		{"SCRAM", kafkaauth.SCRAMSHA256("relay", "s3cret-of-the-relay")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := sarama.NewConfig()
			base.Net.DialTimeout, base.Net.ReadTimeout = 2*time.Second, 2*time.Second
			base.Metadata.Retry.Max = 0
			cfg, err := kafkaauth.Connection{SASL: tc.sasl}.Config(base)
			if err != nil {
				t.Fatal(err)
			}
			client, err := sarama.NewClient(brokers, cfg)
			if err == nil {
				topics, terr := client.Topics()
				_ = client.Close()
				t.Fatalf("the broker served a client with %s: topics %q, %v", tc.name, topics, terr)
			}
		})
	}
}

// TestTokensRefreshUnderAReauthenticatingBroker: with tokens that live 3s
// and broker sessions of 1s, a producer that keeps sending reauthenticates
// its connections with each new token, on the same connections.
func TestTokensRefreshUnderAReauthenticatingBroker(t *testing.T) {
	t.Parallel()
	issuer := kfakeoauth.NewIssuer(t, "relay", "s3cret-of-the-relay", 3*time.Second)
	broker, brokers := checkingBroker(t, issuer, time.Second)
	tokens, err := kafkaauth.ClientCredentials{TokenURL: issuer.URL, ClientID: "relay", ClientSecret: "s3cret-of-the-relay"}.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := kafkaauth.Connection{SASL: kafkaauth.OAuthBearer(tokens)}.Config(nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Producer.Return.Successes = true
	producer, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: "events", Value: sarama.StringEncoder("x")}); err != nil {
		t.Fatal(err)
	}
	before := broker.Counts() // the producer's connections are open
	sent := 1
	deadline := time.Now().Add(45 * time.Second)
	for distinct(broker.Counts().Tokens) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("after %d records: %+v", sent, broker.Counts())
		}
		if _, _, err := producer.SendMessage(&sarama.ProducerMessage{Topic: "events", Value: sarama.StringEncoder("x")}); err != nil {
			t.Fatalf("record %d: %v", sent, err)
		}
		sent++
	}
	after := broker.Counts()
	if len(after.Refusals) > 0 {
		t.Errorf("the broker refused %q", after.Refusals)
	}
	if opened := after.Connections - before.Connections; opened > 0 {
		t.Errorf("%d connections opened while the tokens were refreshed; want the same connections reauthenticated", opened)
	}
	if reauth := after.Handshakes - before.Handshakes; reauth < 3 {
		t.Errorf("%d reauthentications; want one per session at least", reauth)
	}
	t.Logf("%d records, %d tokens issued, %d reauthentications, counts %+v", sent, issuer.Issued(), after.Handshakes-before.Handshakes, after.Connections)
}

func distinct(tokens []string) int {
	seen := map[string]bool{}
	for _, t := range tokens {
		seen[t] = true
	}
	return len(seen)
}

// fakeSTS answers AssumeRoleWithWebIdentity and AssumeRole with the
// temporary credentials of role, and records each request's form.
func fakeSTS(t *testing.T, role kfakeoauth.MSK) (endpoint string, forms func() []url.Values) {
	t.Helper()
	var mu sync.Mutex
	var seen []url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		mu.Lock()
		seen = append(seen, r.PostForm)
		mu.Unlock()
		action := r.PostForm.Get("Action")
		w.Header().Set("Content-Type", "text/xml")
		fmt.Fprintf(w, `<%[1]sResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><%[1]sResult>
<AssumedRoleUser><Arn>arn:aws:sts::123456789012:assumed-role/courier-relay/courier</Arn><AssumedRoleId>AROATEST:courier</AssumedRoleId></AssumedRoleUser>
<Credentials><AccessKeyId>%[2]s</AccessKeyId><SecretAccessKey>%[3]s</SecretAccessKey><SessionToken>%[4]s</SessionToken><Expiration>%[5]s</Expiration></Credentials>
</%[1]sResult><ResponseMetadata><RequestId>req-1</RequestId></ResponseMetadata></%[1]sResponse>`,
			action, role.AccessKeyID, role.SecretAccessKey, role.SessionToken, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []url.Values {
		mu.Lock()
		defer mu.Unlock()
		return append([]url.Values(nil), seen...)
	}
}

// TestMSKIAMSignsWithTheWebIdentityOfEKS: a pod of a service account
// annotated with a role (EKS IRSA) has AWS_ROLE_ARN and
// AWS_WEB_IDENTITY_TOKEN_FILE; the chain trades the file's token at STS
// for the role's credentials, and the broker takes tokens signed with
// those.
func TestMSKIAMSignsWithTheWebIdentityOfEKS(t *testing.T) {
	kfakeoauth.IsolateAWS(t)
	role := kfakeoauth.MSK{Region: "eu-west-1", AccessKeyID: "ASIAIRSATEST0001", SecretAccessKey: "irsa-role-secret", SessionToken: "irsa-session-token"}
	sts, forms := fakeSTS(t, role)
	tokenFile := t.TempDir() + "/token"
	if err := os.WriteFile(tokenFile, []byte("eyJ.projected-service-account-token.sig"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/courier-relay")
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", tokenFile)
	t.Setenv("AWS_ENDPOINT_URL_STS", sts)
	tokens, err := kafkaauth.MSKIAM{Region: "eu-west-1"}.Tokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	broker, brokers := checkingBroker(t, role, 0)
	if err := signIn(t, brokers, tokens); err != nil {
		t.Fatalf("sign in: %v (STS saw %v)", err, forms())
	}
	broker.SignedIn(t)
	f := forms()
	if len(f) == 0 || f[0].Get("Action") != "AssumeRoleWithWebIdentity" || f[0].Get("WebIdentityToken") != "eyJ.projected-service-account-token.sig" ||
		f[0].Get("RoleArn") != "arn:aws:iam::123456789012:role/courier-relay" {
		t.Errorf("STS was asked %v; want AssumeRoleWithWebIdentity with the file's token and the role", f)
	}
}

// TestMSKIAMAssumesTheRoleItIsGiven: with RoleARN the chain's credentials
// assume the role first, and the tokens are signed with the role's.
func TestMSKIAMAssumesTheRoleItIsGiven(t *testing.T) {
	kfakeoauth.IsolateAWS(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIABASETEST0001")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "base-secret")
	role := kfakeoauth.MSK{Region: "eu-west-1", AccessKeyID: "ASIAROLETEST0001", SecretAccessKey: "role-secret", SessionToken: "role-session-token"}
	sts, forms := fakeSTS(t, role)
	t.Setenv("AWS_ENDPOINT_URL_STS", sts)
	tokens, err := kafkaauth.MSKIAM{Region: "eu-west-1", RoleARN: "arn:aws:iam::123456789012:role/courier-relay"}.Tokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	broker, brokers := checkingBroker(t, role, 0)
	if err := signIn(t, brokers, tokens); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	broker.SignedIn(t)
	if f := forms(); len(f) == 0 || f[0].Get("Action") != "AssumeRole" || f[0].Get("RoleSessionName") != "courier" {
		t.Errorf("STS was asked %v; want AssumeRole with the session name courier", f)
	}
}

func TestMSKIAMWithoutCredentialsSaysWhereTheyComeFrom(t *testing.T) {
	kfakeoauth.IsolateAWS(t)
	tokens, err := kafkaauth.MSKIAM{Region: "eu-west-1", Timeout: 5 * time.Second}.Tokens(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	_, err = tokens.Token()
	if err == nil || !strings.Contains(err.Error(), "AWS MSK IAM in eu-west-1") || !strings.Contains(err.Error(), "eks.amazonaws.com/role-arn") {
		t.Fatalf("no credentials anywhere: %v; want the source and where credentials come from", err)
	}
}
