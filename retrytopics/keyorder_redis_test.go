package retrytopics_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/retrytopics"
)

func newKeyOrder(t *testing.T, ttl time.Duration) (*retrytopics.RedisKeyOrder, *testkit.Redis) {
	t.Helper()
	r := testkit.NewRedis(t)
	o, err := retrytopics.NewRedisKeyOrder(r.Client, retrytopics.RedisKeyOrderConfig{Scope: "payouts", Prefix: r.Prefix, TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return o, r
}

func positions(places []retrytopics.Place) []int {
	var out []int
	for _, p := range places {
		out = append(out, p.Position)
	}
	return out
}

func TestRedisKeyOrder(t *testing.T) {
	t.Parallel()
	o, _ := newKeyOrder(t, 0)
	ctx := context.Background()
	msg := func(key, id string) retrytopics.Parked { return retrytopics.Parked{Topic: "orders", Key: key, ID: id} }

	// Nothing parked: every message is free, and nothing is written.
	places, err := o.Follow(ctx, []retrytopics.Parked{msg("k", "1"), msg("k", "2")})
	if err != nil {
		t.Fatal(err)
	}
	if got := positions(places); !slices.Equal(got, []int{-1, -1}) {
		t.Fatalf("positions %v before anything is parked, want free", got)
	}
	// 1 fails and is parked; 2 and 3 follow it, 4 of another key is free.
	due := time.UnixMilli(time.Now().Add(5 * time.Second).UnixMilli())
	if err := o.Park(ctx, msg("k", "1"), due); err != nil {
		t.Fatal(err)
	}
	places, err = o.Follow(ctx, []retrytopics.Parked{msg("k", "2"), msg("k", "3"), msg("other", "4"), msg("k", "2"), msg("k", "1")})
	if err != nil {
		t.Fatal(err)
	}
	if got := positions(places); !slices.Equal(got, []int{1, 2, -1, 1, 0}) {
		t.Errorf("positions %v, want [1 2 -1 1 0]: followers in order, once each", got)
	}
	if !places[0].FirstDue.Equal(due) {
		t.Errorf("first due %v, want %v", places[0].FirstDue, due)
	}
	// A follower moving to a tier keeps its place.
	if err := o.Park(ctx, msg("k", "3"), due.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	// 1 settles: 2 is first, then 3.
	if err := o.Unpark(ctx, msg("k", "1")); err != nil {
		t.Fatal(err)
	}
	places, err = o.Follow(ctx, []retrytopics.Parked{msg("k", "2"), msg("k", "3")})
	if err != nil {
		t.Fatal(err)
	}
	if got := positions(places); !slices.Equal(got, []int{0, 1}) || !places[0].FirstDue.IsZero() {
		t.Errorf("after 1 settled: positions %v first due %v, want [0 1] and no due time (2 was never parked with one)", got, places[0].FirstDue)
	}
	for _, id := range []string{"2", "3"} {
		if err := o.Unpark(ctx, msg("k", id)); err != nil {
			t.Fatal(err)
		}
	}
	places, err = o.Follow(ctx, []retrytopics.Parked{msg("k", "5")})
	if err != nil || places[0].Position != -1 {
		t.Errorf("after all settled: %+v, %v; want the key free", places, err)
	}
}

func TestRedisKeyOrderForgetsAfterTTL(t *testing.T) {
	t.Parallel()
	o, r := newKeyOrder(t, 200*time.Millisecond)
	ctx := context.Background()
	if err := o.Park(ctx, retrytopics.Parked{Topic: "orders", Key: "k", ID: "1"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	keys, err := r.Client.Keys(ctx, r.Prefix+"*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("keys %q, %v; want the queue and the due hash", keys, err)
	}
	// Followers joining and moving behind the first do not keep the key
	// parked: only the first one's moves restart the TTL.
	follower := 1
	testkit.WaitFor(t, 5*time.Second, "the parked key forgotten", func() bool {
		follower++
		m := retrytopics.Parked{Topic: "orders", Key: "k", ID: strconv.Itoa(follower)}
		places, err := o.Follow(ctx, []retrytopics.Parked{m})
		if err != nil {
			t.Fatal(err)
		}
		if places[0].Position == -1 {
			return true
		}
		if err := o.Park(ctx, m, time.Now()); err != nil {
			t.Fatal(err)
		}
		return false
	})
}

func TestRedisKeyOrderErrors(t *testing.T) {
	t.Parallel()
	if _, err := retrytopics.NewRedisKeyOrder(nil, retrytopics.RedisKeyOrderConfig{Scope: "g"}); !errors.Is(err, retrytopics.ErrInvalidConfig) {
		t.Errorf("nil client: %v", err)
	}
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	defer client.Close()
	for _, cfg := range []retrytopics.RedisKeyOrderConfig{{}, {Scope: "a{b}"}, {Scope: "g", TTL: -time.Second}} {
		if _, err := retrytopics.NewRedisKeyOrder(client, cfg); !errors.Is(err, retrytopics.ErrInvalidConfig) {
			t.Errorf("config %+v: %v; want ErrInvalidConfig", cfg, err)
		}
	}
	o, err := retrytopics.NewRedisKeyOrder(client, retrytopics.RedisKeyOrderConfig{Scope: "g"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = o.Follow(context.Background(), []retrytopics.Parked{{Topic: "t", Key: "k", ID: "1"}})
	if err == nil || !strings.Contains(err.Error(), "key order follow") || !strings.Contains(err.Error(), "make services") {
		t.Errorf("Follow against a closed port: %v; want an error saying how to fix it", err)
	}
}
