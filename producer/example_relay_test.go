package producer_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/migrations"
	"github.com/courierkit/courier/producer"
)

// Run a relay beside the service: it publishes every committed event to
// Kafka, in order per key. This example uses an in-process broker; in
// production, Brokers names your cluster.
func ExampleRelay() {
	ctx := context.Background()
	pool := exampleDB(ctx, "courier_example_relay")
	defer pool.Close()
	migrator, err := migrations.New(migrations.Config{Schema: "courier_example_relay"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, pool); err != nil {
		log.Fatal(err)
	}
	broker, err := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()

	outbox, err := producer.NewOutbox(producer.Config{Schema: "courier_example_relay"})
	if err != nil {
		log.Fatal(err)
	}
	res, err := outbox.Enqueue(ctx, pool, producer.Event{Topic: "orders", Key: "order-42", Type: "OrderCreated",
		Payload: []byte(`{"order_id":"order-42"}`)})
	if err != nil {
		log.Fatal(err)
	}

	relay, err := producer.NewRelay(pool, producer.RelayConfig{
		Schema:  "courier_example_relay",
		Brokers: broker.ListenAddrs(),
		Source:  "orders-service",
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }() // until runCtx ends

	// Read the record back from Kafka.
	consumer, err := sarama.NewConsumer(broker.ListenAddrs(), sarama.NewConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	partition, err := consumer.ConsumePartition("orders", 0, sarama.OffsetOldest)
	if err != nil {
		log.Fatal(err)
	}
	defer partition.Close()
	select {
	case msg := <-partition.Messages():
		fmt.Printf("key=%s value=%s\n", msg.Key, msg.Value)
		for _, h := range msg.Headers {
			if string(h.Key) == producer.HeaderID {
				fmt.Println("ce_id is the event id:", string(h.Value) == res.ID.String())
			}
		}
	case <-time.After(30 * time.Second):
		log.Fatal("nothing published")
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// key=order-42 value={"order_id":"order-42"}
	// ce_id is the event id: true
}

// Serve the relay's probes beside the service's routes: GET /livez for a
// Kubernetes livenessProbe (200 while Run runs), GET /readyz for an alert
// or a rollout (200 while every worker publishes, or finds nothing to
// publish). This example uses an in-process broker.
func ExampleRelay_Readiness() {
	ctx := context.Background()
	pool := exampleDB(ctx, "courier_example_probes")
	defer pool.Close()
	migrator, err := migrations.New(migrations.Config{Schema: "courier_example_probes"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := migrator.Up(ctx, pool); err != nil {
		log.Fatal(err)
	}
	broker, err := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()
	relay, err := producer.NewRelay(pool, producer.RelayConfig{
		Schema:  "courier_example_probes",
		Brokers: broker.ListenAddrs(),
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/livez", relay.Liveness())
	mux.Handle("/readyz", relay.Readiness())
	srv := httptest.NewServer(mux) // in a service, the server of its own routes
	defer srv.Close()
	get := func(path string) string {
		resp, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			log.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			log.Fatal(err)
		}
		return fmt.Sprint(resp.StatusCode, " ", strings.TrimSpace(string(body)))
	}
	fmt.Println(get("/livez"))

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(runCtx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for answer := get("/readyz"); ; answer = get("/readyz") {
		if strings.HasPrefix(answer, "200") {
			fmt.Println(answer)
			break
		}
		<-tick.C
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	fmt.Println(get("/livez"))
	// Output:
	// 503 {"status":"not_live","reason":"Run has not started"}
	// 200 {"status":"ready","reason":"every worker made progress within the bound of 1m2s","breaker":"closed","held_partitions":0}
	// 503 {"status":"not_live","reason":"Run has returned"}
}
