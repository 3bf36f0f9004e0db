package producer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// newRelay builds a relay on the test's schema, publishing to k.
func newRelay(t *testing.T, pg *testkit.PG, k *testkit.Kafka, cfg producer.RelayConfig) *producer.Relay {
	t.Helper()
	cfg.Schema = pg.Schema
	if cfg.Publisher == nil {
		cfg.Brokers = k.Brokers
	}
	if cfg.Logger == nil {
		cfg.Logger = testkit.Logger(t)
	}
	r, err := producer.NewRelay(pg.Pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// runRelay runs r.Run until the test ends and checks that it returns nil.
func runRelay(t *testing.T, r *producer.Relay) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
	})
}

// consumer reads every partition of a topic from the start.
type consumer struct {
	t        *testing.T
	client   sarama.Client
	consumer sarama.Consumer

	mu   sync.Mutex
	msgs []*sarama.ConsumerMessage
}

func consume(t *testing.T, k *testkit.Kafka, topic string) *consumer {
	t.Helper()
	client, err := sarama.NewClient(k.Brokers, k.Config())
	if err != nil {
		t.Fatal(err)
	}
	sc, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	c := &consumer{t: t, client: client, consumer: sc}
	partitions, err := sc.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var pcs []sarama.PartitionConsumer
	for _, p := range partitions {
		pc, err := sc.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for m := range pc.Messages() {
				c.mu.Lock()
				c.msgs = append(c.msgs, m)
				c.mu.Unlock()
			}
		})
		pcs = append(pcs, pc)
	}
	t.Cleanup(func() {
		for _, pc := range pcs {
			pc.AsyncClose() // closes its Messages channel
		}
		wg.Wait()
		_ = sc.Close()
		_ = client.Close()
	})
	return c
}

// messages returns a copy of what arrived so far.
func (c *consumer) messages() []*sarama.ConsumerMessage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*sarama.ConsumerMessage(nil), c.msgs...)
}

// waitDistinct waits until n distinct ce_ids arrived and returns all messages.
func (c *consumer) waitDistinct(n int, timeout time.Duration) []*sarama.ConsumerMessage {
	c.t.Helper()
	var msgs []*sarama.ConsumerMessage
	testkit.WaitFor(c.t, timeout, fmt.Sprintf("%d distinct events on Kafka", n), func() bool {
		msgs = c.messages()
		return len(distinctIDs(msgs)) >= n
	})
	return msgs
}

func headerValue(m *sarama.ConsumerMessage, name string) string {
	for _, h := range m.Headers {
		if string(h.Key) == name {
			return string(h.Value)
		}
	}
	return ""
}

func distinctIDs(msgs []*sarama.ConsumerMessage) map[string]bool {
	ids := map[string]bool{}
	for _, m := range msgs {
		ids[headerValue(m, producer.HeaderID)] = true
	}
	return ids
}
