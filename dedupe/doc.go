// Package dedupe remembers which messages were processed, so that a consumer
// skips the duplicates that at-least-once delivery brings: a producer's
// retry, a relay that crashed after publishing, a rebalance that hands a
// partition over before its offsets were committed, a dead letter replayed
// twice (replayed once, it is processed: its claim was released, never
// marked processed). Messages are told apart by their id, the CloudEvents
// ce_id header.
//
// # The Store contract
//
// A Store works on batches of ids, one round trip per batch. The consumer
// (consumer.Config.Dedupe) calls it around its handler:
//
//   - Claim before the handler: each id is Claimed (process it), Processed
//     (skip it) or Busy (it is being processed elsewhere, or twice in the
//     batch: try again later, never process it meanwhile).
//   - Extend while a handler runs longer than the lease.
//   - Done after the handler succeeded: the id is processed for the window.
//   - Release when the message failed and went to a retry or dead-letter
//     topic, so that its next delivery is processed.
//
// # Redis or Inbox
//
// Redis (NewRedis) suits any handler, whatever it writes to: it makes
// at-least-once delivery idempotent within the window. A claim is a lease,
// so one message is processed by one consumer at a time; but a handler
// that succeeds and crashes before Done, or whose claim runs out while it
// still works, lets the message be processed again. Handlers whose effects
// must happen once should still be idempotent themselves (an idempotency
// key at the payment provider, an upsert), or use the inbox.
//
// Inbox (NewInbox) suits a handler that writes to PostgreSQL: it records
// the message's id with Inbox.Record in its own transaction, so that its
// writes and the id commit or roll back together, and the message takes
// effect exactly once within the window (effectively-once). As a Store the
// inbox only lets the consumer skip what was processed, early; the
// transaction is what decides. Create its table with
// `courier migrate up --inbox` (migrations.NewInbox), and delete expired
// ids with Inbox.Cleanup or Inbox.RunCleanup.
//
// # Keys and values in Redis
//
// An id is one key, Prefix + Scope + ":" + id, for example
// courier:dedupe:payouts:9b2f…; its value tells a person what it is:
//
//	claim:<owner>     being processed by owner; expires with the lease
//	done:<unix ms>    processed at that time; expires with the window
//
// A Redis without persistence (no RDB snapshots, no AOF) forgets every
// processed id when it restarts, and a failover to a replica may lose the
// last writes: messages delivered again within the window after that are
// processed again. Where that matters, turn on AOF, or use the inbox.
//
// # Ids a store cannot hold
//
// Any message id is deduplicated, whatever its bytes: an id that is not
// valid UTF-8, holds a NUL byte (which PostgreSQL's text refuses), is
// longer than MaxIDBytes (256; an index entry or a key that large wastes
// space) or starts with "sha256:" is kept as "sha256:" and the hex SHA-256
// of its bytes (StoredID), in both stores; every other id is kept as it
// is. So no id makes a store fail, and the consumer never takes such an id
// for an outage. An empty id is refused (ErrInvalidID): the consumer uses
// the message's topic, partition and offset instead, and dead-letters a
// message whose id a store refuses as a permanent failure.
//
// # The window
//
// The window (RedisConfig.Window, InboxConfig.Window; 24h by default) is
// how long a processed id is remembered. It must cover the redeliveries
// you expect: a producer's retries take seconds, a rebalance minutes, a
// consumer group reset to an earlier offset hours or days. A longer
// window costs memory (Redis: one key per id, 136 bytes for a ce_id under
// courier:dedupe:payouts:, as `redis-cli MEMORY USAGE <key>` reports) or
// table size (inbox: one row per id until Cleanup). A message that comes
// again after its window is processed again.
package dedupe
