package kafkaauth

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"
)

// Connection is how a client reaches and signs in to Kafka.
type Connection struct {
	// ClientID names the client to the brokers; empty keeps the base
	// configuration's.
	ClientID string
	// TLS, when set, encrypts every broker connection with it.
	TLS *tls.Config
	// SASL signs every broker connection in; the zero Mechanism is none.
	SASL Mechanism
}

// Config returns a copy of base (a *sarama.Config such as
// producer.NewSaramaConfig or consumer.NewSaramaConfig returns; nil is
// sarama.NewConfig) with the connection applied and validated.
func (c Connection) Config(base *sarama.Config) (*sarama.Config, error) {
	cfg := sarama.NewConfig()
	if base != nil {
		copied := *base
		cfg = &copied
	}
	if err := c.Apply(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Apply sets the connection on cfg in place and validates the result.
func (c Connection) Apply(cfg *sarama.Config) error {
	if cfg == nil {
		return errors.New("kafkaauth: Apply needs a *sarama.Config (sarama.NewConfig, producer.NewSaramaConfig, consumer.NewSaramaConfig)")
	}
	if c.ClientID != "" {
		cfg.ClientID = c.ClientID
	}
	if c.TLS != nil {
		cfg.Net.TLS.Enable, cfg.Net.TLS.Config = true, c.TLS
	}
	if err := c.SASL.apply(cfg); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("kafkaauth: %w", err)
	}
	return nil
}

// Mechanism is a SASL mechanism with what it signs in with; build one with
// Plain, SCRAMSHA256, SCRAMSHA512 or OAuthBearer. The zero Mechanism is no
// SASL.
type Mechanism struct {
	name     sarama.SASLMechanism
	user     string
	password string
	scram    scram.HashGeneratorFcn
	tokens   sarama.AccessTokenProvider
}

// Plain is SASL/PLAIN, which sends the password as it is: use it over TLS.
func Plain(user, password string) Mechanism {
	return Mechanism{name: sarama.SASLTypePlaintext, user: user, password: password}
}

// SCRAMSHA256 is SASL/SCRAM-SHA-256, which proves the password without
// sending it.
func SCRAMSHA256(user, password string) Mechanism {
	return Mechanism{name: sarama.SASLTypeSCRAMSHA256, user: user, password: password, scram: scram.SHA256}
}

// SCRAMSHA512 is SASL/SCRAM-SHA-512.
func SCRAMSHA512(user, password string) Mechanism {
	return Mechanism{name: sarama.SASLTypeSCRAMSHA512, user: user, password: password, scram: scram.SHA512}
}

// OAuthBearer is SASL/OAUTHBEARER with the tokens of a Tokens
// (ClientCredentials, MSKIAM, StaticToken) or of any other
// sarama.AccessTokenProvider.
func OAuthBearer(tokens sarama.AccessTokenProvider) Mechanism {
	return Mechanism{name: sarama.SASLTypeOAuth, tokens: tokens}
}

// Name is the mechanism's SASL name (PLAIN, SCRAM-SHA-256, OAUTHBEARER, …),
// empty for none.
func (m Mechanism) Name() string { return string(m.name) }

// String names the mechanism and its user, never its password or token.
func (m Mechanism) String() string {
	switch {
	case m.name == "":
		return "no SASL"
	case m.user != "":
		return fmt.Sprintf("SASL %s as %q", m.name, m.user)
	case m.tokens != nil:
		if s, ok := m.tokens.(fmt.Stringer); ok {
			return fmt.Sprintf("SASL %s with %s", m.name, s)
		}
	}
	return "SASL " + string(m.name)
}

// GoString is String, so that %#v prints no password either.
func (m Mechanism) GoString() string { return m.String() }

// apply sets the mechanism on cfg; the zero Mechanism leaves cfg's SASL
// as it is.
func (m Mechanism) apply(cfg *sarama.Config) error {
	if m.name == "" {
		return nil
	}
	switch {
	case m.name == sarama.SASLTypeOAuth && m.tokens == nil:
		return errors.New("kafkaauth: OAuthBearer needs a token provider (ClientCredentials, MSKIAM or StaticToken)")
	case m.name != sarama.SASLTypeOAuth && m.user == "":
		return fmt.Errorf("kafkaauth: SASL %s needs a user name", m.name)
	case m.name != sarama.SASLTypeOAuth && m.password == "":
		return fmt.Errorf("kafkaauth: SASL %s for user %q needs a password", m.name, m.user)
	}
	cfg.Net.SASL.Enable = true
	cfg.Net.SASL.Mechanism = m.name
	cfg.Net.SASL.Version = sarama.SASLHandshakeV1
	cfg.Net.SASL.Handshake = true
	cfg.Net.SASL.User, cfg.Net.SASL.Password = m.user, m.password
	cfg.Net.SASL.TokenProvider = m.tokens
	cfg.Net.SASL.SCRAMClientGeneratorFunc = nil
	if hash := m.scram; hash != nil {
		cfg.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: hash} }
	}
	return nil
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
