package main

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/internal/testkit"
)

// testTopic is the topic every secured test broker is seeded with.
const testTopic = "secured"

// parseKafkaFlags registers kafkaFlags on a command and parses args as the
// command line would.
func parseKafkaFlags(t *testing.T, args ...string) (*kafkaFlags, *cobra.Command) {
	t.Helper()
	k := new(kafkaFlags)
	cmd := &cobra.Command{Use: "test", RunE: func(*cobra.Command, []string) error { return nil }}
	k.register(cmd)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return k, cmd
}

// securedKafka starts an in-process broker with the given security options
// and the topic testTopic; a real cluster named by COURIER_TEST_KAFKA_BROKERS
// has other security and is not used.
func securedKafka(t *testing.T, opts ...kfake.Opt) string {
	t.Helper()
	k := testkit.NewKafka(t, testkit.InProcess(), testkit.KfakeOptions(append(opts, kfake.SeedTopics(1, testTopic))...))
	return k.Brokers[0]
}

// connect builds the Sarama configuration from args and opens a client; it
// returns the flags and the error unreachable makes of a failure. Failing
// connections are not retried, so a wrong option fails at once.
func connect(t *testing.T, args ...string) (*kafkaFlags, sarama.Client, error) {
	t.Helper()
	k, _ := parseKafkaFlags(t, args...)
	brokers, cfg, err := k.config()
	if err != nil {
		t.Fatalf("config %q: %v", args, err)
	}
	cfg.Net.DialTimeout, cfg.Net.ReadTimeout = 5*time.Second, 3*time.Second
	cfg.Metadata.Retry.Max = 0
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	client, err := sarama.NewClient(brokers, cfg)
	if err != nil {
		return k, nil, k.unreachable(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	return k, client, nil
}

// roundTrip produces three records to testTopic and consumes them back,
// failing the test unless keys and values match in order.
func roundTrip(t *testing.T, client sarama.Client) {
	t.Helper()
	producer, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		t.Fatalf("producer: %v", err)
	}
	defer producer.Close()
	want := make([][2]string, 3)
	for i := range want {
		want[i] = [2]string{fmt.Sprintf("order-%d", i), fmt.Sprintf(`{"id":%d}`, i)}
		msg := &sarama.ProducerMessage{Topic: testTopic, Key: sarama.StringEncoder(want[i][0]), Value: sarama.StringEncoder(want[i][1])}
		if _, _, err := producer.SendMessage(msg); err != nil {
			t.Fatalf("produce %s: %v", want[i][0], err)
		}
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer consumer.Close()
	pc, err := consumer.ConsumePartition(testTopic, 0, sarama.OffsetOldest)
	if err != nil {
		t.Fatalf("consume %s: %v", testTopic, err)
	}
	defer pc.Close()
	deadline := time.After(30 * time.Second)
	for i, w := range want {
		select {
		case m := <-pc.Messages():
			if got := [2]string{string(m.Key), string(m.Value)}; got != w {
				t.Fatalf("record %d: got %q, want %q", i, got, w)
			}
		case err := <-pc.Errors():
			t.Fatalf("consume %s: %v", testTopic, err)
		case <-deadline:
			t.Fatalf("timed out waiting for record %d of %d", i+1, len(want))
		}
	}
}

// allMechanisms are the SASL mechanisms kfake and --sasl-mechanism both
// speak.
var allMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

func TestKafkaSASLRoundTrip(t *testing.T) {
	t.Parallel()
	for _, mechanism := range allMechanisms {
		t.Run(mechanism, func(t *testing.T) {
			t.Parallel()
			password := "pw-" + mechanism
			addr := securedKafka(t, kfake.EnableSASL(), kfake.Superuser(mechanism, "courier", password))
			_, client, err := connect(t, "--brokers", addr, "--sasl-mechanism", strings.ToLower(mechanism), "--sasl-user", "courier", "--sasl-password", password)
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, client)
		})
	}
}

func TestKafkaSASLWrongPasswordNamesAuthentication(t *testing.T) {
	t.Parallel()
	for _, mechanism := range allMechanisms {
		t.Run(mechanism, func(t *testing.T) {
			t.Parallel()
			addr := securedKafka(t, kfake.EnableSASL(), kfake.Superuser(mechanism, "courier", "right-password"))
			_, _, err := connect(t, "--brokers", addr, "--sasl-mechanism", mechanism, "--sasl-user", "courier", "--sasl-password", "wrong-password")
			if err == nil {
				t.Fatal("connected with a wrong password")
			}
			t.Log(err)
			msg := err.Error()
			for _, want := range []string{"SASL authentication", `user "courier"`, mechanism, envSASLPassword} {
				if !strings.Contains(msg, want) {
					t.Errorf("error does not say %q: %v", want, msg)
				}
			}
			if strings.Contains(msg, "wrong-password") {
				t.Errorf("error prints the password: %v", msg)
			}
		})
	}
}

// TestKafkaSASLPasswordFromEnv passes the password as operators should,
// in COURIER_SASL_PASSWORD, and checks --help does not show it.
func TestKafkaSASLPasswordFromEnv(t *testing.T) {
	const password = "env-only-secret"
	t.Setenv(envSASLPassword, password)
	t.Setenv("COURIER_SASL_USER", "courier")
	t.Setenv("COURIER_SASL_MECHANISM", "SCRAM-SHA-512")
	addr := securedKafka(t, kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "courier", password))
	_, client, err := connect(t, "--brokers", addr)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, client)

	_, cmd := parseKafkaFlags(t)
	var help bytes.Buffer
	cmd.SetOut(&help)
	if err := cmd.Help(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(help.String(), password) {
		t.Errorf("--help shows the password:\n%s", help.String())
	}
	if !strings.Contains(help.String(), "(env "+envSASLPassword) {
		t.Errorf("--help does not name %s:\n%s", envSASLPassword, help.String())
	}
}

