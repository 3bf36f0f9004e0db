// Package consumer runs a Handler over the messages of a Kafka consumer
// group (Sarama) and makes the failure paths boring: it retries a failing
// handler in process, writes what still fails to a dead-letter topic as a
// dlq envelope, pauses a partition while a downstream's circuit breaker is
// open, and commits an offset only once its message is settled.
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
// away, the session ends: no new message or attempt starts, retry waits
// stop at once, and handlers and dead-letter writes in flight get
// ShutdownTimeout to finish. Offsets are marked as messages settle and
// committed by Sarama every Consumer.Offsets.AutoCommit.Interval and when
// the session ends.
//
// # What happens to a message
//
// A message is settled when the handler returns nil, or when it is
// written to its dead-letter topic; only then is its offset marked
// (guarantee 4 of DESIGN.md). Until then:
//
//   - A failed attempt is retried, up to MaxAttempts (3) attempts, with
//     failsafe-go: exponential Backoff with jitter and a cap, each attempt
//     bounded by AttemptTimeout. RetryAfter picks the next delay; the
//     waits are timers that end with the session, so they never hold up a
//     rebalance (Sarama heartbeats on its own goroutine).
//   - Permanent errors, and errors Config.Retryable refuses, skip the
//     remaining attempts. A panicking handler fails its attempt with a
//     *PanicError.
//   - When the attempts run out, or at the first permanent error, the
//     message goes to <topic>.dlq (DeadLetterSuffix) as a version-1
//     envelope (package dlq), or in raw mode with DeadLetterRaw, and
//     OnDeadLetter is called. The write runs beside the handling: the
//     partition goes on with the next messages (up to
//     MaxDeadLettersInFlight writes at once), and no offset is marked past
//     the message until it is written. If the write fails, it is retried
//     with the same backoff until it succeeds or the session ends: the
//     partition takes no new message meanwhile and nothing past the
//     message is committed, so nothing is lost.
//   - When the handler returns an open-breaker error (a *BreakerOpenError
//     from Breaker.Do, or gobreaker's ErrOpenState or ErrTooManyRequests),
//     the attempt does not count: the partition stops fetching
//     (ConsumerGroup.Pause) until the breaker lets a probe through, and
//     then the same message is handled again (guarantee 5).
//
// A message carries its ce_id (Message.ID) and ce_correlationid; a
// traceparent header continues the producer's trace in the handler's
// context. Missing or malformed headers leave those empty; the message is
// handled all the same.
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
// correlation_id. Config.Metrics receives counts, durations, in-flight
// messages, breaker states and lag; package prom has the Prometheus
// implementation.
package consumer
