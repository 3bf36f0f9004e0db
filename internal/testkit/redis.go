package testkit

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/courierkit/courier/internal/rediskeys"
)

// Redis is a test's own key prefix on the test Redis.
type Redis struct {
	Client *redis.Client
	// Prefix starts every key the test may touch; keys under it are deleted
	// when the test ends.
	Prefix string
}

// NewRedis connects to the test Redis and reserves a key prefix for the test.
func NewRedis(t testing.TB) *Redis {
	t.Helper()
	raw := RedisURL()
	opts, err := redis.ParseURL(raw)
	if err != nil {
		t.Fatalf("testkit: %s=%q: %v", EnvRedisURL, redactURL(raw), err)
	}
	client := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		_ = client.Close()
		unavailable(t, "Redis", redactURL(raw), err)
	}
	r := &Redis{Client: client, Prefix: "courier:test:" + UniqueName(t, 64) + ":"}
	t.Cleanup(func() {
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := rediskeys.Delete(ctx, client, r.Prefix); err != nil {
			t.Errorf("testkit: delete keys under %s: %v", r.Prefix, err)
		}
	})
	return r
}
