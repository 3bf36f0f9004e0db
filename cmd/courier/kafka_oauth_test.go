package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/internal/kfakeoauth"
	"github.com/courierkit/courier/internal/testkit"
)

const oauthSecret = "the-oauth-client-s3cret"

// oauthKafka starts an in-process broker that signs clients in with
// OAUTHBEARER, verifying their tokens with v, seeded with testTopic.
func oauthKafka(t *testing.T, v kfakeoauth.Verifier, opts ...kfake.Opt) (*kfakeoauth.Broker, string) {
	t.Helper()
	b := kfakeoauth.New(v)
	k := testkit.NewKafka(t, testkit.InProcess(), testkit.KfakeOptions(append(append(b.Options(0), opts...), kfake.SeedTopics(1, testTopic))...))
	b.Install(k.Cluster)
	return b, k.Brokers[0]
}

func TestKafkaOAuthRoundTrip(t *testing.T) {
	issuer := kfakeoauth.NewIssuer(t, "courier-relay", oauthSecret, time.Hour)
	broker, addr := oauthKafka(t, issuer)
	t.Setenv(envOAuthSecret, oauthSecret)
	_, client, err := connect(t, "--brokers", addr, "--sasl-mechanism", "oauthbearer", "--sasl-oauth-token-url", issuer.URL,
		"--sasl-oauth-client-id", "courier-relay", "--sasl-oauth-scope", "kafka events", "--sasl-oauth-extension", "logicalCluster=lkc-abc12")
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, client)
	if c := broker.SignedIn(t); c.Extensions[0]["logicalCluster"] != "lkc-abc12" {
		t.Errorf("the broker got the extensions %q; want logicalCluster=lkc-abc12", c.Extensions[0])
	}
	if s := issuer.Scopes(); len(s) != 1 || s[0] != "kafka events" {
		t.Errorf("scopes asked for: %q", s)
	}
}

func TestKafkaOAuthStaticTokenFromEnv(t *testing.T) {
	issuer := kfakeoauth.NewIssuer(t, "courier-relay", oauthSecret, time.Hour)
	_, addr := oauthKafka(t, issuer)
	t.Setenv("COURIER_SASL_MECHANISM", "OAUTHBEARER")
	t.Setenv(envOAuthStaticToken, issuer.Token(time.Now().Add(time.Hour)))
	_, client, err := connect(t, "--brokers", addr)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, client)
}

func TestKafkaOAuthFailuresNameTheFix(t *testing.T) {
	issuer := kfakeoauth.NewIssuer(t, "courier-relay", oauthSecret, time.Hour)
	_, addr := oauthKafka(t, issuer)
	expired := issuer.Token(time.Now().Add(-time.Minute))
	for _, tc := range []struct {
		name   string
		env    map[string]string
		args   []string
		want   []string
		secret string
	}{
		{name: "a token the broker refuses", env: map[string]string{envOAuthStaticToken: expired},
			args: []string{"--sasl-mechanism", "OAUTHBEARER"},
			want: []string{"SASL Authentication failed", "the broker refused the token", "--sasl-oauth-extension"}, secret: expired},
		{name: "a wrong client secret", env: map[string]string{envOAuthSecret: "not-the-secret"},
			args: []string{"--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-token-url", issuer.URL, "--sasl-oauth-client-id", "courier-relay"},
			want: []string{"the OAuth token endpoint " + issuer.URL, `HTTP 401 "invalid_client"`, "check the client id and secret", envOAuthSecret}, secret: "not-the-secret"},
		{name: "the token endpoint down", env: map[string]string{envOAuthSecret: oauthSecret},
			args: []string{"--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-token-url", "http://127.0.0.1:1/token", "--sasl-oauth-client-id", "courier-relay"},
			want: []string{"the OAuth token endpoint http://127.0.0.1:1/token", "cannot reach it", "--sasl-oauth-token-url"}, secret: oauthSecret},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, _, err := connect(t, append([]string{"--brokers", addr}, tc.args...)...)
			if err == nil {
				t.Fatal("connected")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\nwant it to say %q", err, w)
				}
			}
			if strings.Contains(err.Error(), tc.secret) {
				t.Errorf("the error prints the secret or token: %v", err)
			}
		})
	}
}

