package demo_test

import (
	"os"

	"github.com/courierkit/courier/cmd/courier/internal/demo"
)

// The summary `courier demo` ends with, here from counts of a run.
func ExampleWriteSummary() {
	s := demo.Summary{
		Enqueued: 300, Published: 300, Handled: 300, Retried: 150, SentToRetryTopics: 4, DeadLettered: 3,
		Replayed: 3, DuplicatesSuppressed: 20, BreakerOpened: 2, Paid: 300, Seconds: 5,
		Schema: "courier_demo", RedisPrefix: "courier:demo:courier_demo:", DataDir: ".courier-demo/courier_demo/kafka",
	}
	_ = demo.WriteSummary(os.Stdout, s, "postgres://postgres@127.0.0.1:5432/test", "redis://127.0.0.1:6379/0")
	// Output:
	//   300  events enqueued (one transaction with each order)
	//   300  published by the relay
	//   300  handled by the payout worker
	//   150  attempts retried in process
	//     4  sent to a retry topic (and paid from there)
	//     2  times the PSP breaker opened (the worker paused)
	//     3  dead-lettered
	//     3  replayed from the dead-letter topic
	//    20  duplicates suppressed by dedupe
	//   300  orders paid at the PSP, each once
	//     0  lost
	//
	// finished in 5.0s. Inspect what it left:
	//   psql "postgres://postgres@127.0.0.1:5432/test" -c "SELECT count(*) AS published, min(published_at), max(published_at) FROM courier_demo.courier_outbox_published"
	//   redis-cli -u "redis://127.0.0.1:6379/0" --scan --pattern 'courier:demo:courier_demo:dedupe:*' | head
	//   courier dev --data-dir .courier-demo/courier_demo/kafka --listen 127.0.0.1:19092 &   # the demo's topics, beside a courier dev on 9092
	//   kcat -b 127.0.0.1:19092 -t orders.dlq -C -e -f '%k %h\n'
	//   courier dlq list orders.dlq --brokers 127.0.0.1:19092
	//   courier console --database-url "postgres://postgres@127.0.0.1:5432/test" --schema courier_demo --brokers 127.0.0.1:19092 --retry-delays 500ms,1s
	//       # the outbox and orders.dlq in a browser, at http://127.0.0.1:8080/
}
