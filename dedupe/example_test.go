package dedupe_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/migrations"
)

// What the consumer does with a Redis store around its handler: claim a
// batch of ids, mark the handled ones processed, release the failed ones.
func ExampleRedis() {
	ctx := context.Background()
	client := exampleRedis()
	defer client.Close()
	// A real service keeps the default prefix; the example uses its own and
	// deletes its keys when it ends.
	prefix := fmt.Sprintf("courier:example:%d:", time.Now().UnixNano())
	defer deleteKeys(client, prefix)

	store, err := dedupe.NewRedis(client, dedupe.RedisConfig{Scope: "payouts", Prefix: prefix, Window: 10 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	// Each claim call has an owner of its own: here a worker and a count.
	ids := []string{"evt-1", "evt-2"}
	statuses, err := store.Claim(ctx, "worker-1/1", ids, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-1 claims:", statuses)
	statuses, err = store.Claim(ctx, "worker-2/1", ids, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-2 claims:", statuses)

	// worker-1 handled evt-1; evt-2 failed and went to a retry topic.
	if err := store.Done(ctx, "worker-1/1", ids[:1]); err != nil {
		log.Fatal(err)
	}
	if err := store.Release(ctx, "worker-1/1", ids[1:]); err != nil {
		log.Fatal(err)
	}
	statuses, err = store.Claim(ctx, "worker-2/2", ids, 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("worker-2 claims again:", statuses)
	// What Redis holds: each id's key names the token of its claim's owner;
	// the ids an owner processed are in its done set.
	fmt.Println("evt-2 claimed by worker-2/2:", client.Get(ctx, store.Key("evt-2")).Val() == "claim:"+dedupe.Token("worker-2/2"))
	fmt.Println("evt-1 in worker-1/1's done set:", client.SIsMember(ctx, store.DoneKey("worker-1/1"), "evt-1").Val())
	// Output:
	// worker-1 claims: [claimed claimed]
	// worker-2 claims: [busy busy]
	// worker-2 claims again: [processed claimed]
	// evt-2 claimed by worker-2/2: true
	// evt-1 in worker-1/1's done set: true
}

// A handler that writes to PostgreSQL records the message's id in its own
// transaction: a message delivered twice pays out once, and a handler that
// fails leaves neither its payout nor the id behind.
func ExampleInbox_Record() {
	ctx := context.Background()
	pool := exampleDB(ctx, "courier_example_inbox")
	defer pool.Close()

	// Once, at start-up: create the inbox table (`courier migrate up --inbox`).
	migrator, err := migrations.NewInbox(migrations.Config{Schema: "courier_example_inbox"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, pool); err != nil {
		log.Fatal(err)
	}
	inbox, err := dedupe.NewInbox(pool, dedupe.InboxConfig{Schema: "courier_example_inbox", Scope: "payouts"})
	if err != nil {
		log.Fatal(err)
	}

	pspDown := true
	handle := func(id string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			first, err := inbox.Record(ctx, tx, id)
			if err != nil || !first {
				return err // !first: processed already, nothing to do
			}
			if _, err := tx.Exec(ctx, "INSERT INTO courier_example_inbox.payouts (id, amount_cents) VALUES ($1, 500)", id); err != nil {
				return err
			}
			if pspDown {
				return errors.New("psp unavailable") // rolls back the payout and the id
			}
			return nil
		})
	}
	for _, id := range []string{"evt-1", "evt-1", "evt-1"} { // delivered three times
		err := handle(id)
		fmt.Println("handled", id, "error:", err)
		pspDown = false
	}
	var payouts int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM courier_example_inbox.payouts").Scan(&payouts); err != nil {
		log.Fatal(err)
	}
	fmt.Println("payouts:", payouts)
	statuses, err := inbox.Claim(ctx, "consumer", []string{"evt-1", "evt-2"}, time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claim:", statuses)
	// Output:
	// handled evt-1 error: psp unavailable
	// handled evt-1 error: <nil>
	// handled evt-1 error: <nil>
	// payouts: 1
	// claim: [processed claimed]
}

// exampleRedis connects to the test Redis.
func exampleRedis() *redis.Client {
	url := os.Getenv(testkit.EnvRedisURL)
	if url == "" {
		url = testkit.DefaultRedisURL
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		log.Fatal(err)
	}
	client := redis.NewClient(opts)
	if err := client.Ping(context.Background()).Err(); err != nil {
		log.Fatalf("%v (is Redis running? try `make services`)", err)
	}
	return client
}

// deleteKeys deletes the keys under prefix.
func deleteKeys(client *redis.Client, prefix string) {
	ctx := context.Background()
	iter := client.Scan(ctx, 0, prefix+"*", 100).Iterator()
	for iter.Next(ctx) {
		client.Del(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		log.Fatal(err)
	}
}

// exampleDB connects to the test database and gives schema a fresh payouts
// table.
func exampleDB(ctx context.Context, schema string) *pgxpool.Pool {
	pool, err := pgxpool.New(ctx, testkit.DatabaseURL())
	if err != nil {
		log.Fatal(err)
	}
	_, err = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE; CREATE SCHEMA "+schema+
		"; CREATE TABLE "+schema+".payouts (id text PRIMARY KEY, amount_cents int NOT NULL)")
	if err != nil {
		log.Fatalf("%v (is PostgreSQL running? try `make services`)", err)
	}
	return pool
}