// mskCredentials sets the static AWS credentials of the tests in the
// environment and keeps the AWS chain off this machine's own files.
func mskCredentials(t *testing.T) kfakeoauth.MSK {
	kfakeoauth.IsolateAWS(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIACOURIERCLITEST01")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "courier-cli-test-secret-key")
	return kfakeoauth.MSK{Region: "eu-west-1", AccessKeyID: "AKIACOURIERCLITEST01", SecretAccessKey: "courier-cli-test-secret-key"}
}

func TestKafkaMSKIAMRoundTripOverTLS(t *testing.T) {
	msk := mskCredentials(t)
	pki := newTestPKI(t)
	broker, addr := oauthKafka(t, msk, kfake.TLS(pki.issue(t, "broker", "127.0.0.1").serverConfig()))
	_, client, err := connect(t, "--brokers", addr, "--tls-ca", pki.caFile, "--sasl-mechanism", "AWS_MSK_IAM", "--aws-region", "eu-west-1")
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, client)
	broker.SignedIn(t)

	_, _, err = connect(t, "--brokers", addr, "--tls-ca", pki.caFile, "--sasl-mechanism", "AWS_MSK_IAM", "--aws-region", "us-east-1")
	if err == nil || !strings.Contains(err.Error(), "check that --aws-region is the cluster's region") {
		t.Fatalf("another region: %v; want the broker's refusal and what to check", err)
	}
	if strings.Contains(err.Error(), "courier-cli-test-secret-key") {
		t.Errorf("the error prints the AWS secret: %v", err)
	}
}