func TestKafkaTLSRoundTrip(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	server := pki.issue(t, "broker", "127.0.0.1", "localhost")
	client := pki.issue(t, "courier-client")
	for _, tc := range []struct {
		name string
		// server is the broker's TLS configuration; opts adds other kfake
		// options.
		server *tls.Config
		opts   []kfake.Opt
		args   []string
	}{
		{name: "CA", server: server.serverConfig(), args: []string{"--tls-ca", pki.caFile}},
		{
			name:   "server name",
			server: pki.issue(t, "broker.internal", "broker.internal").serverConfig(),
			args:   []string{"--tls", "--tls-ca", pki.caFile, "--tls-server-name", "broker.internal"},
		},
		{
			name:   "client certificate",
			server: pki.requireClientCert(server.serverConfig()),
			args:   []string{"--tls-ca", pki.caFile, "--tls-cert", client.certFile, "--tls-key", client.keyFile},
		},
		{
			name:   "SCRAM over TLS",
			server: server.serverConfig(),
			opts:   []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "courier", "pw")},
			args:   []string{"--tls-ca", pki.caFile, "--sasl-mechanism", "SCRAM-SHA-256", "--sasl-user", "courier", "--sasl-password", "pw"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := securedKafka(t, append(tc.opts, kfake.TLS(tc.server))...)
			_, client, err := connect(t, append([]string{"--brokers", addr}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, client)
		})
	}
}

func TestKafkaTLSFailuresSayWhatToCheck(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	server := pki.issue(t, "broker", "127.0.0.1")
	for _, tc := range []struct {
		name string
		// server is the broker's TLS configuration; nil: plaintext.
		server *tls.Config
		args   []string
		want   []string
	}{
		{
			name:   "without the CA",
			server: server.serverConfig(),
			args:   []string{"--tls"},
			want:   []string{"certificate", "unknown authority", "--tls-ca"},
		},
		{
			name:   "wrong server name",
			server: server.serverConfig(),
			args:   []string{"--tls-ca", pki.caFile, "--tls-server-name", "kafka.example"},
			want:   []string{"certificate", "--tls-server-name"},
		},
		{
			name:   "client certificate missing",
			server: pki.requireClientCert(server.serverConfig()),
			args:   []string{"--tls-ca", pki.caFile},
			want:   []string{"certificate", "--tls-cert", "--tls-key"},
		},
		{
			name:   "plaintext client, TLS listener",
			server: server.serverConfig(),
			want:   []string{"closed the connection", "set --tls"},
		},
		{
			name: "TLS client, plaintext listener",
			args: []string{"--tls-ca", pki.caFile},
			want: []string{"did not answer in time", "drop --tls"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := securedKafka(t, kfake.TLS(tc.server))
			_, _, err := connect(t, append([]string{"--brokers", addr}, tc.args...)...)
			if err == nil {
				t.Fatal("connected")
			}
			t.Log(err)
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q: %v", want, err)
				}
			}
		})
	}
}

func TestKafkaUnreachableNamesRefusedConnection(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, _, err = connect(t, "--brokers", addr)
	if err == nil || !strings.Contains(err.Error(), "nothing listens there") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("got %v, want an error naming %s and that nothing listens there", err, addr)
	}
}

