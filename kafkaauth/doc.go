// Package kafkaauth signs courier's Kafka clients in: it applies TLS and a
// SASL mechanism (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, or
// AWS MSK IAM, which is OAUTHBEARER with a token AWS's signer makes) to a
// *sarama.Config, the one every part of courier takes: the relay's
// (producer.NewSaramaConfig), the consumer's (consumer.NewSaramaConfig)
// and a replay's (dlq.ReplayConfig.Sarama).
//
//	cfg, err := kafkaauth.Connection{
//		TLS:  &tls.Config{MinVersion: tls.VersionTLS12},
//		SASL: kafkaauth.OAuthBearer(tokens),
//	}.Config(consumer.NewSaramaConfig())
//
// The OAUTHBEARER tokens come from a Tokens: ClientCredentials fetches them
// from an OpenID Connect token endpoint with the client-credentials grant,
// MSKIAM signs them for Amazon MSK with the standard AWS credential chain,
// and StaticToken hands out one token (for tests). A Tokens keeps its token
// and fetches the next one in the background past 80% of its lifetime, so
// a broker connection does not wait for the identity provider while its
// token is good (see Tokens for the last tenth of its life); Sarama
// reauthenticates a connection (KIP-368) when the broker gives its session
// a lifetime.
//
// Errors name the endpoint or the region and say what to check; no error,
// String or log ever holds a secret or a token.
//
// The guide is [Running on your cluster].
//
// [Running on your cluster]: https://github.com/courierkit/courier/blob/main/docs/running-on-your-cluster.md
package kafkaauth
