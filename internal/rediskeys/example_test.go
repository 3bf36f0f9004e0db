package rediskeys_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/go-redis/v9"

	"github.com/courierkit/courier/internal/rediskeys"
	"github.com/courierkit/courier/internal/testkit"
)

// Remove what a run left under its prefix.
func ExampleDelete() {
	opts, err := redis.ParseURL(testkit.RedisURL())
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(opts)
	defer client.Close()
	ctx := context.Background()
	for _, k := range []string{"a", "b", "c"} {
		if err := client.Set(ctx, "courier:example:rediskeys:"+k, "1", 0).Err(); err != nil {
			log.Fatal(err)
		}
	}
	n, err := rediskeys.Delete(ctx, client, "courier:example:rediskeys:")
	fmt.Println(n, err)
	left, _ := client.Keys(ctx, "courier:example:rediskeys:*").Result()
	fmt.Println(len(left))
	// Output:
	// 3 <nil>
	// 0
}
