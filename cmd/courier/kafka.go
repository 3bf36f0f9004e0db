package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/kafkaaddr"
	"github.com/courierkit/courier/internal/textcut"
	"github.com/courierkit/courier/kafkaauth"
	"github.com/spf13/cobra"
)

// kafkaFlags are the Kafka connection options shared by every command that
// talks to Kafka: brokers, client id, TLS and SASL. Each flag also reads a
// COURIER_* environment variable; the SASL password is best passed that way
// (COURIER_SASL_PASSWORD), since a flag shows in the process list.
type kafkaFlags struct {
	brokers  string
	clientID string
	tls      tlsFlags
	sasl     saslFlags
	// timeout bounds each dial, request and metadata refresh (--kafka-timeout).
	timeout time.Duration
	// envErr is a COURIER_* variable that could not be parsed while the
	// flags were registered; config reports it as a usage error.
	envErr error
}

// tlsFlags are the TLS options of kafkaFlags.
type tlsFlags struct {
	enable             bool
	caFile             string
	certFile           string
	keyFile            string
	serverName         string
	insecureSkipVerify bool
}

// saslFlags are the SASL options of kafkaFlags.
type saslFlags struct {
	mechanism string
	user      string
	// password and oauth.clientSecret are only what their flags were
	// given; apply falls back to their COURIER_* variables, so a value
	// never shows as a default in --help.
	password string
	oauth    oauthFlags
	aws      awsFlags
}

// oauthFlags are the options of --sasl-mechanism OAUTHBEARER.
type oauthFlags struct {
	tokenURL     string
	clientID     string
	clientSecret string
	scope        string
	extensions   []string
	params       []string
	caFile       string
}

// awsFlags are the options of --sasl-mechanism AWS_MSK_IAM.
type awsFlags struct {
	region  string
	profile string
	roleARN string
}

// The environment variables operators pass secrets in.
const (
	envSASLPassword     = "COURIER_SASL_PASSWORD"
	envOAuthSecret      = "COURIER_SASL_OAUTH_CLIENT_SECRET"
	envOAuthStaticToken = "COURIER_SASL_OAUTH_TOKEN"
)

// mechanismMSKIAM is --sasl-mechanism's name for Amazon MSK's IAM access
// control, which is OAUTHBEARER with a token AWS's signer makes.
const mechanismMSKIAM = "AWS_MSK_IAM"

// saslMechanisms are the SASL mechanisms --sasl-mechanism accepts.
var saslMechanisms = []string{sarama.SASLTypePlaintext, sarama.SASLTypeSCRAMSHA256, sarama.SASLTypeSCRAMSHA512, sarama.SASLTypeOAuth, mechanismMSKIAM}