func TestKafkaSignInFlagsThatDoNotFitAreUsageErrors(t *testing.T) {
	mskCredentials(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{name: "OAuth options without the mechanism", args: []string{"--sasl-oauth-token-url", "https://idp.example.com/token"}, want: "--sasl-mechanism is not"},
		{name: "OAuth options with SCRAM", args: []string{"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", "u", "--sasl-password", "p", "--sasl-oauth-scope", "kafka"}, want: "for --sasl-mechanism OAUTHBEARER, not SCRAM-SHA-512"},
		{name: "a user with OAUTHBEARER", args: []string{"--sasl-mechanism", "OAUTHBEARER", "--sasl-user", "u"}, want: "for PLAIN and SCRAM, not OAUTHBEARER"},
		{name: "OAUTHBEARER without a token", args: []string{"--sasl-mechanism", "OAUTHBEARER"}, want: "needs --sasl-oauth-token-url"},
		{name: "no client id", args: []string{"--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-token-url", "https://idp.example.com/token"}, want: "needs --sasl-oauth-client-id"},
		{name: "no client secret", args: []string{"--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-token-url", "https://idp.example.com/token", "--sasl-oauth-client-id", "c"}, want: "set " + envOAuthSecret},
		{name: "plain http to an identity provider", env: map[string]string{envOAuthSecret: "s"}, args: []string{"--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-token-url", "http://idp.example.com/token", "--sasl-oauth-client-id", "c"}, want: "use https"},
		{name: "a static token and a token URL", env: map[string]string{envOAuthStaticToken: "t"}, args: []string{"--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-token-url", "https://idp.example.com/token"}, want: "keep one"},
		{name: "a static token with a space", env: map[string]string{envOAuthStaticToken: "two words"}, args: []string{"--sasl-mechanism", "OAUTHBEARER"}, want: envOAuthStaticToken + ": kafkaauth: the static token holds ' '"},
		{name: "an extension without =", env: map[string]string{envOAuthStaticToken: "t"}, args: []string{"--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-extension", "logicalCluster"}, want: "use key=value"},
		{name: "an extension key kafka cannot parse", env: map[string]string{envOAuthStaticToken: "t"}, args: []string{"--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-extension", "logical-cluster=x"}, want: "letters only"},
		{name: "a parameter courier sets itself", env: map[string]string{envOAuthSecret: "s"}, args: []string{"--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-token-url", "https://idp.example.com/token", "--sasl-oauth-client-id", "c", "--sasl-oauth-param", "client_secret=x"}, want: "client_secret is set by ClientCredentials itself"},
		{name: "an unreadable token endpoint CA", env: map[string]string{envOAuthSecret: "s"}, args: []string{"--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-token-url", "https://idp.example.com/token", "--sasl-oauth-client-id", "c", "--sasl-oauth-ca", "/nope/ca.pem"}, want: "--sasl-oauth-ca: open /nope/ca.pem"},
		{name: "MSK IAM without TLS", args: []string{"--sasl-mechanism", "AWS_MSK_IAM", "--aws-region", "eu-west-1"}, want: "needs --tls"},
		{name: "MSK IAM without a region", env: map[string]string{"AWS_REGION": ""}, args: []string{"--tls", "--sasl-mechanism", "AWS_MSK_IAM"}, want: "needs the cluster's region, e.g. eu-west-1 (--aws-region"},
		{name: "MSK IAM with a bad region", args: []string{"--tls", "--sasl-mechanism", "AWS_MSK_IAM", "--aws-region", "Europe\x1b[2J"}, want: `region "Europe\x1b[2J" is not`},
		{name: "an AWS profile with SCRAM", args: []string{"--sasl-mechanism", "SCRAM-SHA-256", "--sasl-user", "u", "--sasl-password", "p", "--aws-profile", "prod"}, want: "for --sasl-mechanism AWS_MSK_IAM"},
		{name: "an unknown mechanism", args: []string{"--sasl-mechanism", "GSSAPI"}, want: "use PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			k, _ := parseKafkaFlags(t, append([]string{"--brokers", "127.0.0.1:9092"}, tc.args...)...)
			_, _, err := k.config()
			if _, ok := errors.AsType[usageError](err); !ok || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v; want a usage error saying %q", err, tc.want)
			}
			if strings.ContainsRune(err.Error(), 0x1b) {
				t.Errorf("the error prints a raw control character: %q", err)
			}
		})
	}
}

// TestKafkaOAuthTokenEndpointBehindAPrivateCA: a token endpoint whose
// certificate no system trusts is reached with --sasl-oauth-ca, and
// refused without it; --sasl-oauth-param adds to the token request.
func TestKafkaOAuthTokenEndpointBehindAPrivateCA(t *testing.T) {
	issuer := kfakeoauth.NewTLSIssuer(t, "courier-relay", oauthSecret, time.Hour)
	broker, addr := oauthKafka(t, issuer)
	t.Setenv(envOAuthSecret, oauthSecret)
	args := []string{"--brokers", addr, "--sasl-mechanism", "OAUTHBEARER", "--sasl-oauth-token-url", issuer.URL, "--sasl-oauth-client-id", "courier-relay",
		"--sasl-oauth-param", "audience=kafka-broker"}
	_, _, err := connect(t, args...)
	if err == nil || !strings.Contains(err.Error(), "the OAuth token endpoint "+issuer.URL) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Fatalf("without --sasl-oauth-ca: %v; want the endpoint's certificate refused", err)
	}
	_, client, err := connect(t, append(args, "--sasl-oauth-ca", issuer.CAFile)...)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, client)
	broker.SignedIn(t)
	if f := issuer.Forms(); len(f) != 1 || f[0].Get("audience") != "kafka-broker" {
		t.Errorf("token requests %v; want audience=kafka-broker", f)
	}
}
