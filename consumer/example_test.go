package consumer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/consumer"
)

// A payout worker: each message pays out once; a payout the PSP rejects for
// good goes to the dead-letter topic, and the worker moves on without
// waiting for that write (so the lines can come in either order). The
// example runs on an in-process broker.
func Example() {
	var payouts []*sarama.ProducerMessage
	for _, id := range []string{"p-1", "p-2", "p-3"} {
		payouts = append(payouts, &sarama.ProducerMessage{
			Key:     sarama.StringEncoder(id),
			Value:   sarama.StringEncoder(`{"payout_id":"` + id + `"}`),
			Headers: []sarama.RecordHeader{{Key: []byte("ce_id"), Value: []byte("event-" + id)}},
		})
	}
	broker := payoutsBroker(payouts...)
	defer broker.Close()

	ctx, stop := context.WithCancel(context.Background())
	var settled atomic.Int32
	done := func() {
		if settled.Add(1) == 3 {
			stop()
		}
	}
	saramaConfig := consumer.NewSaramaConfig()
	saramaConfig.Consumer.Offsets.AutoCommit.Interval = 10 * time.Millisecond
	c, err := consumer.New(consumer.Config{
		Brokers: broker.ListenAddrs(),
		Sarama:  saramaConfig,
		Group:   "payout-worker",
		Topics:  []string{"payouts"},
		Handler: consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
			if string(m.Key) == "p-2" {
				return consumer.Permanent(errors.New("psp: account closed"))
			}
			fmt.Printf("paid %s (ce_id %s, attempt %d)\n", m.Key, m.ID, m.Attempt)
			done()
			return nil
		}),
		OnDeadLetter: func(ctx context.Context, dl consumer.DeadLetter) {
			fmt.Printf("dead-lettered %s to %s: %s (%s)\n", dl.Message.Key, dl.Written.Topic, dl.Envelope.Error, dl.Envelope.ErrorKind)
			done()
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Unordered output:
	// paid p-1 (ce_id event-p-1, attempt 1)
	// dead-lettered p-2 to payouts.dlq: permanent: psp: account closed (permanent)
	// paid p-3 (ce_id event-p-3, attempt 1)
}

// Guard a PSP client with a breaker: after 5 failures in a row that say the
// PSP is down (a network error, a timeout, an answer marked Unavailable),
// calls are refused for 30s, and the consumer pauses the partition instead
// of burning attempts and dead-lettering payouts. An answer about one
// payout (a 500 for it, say) is that message's failure alone: it does not
// count.
func ExampleBreaker() {
	psp, err := consumer.NewBreaker(consumer.BreakerConfig{Name: "psp", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		log.Fatal(err)
	}
	pay := func(ctx context.Context, payout []byte) error {
		return consumer.Unavailable(errors.New("psp: 503 Service Unavailable"))
	}
	handler := consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
		return psp.Do(ctx, func(ctx context.Context) error { return pay(ctx, m.Value) })
	})

	for i := 1; i <= 6; i++ {
		err := handler.Handle(context.Background(), &consumer.Message{Value: []byte(`{}`)})
		fmt.Printf("call %d: breaker open: %t\n", i, errors.Is(err, consumer.ErrBreakerOpen))
	}
	fmt.Println("state:", psp.State())
	// Output:
	// call 1: breaker open: false
	// call 2: breaker open: false
	// call 3: breaker open: false
	// call 4: breaker open: false
	// call 5: breaker open: true
	// call 6: breaker open: true
	// state: open
}

