package dedupe

import (
	"context"
	"errors"
	"time"
)

// Status is what a claim found for one id.
type Status int

const (
	// Claimed: the id was free and the caller now holds its claim until
	// the lease runs out. Process the message, then call Done (it was
	// processed) or Release (it was not).
	Claimed Status = iota
	// Processed: the id was processed within the store's window. Skip the
	// message.
	Processed
	// Busy: another owner's claim on the id is live: the message is being
	// processed elsewhere. Try again later; never process it meanwhile.
	Busy
)

// String returns "claimed", "processed" or "busy".
func (s Status) String() string {
	switch s {
	case Claimed:
		return "claimed"
	case Processed:
		return "processed"
	case Busy:
		return "busy"
	}
	return "unknown"
}

// ErrInvalidConfig is matched by every error a constructor of this package
// returns for a bad config.
var ErrInvalidConfig = errors.New("dedupe: invalid config")

// Store remembers which message ids were processed. The consumer
// (consumer.Config.Dedupe) claims an id before it calls the handler, marks
// it processed after the handler succeeded, and releases it when the
// message failed (it went to a retry topic or the dead-letter topic), so
// that a later delivery is processed.
//
// Every method works on a batch of ids in one round trip, so that the
// consumer pays for the network once per batch of messages, not once per
// message. An owner is an opaque string that tells claims apart: the
// consumer uses a fresh one for each Claim call, so that two partitions of
// one process, or two batches of one partition, holding the same id see
// each other as Busy, and a call that failed can release what it claimed.
//
// Implementations must be safe for concurrent use.
type Store interface {
	// Claim claims each free id for owner until lease passes, and returns
	// one Status per id, in order. Use an owner of its own for each call.
	// An id owner already holds is Busy (the same id twice in a batch: the
	// second waits for the first). An error means nothing is known about
	// any of the ids: the caller releases what owner may hold and retries,
	// except after an error matching ErrInvalidID, which an id of the batch
	// will always get (the caller asks for each id alone).
	Claim(ctx context.Context, owner string, ids []string, lease time.Duration) ([]Status, error)
	// Extend pushes the lease of the ids owner still holds to lease from
	// now; ids it no longer holds are left alone. A store that can tell
	// fails with ErrLeaseLost when owner's lease had run out already.
	Extend(ctx context.Context, owner string, ids []string, lease time.Duration) error
	// Done marks the ids owner claimed processed, for the store's window.
	// An id claimed meanwhile by another owner (owner's lease ran out) is
	// the other owner's to mark.
	Done(ctx context.Context, owner string, ids []string) error
	// Release drops owner's claims on the ids without marking them
	// processed; ids it no longer holds are left alone.
	Release(ctx context.Context, owner string, ids []string) error
}

// Op names a Store operation in ErrorHook and LatencyHook.
type Op string

// The operations the hooks report.
const (
	OpClaim   Op = "claim"
	OpExtend  Op = "extend"
	OpDone    Op = "done"
	OpRelease Op = "release"
)

// Hook is a value implementing one or more of the package's *Hook
// interfaces (HitsHook, ErrorHook, FailedOpenHook, LatencyHook), each a
// measurement of deduplication it wants; list it in the consumer's
// DedupeConfig.Hooks, which refuses a hook implementing none of them. A new
// measurement is a new interface, so adding one breaks no hook. The
// consumer calls hooks on its hot path: they must be safe for concurrent
// use and return at once. Package prom's DedupeMetrics implements them all.
type Hook any

// HitsHook is told of n messages skipped because their ids were processed
// already.
type HitsHook interface {
	Hits(n int)
}

// ErrorHook is told of a failed round trip of op.
type ErrorHook interface {
	Error(op Op)
}

// FailedOpenHook is told of n messages processed without deduplication
// because the store failed and the consumer fails open.
type FailedOpenHook interface {
	FailedOpen(n int)
}

// LatencyHook is told how long one round trip of op took, for a batch of n
// ids.
type LatencyHook interface {
	Latency(op Op, n int, d time.Duration)
}
