package record_test

import (
	"context"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/IBM/sarama/mocks"

	"github.com/courierkit/courier/record"
)

// Message is the one conversion to Sarama: a nil key stays nil, headers
// keep their order and duplicates.
func ExampleMessage() {
	msg := record.Message(&record.Record{
		Topic:   "payouts",
		Value:   []byte(`{"payout_id":"p-1"}`),
		Headers: []record.Header{{Key: []byte("ce_id"), Value: []byte("1")}, {Key: []byte("ce_id"), Value: []byte("2")}},
	})
	value, _ := msg.Value.Encode()
	fmt.Printf("%s key=%v value=%s\n", msg.Topic, msg.Key, value)
	for _, h := range msg.Headers {
		fmt.Printf("%s=%s\n", h.Key, h.Value)
	}
	// Output:
	// payouts key=<nil> value={"payout_id":"p-1"}
	// ce_id=1
	// ce_id=2
}

// NewSyncPublisher publishes through any sarama.SyncProducer, here
// Sarama's mock; Publish reports where each acknowledged record went.
func ExampleNewSyncPublisher() {
	cfg := mocks.NewTestConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewManualPartitioner
	producer := mocks.NewSyncProducer(nil, cfg)
	producer.ExpectSendMessageAndSucceed()
	producer.ExpectSendMessageAndFail(sarama.ErrNotEnoughReplicas)

	pub := record.NewSyncPublisher(producer)
	defer pub.Close()
	records := []*record.Record{
		{Topic: "payouts", Key: []byte("order-1"), Value: []byte("paid"), Partition: 2},
		{Topic: "payouts", Key: []byte("order-2"), Value: []byte("paid")},
	}
	for i, err := range pub.Publish(context.Background(), records[:1]) {
		fmt.Printf("%s: %v, at %d@%d\n", records[i].Key, err, records[i].Partition, records[i].Offset)
	}
	for i, err := range pub.Publish(context.Background(), records[1:]) {
		fmt.Printf("%s: %v\n", records[1+i].Key, err)
	}
	// Output:
	// order-1: <nil>, at 2@1
	// order-2: kafka server: Messages are rejected since there are fewer in-sync replicas than required
}