// Trace the payouts: each attempt is a "process payouts" span, a child of
// the span the message's traceparent names (the producer's), and the
// handler's context carries it, so the handler's own spans are its
// children. Pass the provider of your OpenTelemetry setup (an OTLP
// exporter's, say); this one keeps the spans in memory to print them.
func ExampleConfig_tracerProvider() {
	broker := payoutsBroker(&sarama.ProducerMessage{
		Value: sarama.StringEncoder(`{"payout_id":"p-1"}`),
		Headers: []sarama.RecordHeader{{Key: []byte("ce_id"), Value: []byte("event-p-1")},
			{Key: []byte("traceparent"), Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}},
	})
	defer broker.Close()

	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer tp.Shutdown(context.Background())
	ctx, stop := context.WithCancel(context.Background())
	c, err := consumer.New(consumer.Config{
		Brokers: broker.ListenAddrs(),
		Group:   "payout-worker",
		Topics:  []string{"payouts"},
		Handler: consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
			_, span := tp.Tracer("payout-worker").Start(ctx, "psp.pay")
			span.End()
			stop()
			return nil
		}),
		TracerProvider: tp,
		Logger:         slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
	names := map[trace.SpanID]string{}
	for _, s := range spans.GetSpans() {
		names[s.SpanContext.SpanID()] = s.Name
	}
	for _, s := range spans.GetSpans() {
		parent := names[s.Parent.SpanID()]
		if s.Parent.IsRemote() {
			parent = "the producer's " + s.Parent.SpanID().String()
		}
		fmt.Printf("%s (%s), trace %s, child of %s\n", s.Name, s.SpanKind, s.SpanContext.TraceID(), parent)
	}
	// Output:
	// psp.pay (internal), trace 4bf92f3577b34da6a3ce929d0e0e4736, child of process payouts
	// process payouts (consumer), trace 4bf92f3577b34da6a3ce929d0e0e4736, child of the producer's 00f067aa0ba902b7
}

// stuckAlarm is a hook of your own: it tells, once, of a partition whose
// oldest message has been in flight for longer than after. Like every
// hook it returns at once: the channel has room for its one message.
type stuckAlarm struct {
	after time.Duration
	once  sync.Once
	stuck chan string
}

func (a *stuckAlarm) OldestInFlight(topic string, partition int32, age time.Duration) {
	if age > a.after {
		a.once.Do(func() { a.stuck <- fmt.Sprintf("%s/%d in flight for over %v", topic, partition, a.after) })
	}
}

