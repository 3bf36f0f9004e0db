package kafkaauth_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/kafkaauth"
	"github.com/courierkit/courier/producer"
)

// A consumer on Confluent Cloud with OAuth: tokens from the identity
// provider with the client-credentials grant, and the extensions Confluent
// Cloud asks for.
func ExampleClientCredentials() {
	tokens, err := kafkaauth.ClientCredentials{
		TokenURL:     "https://idp.example.com/oauth2/token",
		ClientID:     "billing-consumer",
		ClientSecret: os.Getenv("COURIER_SASL_OAUTH_CLIENT_SECRET"),
		Scopes:       []string{"kafka"},
		Extensions:   map[string]string{"logicalCluster": "lkc-abc12", "identityPoolId": "pool-Xy12"},
	}.Tokens()
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := kafkaauth.Connection{
		TLS:  &tls.Config{MinVersion: tls.VersionTLS12},
		SASL: kafkaauth.OAuthBearer(tokens),
	}.Config(consumer.NewSaramaConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Net.SASL.Mechanism, cfg.Net.TLS.Enable)
	// Then: consumer.New(consumer.Config{Sarama: cfg, …})
}

// The relay on Amazon MSK with IAM access control, its credentials from
// the standard AWS chain (on EKS: the pod's service account, IRSA).
func ExampleMSKIAM() {
	tokens, err := kafkaauth.MSKIAM{Region: "eu-west-1"}.Tokens(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := kafkaauth.Connection{
		TLS:  &tls.Config{MinVersion: tls.VersionTLS12},
		SASL: kafkaauth.OAuthBearer(tokens),
	}.Config(producer.NewSaramaConfig())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(kafkaauth.OAuthBearer(tokens), cfg.Producer.Idempotent)
	// Then: producer.NewRelay(producer.RelayConfig{Sarama: cfg, …})
}

// SCRAM with the password from the environment.
func ExampleSCRAMSHA512() {
	cfg, err := kafkaauth.Connection{
		ClientID: "payouts",
		TLS:      &tls.Config{MinVersion: tls.VersionTLS12},
		SASL:     kafkaauth.SCRAMSHA512("payouts", "a-password-from-a-secret"),
	}.Config(consumer.NewSaramaConfig())
	fmt.Println(cfg.Net.SASL.Mechanism, cfg.ClientID, err)
	// Output: SCRAM-SHA-512 payouts <nil>
}