func TestKafkaBadFlagsAreUsageErrors(t *testing.T) {
	t.Setenv(envSASLPassword, "")
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	pki := newTestPKI(t)
	client := pki.issue(t, "client")
	other := pki.issue(t, "other")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		// want are phrases of the error that say what to fix.
		want []string
	}{
		{name: "no brokers", args: []string{"--brokers", " , "}, want: []string{"--brokers", "name at least one"}},
		{name: "cert without key", args: []string{"--tls-cert", client.certFile}, want: []string{"--tls-cert needs --tls-key"}},
		{name: "key without cert", args: []string{"--tls-key", client.keyFile}, want: []string{"--tls-key needs --tls-cert"}},
		{name: "cert and key that do not match", args: []string{"--tls-cert", client.certFile, "--tls-key", other.keyFile}, want: []string{"its own private key"}},
		{name: "unreadable CA file", args: []string{"--tls-ca", filepath.Join(dir, "missing.pem")}, want: []string{"--tls-ca", "no such file", "readable PEM file"}},
		{name: "CA file without a certificate", args: []string{"--tls-ca", notPEM}, want: []string{"no PEM certificate"}},
		{name: "skip verify with a CA", args: []string{"--tls-insecure-skip-verify", "--tls-ca", pki.caFile}, want: []string{"drop one of them"}},
		{name: "unknown mechanism", args: []string{"--sasl-mechanism", "GSSAPI", "--sasl-user", "u", "--sasl-password", "hunter2"}, want: []string{"GSSAPI", "PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"}},
		{name: "user without password", args: []string{"--sasl-mechanism", "PLAIN", "--sasl-user", "u"}, want: []string{"no password", envSASLPassword}},
		{name: "mechanism without user", args: []string{"--sasl-mechanism", "SCRAM-SHA-256"}, want: []string{"needs --sasl-user"}},
		{name: "user without mechanism", args: []string{"--sasl-user", "u", "--sasl-password", "hunter2"}, want: []string{"--sasl-mechanism is not", "SCRAM-SHA-512"}},
		{name: "password without user", args: []string{"--sasl-password", "hunter2"}, want: []string{"set both, or drop the password"}},
		{name: "COURIER_TLS not a boolean", env: map[string]string{"COURIER_TLS": "yes please"}, want: []string{`COURIER_TLS="yes please"`, "true or false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, value := range tc.env {
				t.Setenv(name, value)
			}
			k, _ := parseKafkaFlags(t, append([]string{"--brokers", "127.0.0.1:9092"}, tc.args...)...)
			_, _, err := k.config()
			if _, ok := errors.AsType[usageError](err); !ok {
				t.Fatalf("got %v, want a usageError", err)
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q: %v", want, err)
				}
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error prints the password: %v", err)
			}
		})
	}
}

// testPKI is a certificate authority made for one test, with its
// certificate written to caFile.
type testPKI struct {
	dir    string
	ca     *x509.Certificate
	key    *ecdsa.PrivateKey
	pool   *x509.CertPool
	caFile string
}

// testCert is a certificate the testPKI issued, in memory and as PEM files.
type testCert struct {
	cert              tls.Certificate
	certFile, keyFile string
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "courier test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &testPKI{dir: t.TempDir(), ca: ca, key: key, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.caFile = p.write(t, "ca.pem", "CERTIFICATE", der)
	return p
}

// issue signs a certificate for name, valid for serving the given hosts
// (IP addresses or DNS names) and for client authentication as name.
func (p *testPKI) issue(t *testing.T, name string, hosts ...string) testCert {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	c := testCert{
		certFile: p.write(t, name+".pem", "CERTIFICATE", der),
		keyFile:  p.write(t, name+"-key.pem", "EC PRIVATE KEY", keyDER),
	}
	if c.cert, err = tls.LoadX509KeyPair(c.certFile, c.keyFile); err != nil {
		t.Fatal(err)
	}
	return c
}

// write stores one PEM block in the PKI's directory and returns its path.
func (p *testPKI) write(t *testing.T, name, blockType string, der []byte) string {
	t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: blockType, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// serverConfig is a broker's TLS configuration presenting c.
func (c testCert) serverConfig() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{c.cert}, MinVersion: tls.VersionTLS12}
}

// requireClientCert makes cfg demand a client certificate the PKI signed.
func (p *testPKI) requireClientCert(cfg *tls.Config) *tls.Config {
	cfg.ClientAuth, cfg.ClientCAs = tls.RequireAndVerifyClientCert, p.pool
	return cfg
}