// register adds the connection flags to cmd and its subcommands.
func (k *kafkaFlags) register(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&k.brokers, "brokers", envOr("COURIER_BROKERS", "127.0.0.1:9092"),
		"Kafka bootstrap addresses, comma-separated (env COURIER_BROKERS)")
	f.DurationVar(&k.timeout, "kafka-timeout", k.envDuration("COURIER_KAFKA_TIMEOUT", DefaultKafkaTimeout),
		"how long to wait for a Kafka broker to connect or answer one request; a command against brokers that do not answer fails after about this long, at most twice it (env COURIER_KAFKA_TIMEOUT)")
	f.StringVar(&k.clientID, "client-id", envOr("COURIER_CLIENT_ID", "courier"), "Kafka client id (env COURIER_CLIENT_ID)")

	f.BoolVar(&k.tls.enable, "tls", k.envBool("COURIER_TLS"),
		"connect with TLS, trusting the system's CAs unless --tls-ca is set (env COURIER_TLS); the other --tls-* options imply it")
	f.StringVar(&k.tls.caFile, "tls-ca", envOr("COURIER_TLS_CA", ""),
		"PEM file of the CA certificates that signed the brokers' certificates (env COURIER_TLS_CA)")
	f.StringVar(&k.tls.certFile, "tls-cert", envOr("COURIER_TLS_CERT", ""),
		"PEM client certificate, for brokers that require one; needs --tls-key (env COURIER_TLS_CERT)")
	f.StringVar(&k.tls.keyFile, "tls-key", envOr("COURIER_TLS_KEY", ""),
		"PEM private key of --tls-cert (env COURIER_TLS_KEY)")
	f.StringVar(&k.tls.serverName, "tls-server-name", envOr("COURIER_TLS_SERVER_NAME", ""),
		"name to verify the brokers' certificates against, when it is not the host in --brokers (env COURIER_TLS_SERVER_NAME)")
	f.BoolVar(&k.tls.insecureSkipVerify, "tls-insecure-skip-verify", k.envBool("COURIER_TLS_INSECURE_SKIP_VERIFY"),
		"do not verify the brokers' certificates: for tests only, anyone on the path can read and change the traffic (env COURIER_TLS_INSECURE_SKIP_VERIFY)")

	f.StringVar(&k.sasl.mechanism, "sasl-mechanism", envOr("COURIER_SASL_MECHANISM", ""),
		"SASL mechanism: PLAIN (sends the password as is: use it with --tls), SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (--sasl-oauth-*), or AWS_MSK_IAM (Amazon MSK's IAM access control, --aws-*); empty: no SASL (env COURIER_SASL_MECHANISM)")
	f.StringVar(&k.sasl.user, "sasl-user", envOr("COURIER_SASL_USER", ""), "SASL user name, for PLAIN and SCRAM (env COURIER_SASL_USER)")
	f.StringVar(&k.sasl.password, "sasl-password", "",
		"SASL password, for PLAIN and SCRAM (env "+envSASLPassword+"; prefer the variable: a flag shows in the process list)")
	f.StringVar(&k.sasl.oauth.tokenURL, "sasl-oauth-token-url", envOr("COURIER_SASL_OAUTH_TOKEN_URL", ""),
		"OAUTHBEARER: the identity provider's token endpoint, asked for tokens with the client-credentials grant and again before each expires; without it, the token in "+envOAuthStaticToken+" (env COURIER_SASL_OAUTH_TOKEN_URL)")
	f.StringVar(&k.sasl.oauth.clientID, "sasl-oauth-client-id", envOr("COURIER_SASL_OAUTH_CLIENT_ID", ""), "OAUTHBEARER: the OAuth client id (env COURIER_SASL_OAUTH_CLIENT_ID)")
	f.StringVar(&k.sasl.oauth.clientSecret, "sasl-oauth-client-secret", "",
		"OAUTHBEARER: the OAuth client secret (env "+envOAuthSecret+"; prefer the variable: a flag shows in the process list)")
	f.StringVar(&k.sasl.oauth.scope, "sasl-oauth-scope", envOr("COURIER_SASL_OAUTH_SCOPE", ""),
		"OAUTHBEARER: the scopes to ask for, space-separated; empty: the endpoint's default (env COURIER_SASL_OAUTH_SCOPE)")
	f.StringArrayVar(&k.sasl.oauth.extensions, "sasl-oauth-extension", splitList(os.Getenv("COURIER_SASL_OAUTH_EXTENSIONS")),
		"OAUTHBEARER: a SASL extension key=value sent with each token, e.g. logicalCluster=lkc-abc12 (repeat for more; env COURIER_SASL_OAUTH_EXTENSIONS, comma-separated)")
	f.StringArrayVar(&k.sasl.oauth.params, "sasl-oauth-param", splitList(os.Getenv("COURIER_SASL_OAUTH_PARAMS")),
		"OAUTHBEARER: another form parameter key=value of the token request, e.g. audience=kafka (Auth0) or resource=… (repeat for more; env COURIER_SASL_OAUTH_PARAMS, comma-separated)")
	f.StringVar(&k.sasl.oauth.caFile, "sasl-oauth-ca", envOr("COURIER_SASL_OAUTH_CA", ""),
		"OAUTHBEARER: PEM file of the CAs that signed the token endpoint's certificate, when the system does not trust it (env COURIER_SASL_OAUTH_CA)")
	f.StringVar(&k.sasl.aws.region, "aws-region", envOr("COURIER_AWS_REGION", os.Getenv("AWS_REGION")),
		"AWS_MSK_IAM: the cluster's AWS region, e.g. eu-west-1 (env COURIER_AWS_REGION, else AWS_REGION)")
	f.StringVar(&k.sasl.aws.profile, "aws-profile", envOr("COURIER_AWS_PROFILE", ""),
		"AWS_MSK_IAM: the shared config profile to take credentials from; empty: the standard chain (environment, AWS_PROFILE, web identity as on EKS, ECS or EC2 role) (env COURIER_AWS_PROFILE)")
	f.StringVar(&k.sasl.aws.roleARN, "aws-role-arn", envOr("COURIER_AWS_ROLE_ARN", ""),
		"AWS_MSK_IAM: a role to assume with the chain's credentials, whose credentials sign the tokens (env COURIER_AWS_ROLE_ARN)")
}

