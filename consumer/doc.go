// Package consumer runs a Handler over the messages of a Kafka consumer
// group (Sarama) and makes the failure paths boring: it retries a failing
// handler in process and then through retry topics, writes what still
// fails to a dead-letter topic as a dlq envelope, skips messages processed
// already, pauses a partition while a downstream's circuit breaker is open,
// and commits an offset only once its message is settled.
//
// # Running
//
// New validates a Config; Run joins the group and handles messages until
// its context ends:
//
//	c, err := consumer.New(consumer.Config{
//		Brokers: []string{"kafka-1:9092"},
//		Group:   "payouts",
//		Topics:  []string{"payouts"},
//		Handler: consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
//			return pay(ctx, m.Value)
//		}),
//	})
//	if err != nil {
//		return err
//	}
//	return c.Run(ctx)
//
// Run rejoins after every rebalance and keeps retrying while Kafka is
// unreachable. When its context ends, or a rebalance takes partitions
// away, the claims of those partitions end: no new message or attempt
// starts on them, their waits (retry backoffs, open breakers, dedupe,
// failing writes) stop at once, and their handlers and dead-letter writes
// in flight get ShutdownTimeout to finish. With Sarama's eager strategies
// (the default) a rebalance ends the whole session, every partition's
// claim with it; with a cooperative one (sarama.NewBalanceStrategyCooperativeSticky)
// only the claims of the partitions that move end, and the others go on.
// Offsets are marked as messages settle and committed by Sarama every
// Consumer.Offsets.AutoCommit.Interval and when a partition is given up.
//
// # What happens to a message
//
// A message is settled when the handler returns nil, or when it is
// written to a retry topic or its dead-letter topic (or skipped as a
// duplicate); only then is its offset marked, so a crash or a rebalance
// hands an unsettled message to the next owner instead of losing it
// (ARCHITECTURE.md, guarantee 4). Until then:
//
//   - A failed attempt is retried, up to MaxAttempts (5) attempts, with
//     failsafe-go: exponential Backoff with jitter and a cap, each attempt
//     bounded by AttemptTimeout. RetryAfter picks the next delay; the
//     waits are timers that end with the partition's claim, so they never
//     hold up a rebalance (Sarama heartbeats on its own goroutine).
//   - Permanent errors, and errors Config.Retryable refuses, skip the
//     remaining attempts. A panicking handler fails its attempt with a
//     *PanicError.
//   - When the attempts run out, or at the first permanent error, the
//     message goes to <topic>.dlq (DeadLetterSuffix) as a version-1
//     envelope (package dlq), or in raw mode with DeadLetterRaw, and
//     OnDeadLetter is called. The write runs beside the handling: the
//     partition goes on with the next messages (up to
//     MaxWritesInFlight writes at once), and no offset is marked past
//     the message until it is written. If the write fails, it is retried
//     with the same backoff until it succeeds or the session ends: the
//     partition takes no new message meanwhile and nothing past the
//     message is committed, so nothing is lost.
//   - When the handler returns an open-breaker error (a *BreakerOpenError
//     from Breaker.Do, or gobreaker's ErrOpenState or ErrTooManyRequests),
//     the attempt does not count: the partition stops fetching
//     (ConsumerGroup.Pause) until the breaker lets a probe through, and
//     then the same message is handled again (ARCHITECTURE.md, guarantee
//     5). A Breaker opens only on errors that say its downstream is
//     unreachable or overloaded (IsUnavailable: network errors, timeouts,
//     errors marked with Unavailable), never on a failure of one message,
//     which is retried and dead-lettered alone.
//
// # Retry topics
//
// With Config.RetryTopics (package retrytopics), a message whose attempts ran out
// does not go to the dead-letter topic at once: it moves to its topic's
// first retry tier, <topic>.retry.<delay>, with its key, value and headers
// and the retry_* headers, and its offset is committed once that write is
// acknowledged. The consumer subscribes to the retry topics itself and
// handles their records with the same handler, each no earlier than its
// retry_not_before: the partition pauses until then (no sleep in the
// handler, heartbeats go on, other partitions flow). A record failing again
// moves to the next tier, and after the last to the dead-letter topic with
// its whole history (retry_count counts every attempt, first_failed_at is
// the first failure, the original topic, partition and offset are the main
// topic's). Message.Attempt counts on across the tiers, Message.RetryRound
// tells the tier and Message.OriginalTopic the main topic. Permanent errors
// skip the tiers. MaxAttempts applies per tier: set it to 1 for one attempt
// per tier.
//
// Config.KeyOrder keeps a key's messages in order across the tiers: while
// one waits in a tier, later messages of its key follow it there instead of
// being handled first.
//
// # Deduplication
//
// With Config.Dedupe (package dedupe), the ids (ce_id) of the messages
// taken are claimed in the store in one round trip per batch before the
// handler sees them; the next batch is claimed while this one is handled.
// A message processed already is skipped; one being processed elsewhere
// waits (the partition pauses) until that claim ends.
// After the handler succeeds, the id is marked processed, in batches beside
// the handling, and only then is the offset marked. When the message moves
// to a retry tier or the dead-letter topic, its claim is released. While
// the store fails, the partition pauses and asks again (nothing processed
// twice, nothing lost); Dedupe.FailOpen handles messages without it instead.
//
// Message.TenantID is the ce_tenantid header, kept through retry tiers,
// dead letters and replays; an invalid one counts as none.
//
// A message carries its ce_id (Message.ID) and ce_correlationid; a
// traceparent header continues the producer's trace in the handler's
// context. Missing or malformed headers leave those empty; the message is
// handled all the same. With Config.TracerProvider the consumer makes
// OpenTelemetry spans: one per attempt ("process <topic>", which the
// handler's context carries) and one per write to a retry topic or the
// dead-letter topic ("send <topic>", whose trace context the record
// carries).
//
// # Ordering
//
// By default each partition is handled one message at a time, in offset
// order. With Workers > 1, a partition's messages are spread over that many
// workers by key, so that the messages of one key never overlap or
// reorder, and offsets are marked up to the lowest message not yet
// settled.
//
// # Observing
//
// Logs go to Config.Logger with topic, partition, offset, ce_id and
// correlation_id. Config.Hooks receive counts (with the tenant, for a
// TenantMessageHook), durations, in-flight messages, breaker states and
// lag; package prom has the Prometheus implementation. Consumer.Liveness
// and Consumer.Readiness are http.Handlers for Kubernetes' probes: live
// while Run runs, ready while the consumer is in its group or out of it for
// less than Config.ReadinessGrace.
//
// The guides tell how to use it: [The consumer] and [Retry topics and dedupe].
//
// [The consumer]: https://github.com/courierkit/courier/blob/main/docs/consumer.md
// [Retry topics and dedupe]: https://github.com/courierkit/courier/blob/main/docs/retry-topics-and-dedupe.md
package consumer
