// Package integration holds courier's cross-package end-to-end tests: the
// ones that need more than one of courier's packages, or a Kafka client
// courier did not write, to prove a guarantee. It has no API; its tests
// use only the public packages (producer, consumer, retrytopics, dedupe,
// dlq) and the built courier binary, as an application would.
//
// What lives here:
//
//   - the pipeline test: events enqueued through producer.Outbox in
//     PostgreSQL transactions, published by producer.Relay, handled by a
//     consumer.Consumer with retry tiers, Redis dedupe and a dead-letter
//     topic, the dead letters replayed with dlq.Replay once the handler is
//     fixed, and every event counted (TestPipelineCountsEveryEvent);
//   - the wire-format tests, which read what courier writes with kcat,
//     redis-cli, jq and franz-go's kgo, and feed the consumer, its retry
//     tier, its dead-letter topic and dlq.Replay records kcat and kgo
//     produced (TestKcat…);
//   - the kill tests that span packages: a `courier relay` SIGKILLed
//     between its publish and its settle, whose batch comes twice and is
//     handled once through dedupe, and a `courier dlq replay` SIGKILLed
//     part way through dead letters package dlq wrote.
//
// Tests that exercise one package's own unit stay with that package.
//
// Run them with
//
//	go test -race ./integration/
//
// (`make test` runs them with everything else). They need the test
// PostgreSQL and Redis (`make services`; COURIER_TEST_DATABASE_URL and
// COURIER_TEST_REDIS_URL name others) and run against an in-process kfake
// broker, or against a real cluster named by COURIER_TEST_KAFKA_BROKERS
// (e.g. localhost:9092). The wire-format tests need kcat, jq and redis-cli
// on the PATH: without them they are skipped, and under CI=true they fail.
package integration