// envBool reads a boolean environment variable for a flag default; a value
// strconv.ParseBool does not take is remembered in envErr and the default
// is false.
func (k *kafkaFlags) envBool(name string) bool {
	raw, ok := os.LookupEnv(name)
	if !ok || raw == "" {
		return false
	}
	v, err := strconv.ParseBool(raw)
	if err != nil && k.envErr == nil {
		k.envErr = fmt.Errorf("%s=%q: use true or false", name, raw)
	}
	return v
}

// DefaultKafkaTimeout is --kafka-timeout's default.
const DefaultKafkaTimeout = 10 * time.Second

// boundReads sets cfg's read timeout to timeout, but past the time a
// broker may hold a produce request (Producer.Timeout), which is an answer
// on its way and no silence.
func boundReads(cfg *sarama.Config, timeout time.Duration) {
	cfg.Net.ReadTimeout = max(timeout, cfg.Producer.Timeout+5*time.Second)
}

// dialKafka opens a client of brokers, giving up when ctx ends or, for
// brokers that accept connections and never answer, after twice
// --kafka-timeout (the longest a metadata request and its retry take).
func (k *kafkaFlags) dialKafka(ctx context.Context, brokers []string, cfg *sarama.Config) (sarama.Client, error) {
	type result struct {
		client sarama.Client
		err    error
	}
	done := make(chan result, 1)
	go func() {
		client, err := sarama.NewClient(brokers, cfg)
		done <- result{client, err}
	}()
	limit := time.NewTimer(2 * k.timeout)
	defer limit.Stop()
	var stopped error
	select {
	case r := <-done:
		if r.err != nil {
			return nil, k.unreachable(r.err)
		}
		return r.client, nil
	case <-ctx.Done():
		stopped = fmt.Errorf("stopped while connecting to Kafka at %s: %w", strings.Join(brokers, ","), ctx.Err())
	case <-limit.C:
		stopped = k.unreachable(fmt.Errorf("no answer in %v", 2*k.timeout))
	}
	go func() { // the attempt ends within its timeouts; close what it opened
		if r := <-done; r.err == nil {
			_ = r.client.Close()
		}
	}()
	return nil, stopped
}

// envDuration reads a duration environment variable for a flag default; a
// value time.ParseDuration does not take is remembered in envErr.
func (k *kafkaFlags) envDuration(name string, def time.Duration) time.Duration {
	raw, ok := os.LookupEnv(name)
	if !ok || raw == "" {
		return def
	}
	v, err := time.ParseDuration(raw)
	if err != nil && k.envErr == nil {
		k.envErr = fmt.Errorf("%s=%q: use a duration such as 10s", name, raw)
	}
	return v
}