// Watch for a stuck partition: the consumer reports the age of each
// partition's oldest message in flight every ProgressInterval (15s by
// default; 50ms here), so a handler that hangs shows. Package prom's
// ConsumerMetrics exports it as courier_consumer_oldest_in_flight_seconds,
// which the CourierConsumerStuck alert reads.
func ExampleOldestInFlightHook() {
	broker := payoutsBroker(&sarama.ProducerMessage{Value: sarama.StringEncoder(`{"payout_id":"p-1"}`)})
	defer broker.Close()
	alarm := &stuckAlarm{after: 200 * time.Millisecond, stuck: make(chan string, 1)}
	ctx, stop := context.WithCancel(context.Background())
	c, err := consumer.New(consumer.Config{
		Brokers: broker.ListenAddrs(),
		Group:   "payout-worker",
		Topics:  []string{"payouts"},
		Handler: consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error {
			select { // the PSP hangs, until the alarm goes off
			case stuck := <-alarm.stuck:
				fmt.Println("stuck:", stuck)
			case <-ctx.Done():
			}
			stop()
			return nil
		}),
		Hooks:            []consumer.Hook{alarm},
		ProgressInterval: 50 * time.Millisecond,
		Logger:           slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// stuck: payouts/0 in flight for over 200ms
}

// A cluster whose ACLs refuse idempotent writes (the principal lacks
// IDEMPOTENT_WRITE, which Kafka before 2.8 requires) makes Run fail at
// start with CLUSTER_AUTHORIZATION_FAILED, naming the field that writes the
// dead letters and retry-tier moves without idempotence. Grant the ACL, or
// set the field: a write whose answer is lost may then be written twice.
func ExampleConfig_withoutIdempotentWrites() {
	broker := payoutsBroker()
	defer broker.Close()
	broker.ControlKey(int16(kmsg.InitProducerID), func(req kmsg.Request) (kmsg.Response, error, bool) {
		broker.KeepControl()
		resp := req.ResponseKind().(*kmsg.InitProducerIDResponse)
		resp.ErrorCode = kerr.ClusterAuthorizationFailed.Code
		return resp, nil, true
	})
	cfg := consumer.Config{
		Brokers: broker.ListenAddrs(),
		Group:   "payout-worker",
		Topics:  []string{"payouts"},
		Handler: consumer.HandlerFunc(func(context.Context, *consumer.Message) error { return nil }),
		Logger:  slog.New(slog.DiscardHandler),
	}
	c, err := consumer.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	err = c.Run(context.Background())
	fmt.Println(errors.Is(err, sarama.ErrClusterAuthorizationFailed), strings.Contains(err.Error(), "Config.WithoutIdempotentWrites"))

	cfg.WithoutIdempotentWrites = true
	if c, err = consumer.New(cfg); err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer stop()
	fmt.Println(c.Run(ctx))
	// Output:
	// true true
	// <nil>
}

// payoutsBroker starts an in-process broker with the topics payouts and
// payouts.dlq, and writes msgs to payouts.
func payoutsBroker(msgs ...*sarama.ProducerMessage) *kfake.Cluster {
	broker, err := kfake.NewCluster(kfake.SeedTopics(1, "payouts", "payouts.dlq"))
	if err != nil {
		log.Fatal(err)
	}
	producer, err := sarama.NewSyncProducer(broker.ListenAddrs(), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	for _, m := range msgs {
		m.Topic = "payouts"
		if _, _, err := producer.SendMessage(m); err != nil {
			log.Fatal(err)
		}
	}
	return broker
}

// Cooperative rebalancing: a change of the group moves only the partitions
// that change owner, and the others are handled on without a pause. A group
// that runs an eager strategy today switches in two rolling deployments:
// first with both strategies (the group keeps rebalancing eagerly until
// every member offers cooperative-sticky), then with cooperative-sticky
// alone.
func ExampleNewSaramaConfig_cooperative() {
	cfg := consumer.NewSaramaConfig()
	cfg.Version = sarama.V2_4_0_0 // cooperative rebalancing needs Kafka 2.4 or later
	cfg.Consumer.Group.Rebalance.GroupStrategies = []sarama.BalanceStrategy{
		sarama.NewBalanceStrategyCooperativeSticky(),
		sarama.NewBalanceStrategyRange(), // the first deployment only
	}
	c, err := consumer.New(consumer.Config{
		Brokers: []string{"kafka-1:9092"},
		Sarama:  cfg,
		Group:   "payouts",
		Topics:  []string{"payouts"},
		Handler: consumer.HandlerFunc(func(ctx context.Context, m *consumer.Message) error { return nil }),
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = c // c.Run(ctx)
}

// Serve the consumer's probes beside the service's own routes, for a
// Kubernetes livenessProbe on GET /livez and a readinessProbe on GET
// /readyz: not ready before Run, ready once it is in its group, not live
// once Run has returned. The example runs on an in-process broker.
func ExampleConsumer_Readiness() {
	broker := payoutsBroker()
	defer broker.Close()
	c, err := consumer.New(consumer.Config{
		Brokers: broker.ListenAddrs(),
		Group:   "payout-worker",
		Topics:  []string{"payouts"},
		Handler: consumer.HandlerFunc(func(context.Context, *consumer.Message) error { return nil }),
		Logger:  slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/livez", c.Liveness())
	mux.Handle("/readyz", c.Readiness())
	srv := httptest.NewServer(mux) // in a service: (&http.Server{Addr: ":8081", Handler: mux}).ListenAndServe()
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
	fmt.Println(get("/readyz"))

	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	// Ready, then ready with its partition: the group's first generation
	// may hand out nothing while the broker's metadata is still new.
	for answer := get("/readyz"); ; answer = get("/readyz") {
		if strings.HasPrefix(answer, "200") && strings.Contains(answer, `"partitions":1`) {
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
	// 503 {"status":"not_ready","reason":"Run has not started","group":"payout-worker","in_group":false,"partitions":0}
	// 200 {"status":"ready","reason":"in the group, consuming 1 partition","group":"payout-worker","in_group":true,"partitions":1}
	// 503 {"status":"not_live","reason":"Run has returned"}
}
