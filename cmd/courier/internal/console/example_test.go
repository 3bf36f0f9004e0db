package console_test

import (
	"context"
	"log"
	"net/http"
	"time"

	"github.com/IBM/sarama"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/cmd/courier/internal/console"
)

// A console on the loopback for the outbox of schema shop, offering to
// replay dead letters to the consumer group that failed them (whose retry
// tiers wait 5s and 1m). `courier console` does this with its flags.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@127.0.0.1:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	brokers := []string{"127.0.0.1:9092"}
	client, err := sarama.NewClient(brokers, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	srv, err := console.New(ctx, console.Config{
		DB: pool, Schema: "shop", Kafka: client, Brokers: brokers,
		RetryDelays: []time.Duration{5 * time.Second, time.Minute},
		Relays:      []string{"http://127.0.0.1:9090/healthz"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	hs := &http.Server{Addr: "127.0.0.1:8080", Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(hs.ListenAndServe())
}