// config returns the broker list and a Sarama configuration with the
// connection options applied; bad options are usage errors.
func (k *kafkaFlags) config() ([]string, *sarama.Config, error) {
	if k.envErr != nil {
		return nil, nil, usageError{k.envErr}
	}
	brokers := splitList(k.brokers)
	if len(brokers) == 0 {
		return nil, nil, usageError{fmt.Errorf("--brokers is empty: name at least one Kafka broker, e.g. --brokers 127.0.0.1:9092")}
	}
	for _, b := range brokers {
		if err := kafkaaddr.Validate(b); err != nil {
			return nil, nil, usageError{fmt.Errorf("--brokers %q %w", b, err)}
		}
	}
	if k.timeout <= 0 || k.timeout > time.Hour {
		return nil, nil, usageError{fmt.Errorf("--kafka-timeout %v: use a positive duration up to 1h, such as 10s", k.timeout)}
	}
	cfg := sarama.NewConfig()
	cfg.ClientID = k.clientID
	// Brokers that do not answer (a port that accepts and stays silent, a
	// firewall that drops) fail the command in about --kafka-timeout: each
	// dial and request waits that long, and a metadata refresh retries no
	// longer than that.
	cfg.Net.DialTimeout, cfg.Net.ReadTimeout, cfg.Net.WriteTimeout = k.timeout, k.timeout, k.timeout
	cfg.Metadata.Timeout = k.timeout
	tlsConfig, err := k.tls.config()
	if err != nil {
		return nil, nil, usageError{err}
	}
	if tlsConfig != nil {
		cfg.Net.TLS.Enable, cfg.Net.TLS.Config = true, tlsConfig
	}
	if err := k.sasl.apply(cfg, tlsConfig != nil, k.timeout); err != nil {
		return nil, nil, usageError{err}
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, usageError{fmt.Errorf("Kafka options: %w", err)}
	}
	return brokers, cfg, nil
}

// on reports whether TLS is asked for, by --tls or by any other --tls-*
// option.
func (t *tlsFlags) on() bool {
	return t.enable || t.caFile != "" || t.certFile != "" || t.keyFile != "" || t.serverName != "" || t.insecureSkipVerify
}

