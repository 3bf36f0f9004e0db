package retrytopics

import (
	"context"
	"time"
)

// Parked names one message of a key for KeyOrder.
type Parked struct {
	// Topic is the main topic.
	Topic string
	// Key is the record key.
	Key string
	// ID is the message's identity (its ce_id, or its place on the main
	// topic).
	ID string
}

// Place is where a message stands among the parked messages of its key.
type Place struct {
	// Position is 0 for the first parked message of the key (the one to
	// handle next), n for the one with n messages ahead of it, and -1 when
	// the key has no parked message: the message is free to be handled.
	Position int
	// FirstDue is when the first parked message of the key is due; zero
	// when Position is -1.
	FirstDue time.Time
}

// KeyOrder tracks, per key, the messages waiting in retry tiers, so that
// the messages of a key are handled in order even when one of them waits
// in a retry tier: a later message of the key is parked behind it and
// follows it through the tiers. The consumer asks Follow before it handles
// a keyed message, Park before it sends a message to a retry tier, and
// Unpark once a parked message is settled (handled, or written to the
// dead-letter topic).
//
// Implementations must be safe for concurrent use. An error means nothing
// was changed: the consumer asks again.
type KeyOrder interface {
	// Follow returns the place of each message, in order. A message of a
	// key with parked messages that is not among them is parked behind
	// them (with no due time of its own yet); a message already parked
	// keeps its place; a message of a key with none parked stays free
	// (Position -1) and nothing is written.
	Follow(ctx context.Context, msgs []Parked) ([]Place, error)
	// Park parks m behind the key's parked messages, or keeps its place
	// when it is parked already, and records when it is due next.
	Park(ctx context.Context, m Parked, due time.Time) error
	// Unpark removes m from its key's parked messages; the next one, if
	// any, becomes the first.
	Unpark(ctx context.Context, m Parked) error
}
