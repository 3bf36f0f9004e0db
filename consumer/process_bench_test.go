package consumer

import (
	"context"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/producer"
)

// BenchmarkProcess measures the runner's own work for one message the
// handler takes at once (no Kafka: a session and claim that only count),
// in the default config: what BenchmarkConsume's runner pays beside the raw
// group. Run it with -benchmem for the allocations per message.
func BenchmarkProcess(b *testing.B) {
	for _, tc := range []struct {
		name  string
		trace bool
	}{{"headers=ce", false}, {"headers=ce+traceparent", true}} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := New(Config{
				Brokers: []string{"localhost:9092"},
				Group:   "bench",
				Topics:  []string{"orders"},
				Handler: HandlerFunc(func(context.Context, *Message) error { return nil }),
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sess := &countingSession{ctx: ctx}
			p := newPartition(&groupHandler{c: c}, sess, countingClaim{})
			defer p.close()
			msg := benchMessage(tc.trace)
			for i := 0; b.Loop(); i++ {
				msg.Offset = int64(i)
				p.pending.start(msg.Offset, p.now())
				if d, traced := p.newDelivery(msg); !p.process(d, traced) {
					b.Fatal("message abandoned")
				}
			}
			if sess.marked != int64(b.N) {
				b.Fatalf("marked %d, want %d", sess.marked, b.N)
			}
		})
	}
}

// benchMessage is a record as the relay writes it: ~200 bytes of JSON and
// the CloudEvents headers.
func benchMessage(trace bool) *sarama.ConsumerMessage {
	h := func(k, v string) *sarama.RecordHeader { return &sarama.RecordHeader{Key: []byte(k), Value: []byte(v)} }
	msg := &sarama.ConsumerMessage{
		Topic:     "orders",
		Key:       []byte("order-42"),
		Value:     make([]byte, 200),
		Timestamp: time.Now(),
		Headers: []*sarama.RecordHeader{
			h(producer.HeaderSpecVersion, "1.0"),
			h(producer.HeaderID, "0195f3c4-0000-7000-8000-000000000001"),
			h(producer.HeaderType, "OrderCreated"),
			h(producer.HeaderSource, producer.DefaultSource),
			h(producer.HeaderTime, "2026-01-16T09:59:58.12Z"),
			h(producer.HeaderContentType, "application/json"),
			h(producer.HeaderCorrelationID, "corr-order-42"),
		},
	}
	if trace {
		msg.Headers = append(msg.Headers, h("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"))
	}
	return msg
}

// countingSession is a consumer group session that counts marks.
type countingSession struct {
	sarama.ConsumerGroupSession // nil: the methods not used panic
	ctx                         context.Context
	marked                      int64
}

func (s *countingSession) Context() context.Context { return s.ctx }

func (s *countingSession) MarkOffset(_ string, _ int32, next int64, _ string) { s.marked = next }

// countingClaim is the claim of partition 0 of "orders".
type countingClaim struct {
	sarama.ConsumerGroupClaim // nil: the methods not used panic
}

func (countingClaim) Topic() string              { return "orders" }
func (countingClaim) Partition() int32           { return 0 }
func (countingClaim) HighWaterMarkOffset() int64 { return 1 << 40 }
func (countingClaim) InitialOffset() int64       { return 0 }