// config builds the client TLS configuration, or nil without TLS.
func (t *tlsFlags) config() (*tls.Config, error) {
	if !t.on() {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.serverName, InsecureSkipVerify: t.insecureSkipVerify}
	if t.insecureSkipVerify && t.caFile != "" {
		return nil, errors.New("--tls-insecure-skip-verify ignores --tls-ca: drop one of them (keep --tls-ca to verify the brokers)")
	}
	if t.caFile != "" {
		var err error
		if c.RootCAs, err = readCAs("--tls-ca", t.caFile); err != nil {
			return nil, err
		}
	}
	switch {
	case t.certFile != "" && t.keyFile == "":
		return nil, errors.New("--tls-cert needs --tls-key: name the private key file of the client certificate")
	case t.keyFile != "" && t.certFile == "":
		return nil, errors.New("--tls-key needs --tls-cert: name the client certificate file the key belongs to")
	case t.certFile != "":
		cert, err := tls.LoadX509KeyPair(t.certFile, t.keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s / --tls-key %s: %w (want PEM files of a certificate and its own private key)", t.certFile, t.keyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// readCAs reads the PEM file of CA certificates that flag names.
func readCAs(flag, file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (name a readable PEM file of CA certificates)", flag, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in it (want -----BEGIN CERTIFICATE----- blocks)", flag, file)
	}
	return pool, nil
}

// apply validates the SASL options and sets them on cfg; tls says
// whether the connection is encrypted. Its errors name the secrets'
// variables, never their values.
func (s *saslFlags) apply(cfg *sarama.Config, tls bool, timeout time.Duration) error {
	mechanism, err := s.build(tls, timeout)
	if err != nil {
		return err
	}
	return kafkaauth.Connection{SASL: mechanism}.Apply(cfg)
}

// build returns the mechanism the options name, checking that no option
// of another mechanism is set.
func (s *saslFlags) build(tls bool, timeout time.Duration) (kafkaauth.Mechanism, error) {
	password := cmp.Or(s.password, os.Getenv(envSASLPassword))
	name := strings.ToUpper(s.mechanism)
	if err := s.stray(name); err != nil {
		return kafkaauth.Mechanism{}, err
	}
	switch name {
	case "":
		return kafkaauth.Mechanism{}, nil
	case sarama.SASLTypePlaintext, sarama.SASLTypeSCRAMSHA256, sarama.SASLTypeSCRAMSHA512:
		if s.user == "" {
			return kafkaauth.Mechanism{}, fmt.Errorf("--sasl-mechanism %s needs --sasl-user (or COURIER_SASL_USER)", name)
		}
		if password == "" {
			return kafkaauth.Mechanism{}, fmt.Errorf("--sasl-user %s has no password: set %s (or --sasl-password)", s.user, envSASLPassword)
		}
		switch name {
		case sarama.SASLTypeSCRAMSHA256:
			return kafkaauth.SCRAMSHA256(s.user, password), nil
		case sarama.SASLTypeSCRAMSHA512:
			return kafkaauth.SCRAMSHA512(s.user, password), nil
		}
		return kafkaauth.Plain(s.user, password), nil
	case sarama.SASLTypeOAuth:
		tokens, err := s.oauth.tokens(timeout)
		if err != nil {
			return kafkaauth.Mechanism{}, err
		}
		return kafkaauth.OAuthBearer(tokens), nil
	case mechanismMSKIAM:
		if !tls {
			return kafkaauth.Mechanism{}, errors.New("--sasl-mechanism AWS_MSK_IAM needs --tls: MSK's IAM listeners (port 9098) take TLS only")
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		tokens, err := kafkaauth.MSKIAM{Region: s.aws.region, Profile: s.aws.profile, RoleARN: s.aws.roleARN, Timeout: timeout}.Tokens(ctx)
		if err != nil {
			if s.aws.region == "" {
				return kafkaauth.Mechanism{}, fmt.Errorf("--sasl-mechanism AWS_MSK_IAM: %w (--aws-region, or COURIER_AWS_REGION)", err)
			}
			return kafkaauth.Mechanism{}, fmt.Errorf("--sasl-mechanism AWS_MSK_IAM: %w", err)
		}
		return kafkaauth.OAuthBearer(tokens), nil
	}
	return kafkaauth.Mechanism{}, fmt.Errorf("--sasl-mechanism %s: use %s", strconv.QuoteToASCII(textcut.Cut(s.mechanism, 40, "…")), strings.Join(saslMechanisms, ", "))
}

// stray refuses an option that the mechanism named does not read, which
// is a mistake the operator wants to hear of.
func (s *saslFlags) stray(name string) error {
	userPass := s.user != "" || s.password != ""
	oauth := s.oauth.tokenURL != "" || s.oauth.clientID != "" || s.oauth.clientSecret != "" || s.oauth.scope != "" || len(s.oauth.extensions) > 0 ||
		len(s.oauth.params) > 0 || s.oauth.caFile != ""
	aws := s.aws.profile != "" || s.aws.roleARN != ""
	switch {
	case name == "" && s.user != "":
		return fmt.Errorf("--sasl-user is set but --sasl-mechanism is not: use %s", strings.Join(saslMechanisms, ", "))
	case name == "" && s.password != "":
		return errors.New("--sasl-password is set but --sasl-mechanism and --sasl-user are not: set both, or drop the password")
	case name == "" && (oauth || aws):
		return fmt.Errorf("SASL options are set but --sasl-mechanism is not: use %s", strings.Join(saslMechanisms, ", "))
	case userPass && (name == sarama.SASLTypeOAuth || name == mechanismMSKIAM):
		return fmt.Errorf("--sasl-user and --sasl-password are for PLAIN and SCRAM, not %s: drop them", name)
	case oauth && name != sarama.SASLTypeOAuth:
		return fmt.Errorf("the --sasl-oauth-* options are for --sasl-mechanism OAUTHBEARER, not %s: drop them", cmp.Or(name, "none"))
	case aws && name != mechanismMSKIAM:
		return fmt.Errorf("--aws-profile and --aws-role-arn are for --sasl-mechanism AWS_MSK_IAM, not %s: drop them", name)
	}
	return nil
}

// tokens returns the OAUTHBEARER tokens: from the token endpoint, or the
// static token of COURIER_SASL_OAUTH_TOKEN.
func (o *oauthFlags) tokens(timeout time.Duration) (*kafkaauth.Tokens, error) {
	extensions, err := keyValues("--sasl-oauth-extension", o.extensions, "logicalCluster=lkc-abc12")
	if err != nil {
		return nil, err
	}
	params, err := keyValues("--sasl-oauth-param", o.params, "audience=kafka")
	if err != nil {
		return nil, err
	}
	if err := kafkaauth.CheckExtensions(extensions); err != nil {
		return nil, fmt.Errorf("--sasl-oauth-extension: %w", err)
	}
	static := os.Getenv(envOAuthStaticToken)
	if o.tokenURL == "" {
		if static == "" {
			return nil, fmt.Errorf("--sasl-mechanism OAUTHBEARER needs --sasl-oauth-token-url (with --sasl-oauth-client-id and %s), or a token in %s", envOAuthSecret, envOAuthStaticToken)
		}
		if o.clientID != "" || o.clientSecret != "" || o.scope != "" || len(params) > 0 || o.caFile != "" {
			return nil, fmt.Errorf("%s is set, and --sasl-oauth-client-id, --sasl-oauth-client-secret, --sasl-oauth-scope, --sasl-oauth-param and --sasl-oauth-ca are for --sasl-oauth-token-url: drop them, or the static token", envOAuthStaticToken)
		}
		tokens, err := kafkaauth.StaticToken(static, extensions)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", envOAuthStaticToken, err)
		}
		return tokens, nil
	}
	if static != "" {
		return nil, fmt.Errorf("both --sasl-oauth-token-url and %s are set: keep one", envOAuthStaticToken)
	}
	secret := cmp.Or(o.clientSecret, os.Getenv(envOAuthSecret))
	if o.clientID == "" {
		return nil, errors.New("--sasl-oauth-token-url needs --sasl-oauth-client-id (or COURIER_SASL_OAUTH_CLIENT_ID)")
	}
	if secret == "" {
		return nil, fmt.Errorf("--sasl-oauth-client-id %s has no secret: set %s (or --sasl-oauth-client-secret)", strconv.QuoteToASCII(textcut.Cut(o.clientID, 60, "…")), envOAuthSecret)
	}
	cc := kafkaauth.ClientCredentials{TokenURL: o.tokenURL, ClientID: o.clientID, ClientSecret: secret,
		Scopes: strings.Fields(o.scope), Extensions: extensions, Timeout: timeout}
	if len(params) > 0 {
		cc.Params = url.Values{}
		for k, v := range params {
			cc.Params.Set(k, v)
		}
	}
	if o.caFile != "" {
		if cc.RootCAs, err = readCAs("--sasl-oauth-ca", o.caFile); err != nil {
			return nil, err
		}
	}
	tokens, err := cc.Tokens()
	if err != nil {
		return nil, fmt.Errorf("--sasl-oauth-*: %w", err)
	}
	return tokens, nil
}

// keyValues parses the key=value arguments of flag.
func keyValues(flag string, args []string, example string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range args {
		key, value, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("%s %s: use key=value, e.g. %s", flag, strconv.QuoteToASCII(textcut.Cut(kv, 60, "…")), example)
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("%s %s is given twice", flag, strconv.QuoteToASCII(textcut.Cut(key, 60, "…")))
		}
		out[key] = value
	}
	return out, nil
}

