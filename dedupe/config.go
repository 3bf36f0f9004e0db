package dedupe

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// DefaultWindow is how long a store remembers a processed id unless
// configured otherwise (RedisConfig.Window, InboxConfig.Window).
const DefaultWindow = 24 * time.Hour

// ErrInvalidArgument is matched by the error of a call given an argument
// out of range: a lease below 1ms (Redis.Claim, Redis.Extend) or a cleanup
// interval that is not positive (Inbox.RunCleanup).
var ErrInvalidArgument = errors.New("dedupe: invalid argument")

// Bounds of the configs.
const (
	// MaxScopeBytes bounds Scope (and RedisConfig.Prefix).
	MaxScopeBytes = 255
	// MaxWindow bounds Window: ten years.
	MaxWindow = 10 * 365 * 24 * time.Hour
)

// validScope refuses an empty Scope, and one a store could not hold: not
// UTF-8, with a NUL or control character, or longer than MaxScopeBytes.
func validScope(scope string) error {
	if scope == "" {
		return fmt.Errorf("%w: Scope is empty; set Scope, usually the consumer group", ErrInvalidConfig)
	}
	return validName("Scope", scope)
}

// validName refuses a name of a config that is not UTF-8, holds a control
// character or is longer than MaxScopeBytes.
func validName(field, s string) error {
	switch {
	case len(s) > MaxScopeBytes:
		return fmt.Errorf("%w: %s has %d bytes; use at most %d", ErrInvalidConfig, field, len(s), MaxScopeBytes)
	case !utf8.ValidString(s) || strings.ContainsFunc(s, unicode.IsControl):
		return fmt.Errorf("%w: %s %q is not valid UTF-8 or holds a control character; use a plain name, e.g. the consumer group", ErrInvalidConfig, field, s)
	}
	return nil
}

// windowOrDefault turns a zero window into DefaultWindow.
func windowOrDefault(w time.Duration) time.Duration {
	if w == 0 {
		return DefaultWindow
	}
	return w
}

// validWindow refuses a negative window and one above MaxWindow.
func validWindow(w time.Duration) error {
	switch {
	case w < 0:
		return fmt.Errorf("%w: Window is %v; use a positive duration, or 0 for the default of %v", ErrInvalidConfig, w, DefaultWindow)
	case w > MaxWindow:
		return fmt.Errorf("%w: Window is %v; use at most %v (ten years), or 0 for the default of %v", ErrInvalidConfig, w, MaxWindow, DefaultWindow)
	}
	return nil
}

// MaxIDBytes is the longest id a store keeps as it is; see StoredID.
const MaxIDBytes = 256

// hashedIDPrefix starts the stored form of an id that is hashed.
const hashedIDPrefix = "sha256:"

// ErrInvalidID is matched by the error of a call given an id no store can
// take: an empty one (every message without an id would be a duplicate of
// the first). It is the message's own failure, not the store's: the
// consumer dead-letters the message as a permanent failure rather than
// wait for the store.
var ErrInvalidID = errors.New("dedupe: invalid message id")

// StoredID returns the form in which both stores (Inbox and Redis) keep
// id: id itself when it is valid UTF-8 without a NUL byte, at most
// MaxIDBytes long and not starting with "sha256:"; otherwise "sha256:"
// followed by the hex SHA-256 of its bytes. So an id PostgreSQL's text
// cannot hold (a NUL, invalid UTF-8) or one too long for an index entry
// is deduplicated like any other rather than refused, and two distinct ids
// never share a stored form (short of a SHA-256 collision). Inbox.Record
// applies it too: record and look up the same id the consumer claims.
func StoredID(id string) string {
	if len(id) <= MaxIDBytes && utf8.ValidString(id) && strings.IndexByte(id, 0) < 0 && !strings.HasPrefix(id, hashedIDPrefix) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return hashedIDPrefix + hex.EncodeToString(sum[:])
}

// checkIDs refuses an empty id, with an error matching ErrInvalidID and
// ErrInvalidArgument.
func checkIDs(ids ...string) error {
	for i, id := range ids {
		if id == "" {
			return fmt.Errorf("%w: id %d of %d is empty; give every message an id (ce_id), or let the consumer use its topic, partition and offset: %w",
				ErrInvalidID, i+1, len(ids), ErrInvalidArgument)
		}
	}
	return nil
}

// storedIDs returns ids in their stored forms; ids itself when each is
// kept as it is (the usual case, without a copy).
func storedIDs(ids []string) []string {
	var out []string
	for i, id := range ids {
		if s := StoredID(id); s != id {
			if out == nil {
				out = append(make([]string, 0, len(ids)), ids[:i]...)
			}
			id = s
		}
		if out != nil {
			out = append(out, id)
		}
	}
	if out == nil {
		return ids
	}
	return out
}
