package kafkaauth_test

import (
	"context"
	"crypto/tls"
	"fmt"

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
		ClientSecret: "from-your-secret-store", // os.Getenv("COURIER_SASL_OAUTH_CLIENT_SECRET"), say
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
	// Then: consumer.New(consumer.Config{Sarama: cfg, …}); nothing is
	// fetched until the consumer connects.
	fmt.Println(cfg.Net.SASL.Mechanism, cfg.Net.TLS.Enable, kafkaauth.OAuthBearer(tokens))
	// Output: OAUTHBEARER true SASL OAUTHBEARER with the OAuth token endpoint https://idp.example.com/oauth2/token
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
	// Then: producer.NewRelay(pool, producer.RelayConfig{Sarama: cfg, …});
	// the credentials are looked for when the relay connects.
	fmt.Println(kafkaauth.OAuthBearer(tokens), cfg.Net.TLS.Enable)
	// Output: SASL OAUTHBEARER with AWS MSK IAM in eu-west-1 true
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
