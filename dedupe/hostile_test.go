package dedupe_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/dedupe"
)

// hostileIDs are message ids as a careless or hostile producer sends them
// (the ce_id header is bytes): each must be deduplicated like any other
// id, never make the store fail, and never share a stored form with
// another id.
var hostileIDs = []struct{ name, id string }{
	{"nul byte", "evt-\x00-1"},
	{"only nul", "\x00"},
	{"invalid utf-8", "evt-\xff\xfe-2"},
	{"truncated utf-8", "evt-\xe2\x82"},
	{"control characters", "evt-\x1b[31m-\r\n"},
	{"over-long 10 KiB", strings.Repeat("x", 10<<10)},
	{"just over MaxIDBytes", strings.Repeat("y", dedupe.MaxIDBytes+1)},
	{"over-long invalid utf-8 256 KiB", strings.Repeat("\xff", 256<<10)},
	{"forged hash prefix", "sha256:" + hashHex("evt-\x00-1")},
	{"sql and redis syntax", "'; DROP TABLE courier_inbox; -- * {tag} \\"},
}

func hashHex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// sibling is an id one byte off id: it must stay distinct.
func sibling(id string) string { return id[:len(id)-1] + string(rune(id[len(id)-1]^1)) }

// TestHostileDedupe: both stores take every id a Kafka header can carry.
// Each id is claimed (no error: the store is up, so the consumer must not
// see an outage), recorded as processed, found processed, and stays apart
// from an id one byte off it; an empty id is refused as the message's
// failure (ErrInvalidID), not the store's.
func TestHostileDedupe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	inbox := newInbox(t, dedupe.InboxConfig{})
	redis := newRedisStore(t, dedupe.RedisConfig{})
	stores := []struct {
		name  string
		store dedupe.Store
		done  func(t *testing.T, owner, id string)
	}{
		{"inbox", inbox.Inbox, func(t *testing.T, _, id string) {
			for i, want := range []bool{true, false} {
				tx, err := inbox.pg.Pool.Begin(ctx)
				if err != nil {
					t.Fatal(err)
				}
				first, err := inbox.Record(ctx, tx, id)
				if err != nil || first != want {
					tx.Rollback(ctx)
					t.Fatalf("Record(%q) #%d = %v, %v; want first %v", short(id), i+1, first, err, want)
				}
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"redis", redis.Redis, func(t *testing.T, owner, id string) {
			if err := redis.Done(ctx, owner, []string{id}); err != nil {
				t.Fatalf("Done(%q): %v", short(id), err)
			}
		}},
	}
	for _, s := range stores {
		for _, tc := range hostileIDs {
			t.Run(s.name+"/"+tc.name, func(t *testing.T) {
				owner := "owner-" + tc.name
				claim := func(ids ...string) []dedupe.Status {
					t.Helper()
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					got, err := s.store.Claim(cctx, owner, ids, time.Minute)
					if err != nil {
						t.Fatalf("Claim(%q) = %v; an id must never look like a store outage", short(ids[0]), err)
					}
					if len(got) != len(ids) {
						t.Fatalf("%d statuses for %d ids", len(got), len(ids))
					}
					return got
				}
				if got := claim(tc.id); got[0] != dedupe.Claimed {
					t.Fatalf("new id: %v, want claimed", got[0])
				}
				s.done(t, owner, tc.id)
				if got := claim(tc.id, sibling(tc.id)); got[0] != dedupe.Processed || got[1] != dedupe.Claimed {
					t.Errorf("after done: id %v, its sibling %v; want processed and claimed (no shared stored form)", got[0], got[1])
				}
			})
		}
		t.Run(s.name+"/empty id", func(t *testing.T) {
			_, err := s.store.Claim(ctx, "owner", []string{"fine", ""}, time.Minute)
			if !errors.Is(err, dedupe.ErrInvalidID) || !strings.Contains(err.Error(), "id 2 of 2 is empty") {
				t.Errorf("Claim with an empty id = %v, want ErrInvalidID naming it", err)
			}
		})
	}
	t.Run("inbox/record empty id", func(t *testing.T) {
		if _, err := inbox.Record(ctx, inbox.pg.Pool, ""); !errors.Is(err, dedupe.ErrInvalidID) {
			t.Errorf("Record(\"\") = %v, want ErrInvalidID", err)
		}
	})
}

func TestStoredIDKeepsPlainIDs(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"0195f3c4-0000-7000-8000-000000000001", "orders/3/1842", "ü€", strings.Repeat("z", dedupe.MaxIDBytes)} {
		if got := dedupe.StoredID(id); got != id {
			t.Errorf("StoredID(%q) = %q, want it unchanged", id, got)
		}
	}
	for _, tc := range hostileIDs {
		if tc.name == "control characters" || tc.name == "sql and redis syntax" {
			continue // valid UTF-8 of a fine length: kept
		}
		got := dedupe.StoredID(tc.id)
		if got != "sha256:"+hashHex(tc.id) {
			t.Errorf("%s: StoredID = %q, want its hash", tc.name, short(got))
		}
	}
}

func short(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// TestHostileDedupeConfig: configs the stores would take and then fail on
// at every call (a scope PostgreSQL's text cannot hold) or that make no
// sense; each is refused by the constructor, naming the field.
func TestHostileDedupeConfig(t *testing.T) {
	t.Parallel()
	pool := newInbox(t, dedupe.InboxConfig{}).pg.Pool
	client := newRedisStore(t, dedupe.RedisConfig{}).client
	for _, tc := range []struct {
		name  string
		inbox *dedupe.InboxConfig
		redis *dedupe.RedisConfig
		field string
	}{
		{"inbox scope with nul", &dedupe.InboxConfig{Scope: "pay\x00outs"}, nil, "Scope"},
		{"inbox scope not utf-8", &dedupe.InboxConfig{Scope: "pay\xffouts"}, nil, "Scope"},
		{"inbox scope of 256 bytes", &dedupe.InboxConfig{Scope: strings.Repeat("s", 256)}, nil, "Scope"},
		{"inbox window above ten years", &dedupe.InboxConfig{Scope: "p", Window: dedupe.MaxWindow + time.Hour}, nil, "Window"},
		{"inbox cleanup batch huge", &dedupe.InboxConfig{Scope: "p", CleanupBatch: 1 << 50}, nil, "CleanupBatch"},
		{"inbox table name with a quote", &dedupe.InboxConfig{Scope: "p", Table: `in"box`}, nil, "in\\\"box"},
		{"redis scope with a colon", nil, &dedupe.RedisConfig{Scope: "a:b"}, "Scope"},
		{"redis scope with an escape", nil, &dedupe.RedisConfig{Scope: "a\x1b[2J"}, "Scope"},
		{"redis prefix not utf-8", nil, &dedupe.RedisConfig{Scope: "p", Prefix: "\xff:"}, "Prefix"},
		{"redis window below 1ms", nil, &dedupe.RedisConfig{Scope: "p", Window: time.Microsecond}, "Window"},
		{"redis window negative", nil, &dedupe.RedisConfig{Scope: "p", Window: -time.Hour}, "Window"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.inbox != nil {
				_, err = dedupe.NewInbox(pool, *tc.inbox)
			} else {
				_, err = dedupe.NewRedis(client, *tc.redis)
			}
			if !errors.Is(err, dedupe.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("New = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}
