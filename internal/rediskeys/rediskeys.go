// Package rediskeys deletes the Redis keys under a prefix: what a test, a
// benchmark or the demo leaves behind.
package rediskeys

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// batch is how many keys one SCAN step asks for and one UNLINK removes.
const batch = 10_000

// Delete removes every key that starts with prefix, scanning (never KEYS)
// and unlinking in batches. It returns how many keys it removed.
func Delete(ctx context.Context, client redis.UniversalClient, prefix string) (int, error) {
	iter := client.Scan(ctx, 0, prefix+"*", batch).Iterator()
	keys := make([]string, 0, batch)
	deleted := 0
	flush := func() error {
		if len(keys) == 0 {
			return nil
		}
		err := client.Unlink(ctx, keys...).Err()
		deleted += len(keys)
		keys = keys[:0]
		return err
	}
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) == batch {
			if err := flush(); err != nil {
				return deleted, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return deleted, err
	}
	return deleted, flush()
}
