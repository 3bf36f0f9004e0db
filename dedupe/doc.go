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
// courier:dedupe:payouts:9b2f…, written once, when it is claimed: it holds
// "claim:<token>", the Token of the claim call's owner, and expires with
// the window and the lease. Each claim call (a batch of ids) has two keys
// of its own, under Prefix + ":" + Scope + ":" (no id's key of the same
// Prefix starts so, as no Scope is empty):
//
//	lease:<token>   the owner, while its lease runs; extended by Extend
//	done:<token>    a set of the ids the owner processed; expires with the window
//
// An id is processed when it is in the done set of the token its key
// holds, claimed while that token's lease runs, and free otherwise: a
// claim whose owner crashed before marking it is taken over by the next
// claim once the lease ran out. So the consumer's claim costs Redis one
// SET NX per message, and its done mark one SADD per batch, not a write
// per message. To see where an id stands with redis-cli:
//
//	$ redis-cli GET courier:dedupe:payouts:id-2
//	"claim:1jrjZO1dnFhVNo0d"
//	$ redis-cli SISMEMBER courier:dedupe::payouts:done:1jrjZO1dnFhVNo0d id-2
//	(integer) 1
//
// A key holding anything else, written by another program, is left
// alone, and Claim refuses its id (ErrInvalidID): the consumer
// dead-letters that message, saying which key to delete, rather than wait
// on a key that may never expire or skip a message that was not
// processed.
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
// window costs memory (Redis: for a UUID ce_id about 230 bytes per id, 150
// for its key under courier:dedupe:payouts: and 80 for its member of a
// done set, as `redis-cli MEMORY USAGE` reports them) or
// table size (inbox: one row per id until Cleanup). A message that comes
// again after its window is processed again.
//
// The guide tells how to use it: [Retry topics and dedupe].
//
// [Retry topics and dedupe]: https://github.com/courierkit/courier/blob/main/docs/retry-topics-and-dedupe.md
package dedupe
