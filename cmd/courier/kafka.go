package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/kafkaaddr"
	"github.com/spf13/cobra"
	"github.com/xdg-go/scram"
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
	// password is only what --sasl-password was given; config falls back
	// to COURIER_SASL_PASSWORD, so the value never shows as a default in
	// --help.
	password string
}

// envSASLPassword is the environment variable operators pass the SASL
// password in.
const envSASLPassword = "COURIER_SASL_PASSWORD"

// saslMechanisms are the SASL mechanisms --sasl-mechanism accepts.
var saslMechanisms = []sarama.SASLMechanism{sarama.SASLTypePlaintext, sarama.SASLTypeSCRAMSHA256, sarama.SASLTypeSCRAMSHA512}

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
		"SASL mechanism: PLAIN (sends the password as is: use it with --tls), SCRAM-SHA-256 or SCRAM-SHA-512; empty: no SASL (env COURIER_SASL_MECHANISM)")
	f.StringVar(&k.sasl.user, "sasl-user", envOr("COURIER_SASL_USER", ""), "SASL user name (env COURIER_SASL_USER)")
	f.StringVar(&k.sasl.password, "sasl-password", "",
		"SASL password (env "+envSASLPassword+"; prefer the variable: a flag shows in the process list)")
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
	if err := k.sasl.apply(cfg); err != nil {
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
		pem, err := os.ReadFile(t.caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w (name a readable PEM file of CA certificates)", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s: no PEM certificate in it (want -----BEGIN CERTIFICATE----- blocks)", t.caFile)
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

// apply validates the SASL options and sets them on cfg. Its errors name
// the password's variable, never its value.
func (s *saslFlags) apply(cfg *sarama.Config) error {
	password := s.password
	if password == "" {
		password = os.Getenv(envSASLPassword)
	}
	if s.mechanism == "" {
		switch {
		case s.user != "":
			return fmt.Errorf("--sasl-user is set but --sasl-mechanism is not: use %s", mechanismList())
		case s.password != "":
			return errors.New("--sasl-password is set but --sasl-mechanism and --sasl-user are not: set both, or drop the password")
		}
		return nil
	}
	mechanism := sarama.SASLMechanism(strings.ToUpper(s.mechanism))
	switch mechanism {
	case sarama.SASLTypeSCRAMSHA256:
		cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA256} }
	case sarama.SASLTypeSCRAMSHA512:
		cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.SHA512} }
	case sarama.SASLTypePlaintext:
	default:
		return fmt.Errorf("--sasl-mechanism %q: use %s", s.mechanism, mechanismList())
	}
	if s.user == "" {
		return fmt.Errorf("--sasl-mechanism %s needs --sasl-user (or COURIER_SASL_USER)", mechanism)
	}
	if password == "" {
		return fmt.Errorf("--sasl-user %s has no password: set %s (or --sasl-password)", s.user, envSASLPassword)
	}
	cfg.Net.SASL.Enable = true
	cfg.Net.SASL.Mechanism = mechanism
	cfg.Net.SASL.Version = sarama.SASLHandshakeV1
	cfg.Net.SASL.User = s.user
	cfg.Net.SASL.Password = password
	return nil
}

// mechanismList names the accepted SASL mechanisms for error messages.
func mechanismList() string {
	names := make([]string, len(saslMechanisms))
	for i, m := range saslMechanisms {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}

// scramClient is the client side of a SASL/SCRAM conversation, which Sarama
// runs through its SCRAMClient interface.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

// Begin starts a conversation for the user.
func (s *scramClient) Begin(user, password, authzID string) error {
	client, err := s.hash.NewClient(user, password, authzID)
	if err != nil {
		return fmt.Errorf("SCRAM: %w", err)
	}
	s.conv = client.NewConversation()
	return nil
}

// Step answers the broker's challenge.
func (s *scramClient) Step(challenge string) (string, error) { return s.conv.Step(challenge) }

// Done reports whether the conversation is over.
func (s *scramClient) Done() bool { return s.conv.Done() }

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
	switch {
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
		return fmt.Sprintf("the broker closed the connection: with SASL on, most often because the SASL authentication of user %q with %s failed "+
			"(some brokers close instead of answering SASL_AUTHENTICATION_FAILED): check --sasl-user, %s and --sasl-mechanism against the broker's users; %s",
			k.sasl.user, mechanism, envSASLPassword, k.tlsMismatch())
	case closedConnection(err) || errors.As(err, &netError) && netError.Timeout():
		hint := "the broker closed the connection or did not answer in time: are --brokers right and reachable from here? " + k.tlsMismatch()
		if k.sasl.mechanism == "" {
			hint += "; if it takes SASL, set --sasl-mechanism, --sasl-user and " + envSASLPassword
		}
		return hint
	}
	return "is the broker running, and are --brokers, the TLS (--tls, --tls-ca) and SASL (--sasl-mechanism, --sasl-user, " + envSASLPassword + ") options right for its listener?"
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
