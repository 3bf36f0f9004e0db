package producer_test

import (
	"context"
	"log"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/courierkit/courier/producer"
)

// Trace what the relay publishes: each batch is a "send" span, each event a
// "create <topic>" span that continues the trace of the request that
// enqueued it, and the consumer's spans continue it from the record's
// traceparent. Pass the provider your service exports with (an OTLP
// exporter, say); without one the relay makes no span.
func ExampleRelayConfig_tracing() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db:5432/shop")
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider() // add sdktrace.WithBatcher(yourExporter)
	defer func() { _ = tp.Shutdown(ctx) }()

	relay, err := producer.NewRelay(pool, producer.RelayConfig{
		Brokers:        []string{"kafka-1:9092"},
		TracerProvider: tp,
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = relay.Run(ctx)
}
