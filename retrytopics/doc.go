// Package retrytopics is the topology of courier's retry topics and the
// wire contract of the records in them: a message whose in-process attempts
// ran out waits in a retry topic before it is handled again, so that it
// holds up neither its partition nor the messages behind it.
//
// # Topology
//
// New builds the topology of a main topic from a list of delays, e.g. 5s,
// 1m, 10m:
//
//	orders              the main topic
//	orders.retry.5s     tier 1: handled again 5s after it failed
//	orders.retry.1m     tier 2
//	orders.retry.10m    tier 3
//	orders.dlq          after the last tier
//
// Tiers with equal delays share one topic (a record's retry_attempt header
// tells its tier). Ensure creates the retry and dead-letter topics with the
// main topic's partition count, or checks that they exist.
//
// # Records in a retry topic
//
// A record moving to a tier keeps the original key, value and headers, and
// carries the retry headers (Headers, Parse): retry_attempt (the tier),
// retry_failed_attempts, retry_original_topic, retry_original_partition,
// retry_original_offset, retry_original_timestamp, retry_not_before,
// retry_first_failed_at, retry_last_error and retry_consumer_group; times
// are unix milliseconds. A record moving on replaces them, never appends.
// Strip removes them again, which is how a dead letter or a replay gets the
// original headers back. Headers, Parse and Strip work on courier's own
// record.Header (the consumer's Message.Headers), not on a Kafka client's.
//
// The consumer (consumer.Config.RetryTopics) does the rest: it sends failed
// messages to the next tier, consumes the retry topics with the same
// handler, and waits for each record's retry_not_before with the partition
// paused, never sleeping in the handler.
//
// # Replaying a dead letter to the group that failed it
//
// Retry topics are shared by every consumer group of a topic: each record
// names its group (retry_consumer_group), and the other groups leave it
// alone. A dead letter replayed to its original topic reaches every group;
// ReplayToGroup (and ReplayRoute, for dlq.ReplayConfig.Route) writes it to
// the first tier of its topic instead, due now, naming the group the
// envelope names, so that only that group handles it again, its failed
// attempts counted on. The delays must be those of the group's consumer;
// a dead letter of the relay names no group and goes back to its topic.
//
// # Key order across tiers
//
// A message waiting in a tier lets the later messages of its key overtake
// it. With a KeyOrder (NewRedisKeyOrder), the consumer parks the key while
// one of its messages waits in a tier, and sends the key's later messages
// after it, through the tiers, until it is settled. The price: a key with
// a failing message stops for all its messages until that one is handled
// or dead-lettered, every keyed message costs a Redis round trip (one per
// batch), and order holds only while Redis keeps the parked keys.
//
// The guide tells how to use it: [Retry topics and dedupe].
//
// [Retry topics and dedupe]: https://github.com/courierkit/courier/blob/main/docs/retry-topics-and-dedupe.md
package retrytopics