// unreachable explains a failure to reach the brokers, naming a TLS or SASL
// failure as such and what to check.
func (k *kafkaFlags) unreachable(err error) error {
	return fmt.Errorf("cannot reach Kafka at %s within --kafka-timeout %v: %w (%s)", strings.Join(splitList(k.brokers), ","), k.timeout, err, k.hint(err))
}

// hint says what to check for err.
func (k *kafkaFlags) hint(err error) string {
	var (
		unknownCA   x509.UnknownAuthorityError
		hostname    x509.HostnameError
		invalid     x509.CertificateInvalidError
		verifyError *tls.CertificateVerificationError
		header      tls.RecordHeaderError
		opError     *net.OpError
		netError    net.Error
	)
	mechanism := strings.ToUpper(k.sasl.mechanism)
	var tokenError *kafkaauth.TokenError
	switch {
	case errors.As(err, &tokenError) && mechanism == mechanismMSKIAM:
		return "no token to sign in with: check --aws-region, --aws-profile and --aws-role-arn, and the AWS credentials of this process"
	case errors.As(err, &tokenError):
		return "no token to sign in with: check --sasl-oauth-token-url, --sasl-oauth-client-id, " + envOAuthSecret + " and --sasl-oauth-scope against the identity provider's client"
	case errors.Is(err, sarama.ErrSASLAuthenticationFailed) && mechanism == sarama.SASLTypeOAuth:
		return "the broker refused the token: check that the cluster trusts this identity provider (its sasl.oauthbearer settings or the platform's identity pool), " +
			"that --sasl-oauth-scope asks for what it requires, and the --sasl-oauth-extension values (Confluent Cloud: logicalCluster and identityPoolId)"
	case errors.Is(err, sarama.ErrSASLAuthenticationFailed) && mechanism == mechanismMSKIAM:
		return "the broker refused the signed token: check that --aws-region is the cluster's region and that the IAM policy of these credentials allows kafka-cluster:Connect on the cluster"
	case errors.Is(err, sarama.ErrSASLAuthenticationFailed):
		return fmt.Sprintf("SASL authentication failed for user %q with %s: check --sasl-user, %s and --sasl-mechanism against the broker's users",
			k.sasl.user, mechanism, envSASLPassword)
	case errors.Is(err, sarama.ErrUnsupportedSASLMechanism):
		return fmt.Sprintf("the broker does not take SASL mechanism %s: use one in its sasl.enabled.mechanisms", mechanism)
	case errors.As(err, &unknownCA):
		return "TLS: the broker's certificate is signed by an unknown authority: pass the CA that signed it with --tls-ca"
	case errors.As(err, &hostname):
		return "TLS: the broker's certificate is not valid for the name checked (--tls-server-name, else the host in --brokers): set --tls-server-name to a name in the certificate"
	case errors.As(err, &invalid):
		return "TLS: the broker's certificate is invalid (expired, not yet valid, or not for serving): renew it, or check this machine's clock"
	case errors.As(err, &verifyError):
		return "TLS: the broker's certificate failed verification: check --tls-ca and --tls-server-name"
	case errors.As(err, &header):
		return "TLS: the broker did not answer in TLS: if its listener is plaintext, drop --tls and the --tls-* options"
	case errors.As(err, &opError) && opError.Op == "remote error":
		return "TLS: the broker refused the handshake: if it requires a client certificate, pass --tls-cert and --tls-key, signed by a CA it trusts"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens there: is the broker running, and are --brokers right? `courier dev` runs a local one"
	case k.sasl.mechanism != "" && closedConnection(err):
		return fmt.Sprintf("the broker closed the connection: with SASL on, most often because the SASL authentication with %s failed "+
			"(some brokers close instead of answering SASL_AUTHENTICATION_FAILED): %s; %s", k.signIn(), k.signInCheck(), k.tlsMismatch())
	case closedConnection(err) || errors.As(err, &netError) && netError.Timeout():
		hint := "the broker closed the connection or did not answer in time: are --brokers right and reachable from here? " + k.tlsMismatch()
		if k.sasl.mechanism == "" {
			hint += "; if it takes SASL, set --sasl-mechanism and its options"
		}
		return hint
	}
	return "is the broker running, and are --brokers, the TLS (--tls, --tls-ca) and SASL (--sasl-mechanism and its options) options right for its listener?"
}

// signIn names the SASL sign-in for messages.
func (k *kafkaFlags) signIn() string {
	mechanism := strings.ToUpper(k.sasl.mechanism)
	if mechanism == sarama.SASLTypeOAuth || mechanism == mechanismMSKIAM {
		return mechanism
	}
	return fmt.Sprintf("%s as user %q", mechanism, k.sasl.user)
}

// signInCheck says which options to check when a broker refuses the SASL
// sign-in.
func (k *kafkaFlags) signInCheck() string {
	switch strings.ToUpper(k.sasl.mechanism) {
	case sarama.SASLTypeOAuth:
		return "check that the cluster trusts the tokens of --sasl-oauth-token-url, and --sasl-oauth-scope and --sasl-oauth-extension"
	case mechanismMSKIAM:
		return "check --aws-region and that the IAM policy of these credentials allows kafka-cluster:Connect, on MSK's IAM port (9098)"
	}
	return "check --sasl-user, " + envSASLPassword + " and --sasl-mechanism against the broker's users"
}

// tlsMismatch says how to fix TLS on one side only, which brokers answer by
// closing the connection or by waiting.
func (k *kafkaFlags) tlsMismatch() string {
	if k.tls.on() {
		return "if its listener is plaintext, drop --tls and the --tls-* options"
	}
	return "if its listener takes TLS, set --tls (and --tls-ca)"
}

// closedConnection reports whether err is the peer closing the connection,
// which brokers do on a protocol they do not expect or a failed login.
func closedConnection(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
