package grouplag_test

import (
	"context"
	"fmt"
	"log"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courierkit/courier/cmd/courier/internal/grouplag"
)

// The group payouts has read and committed the 3 records of its topic;
// 2 more arrive: it lags by 2. The example runs on an in-process broker.
func ExampleRead() {
	broker, err := kfake.NewCluster(kfake.SeedTopics(1, "payouts"))
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()
	ctx := context.Background()
	produce(ctx, broker.ListenAddrs(), 3)
	group, err := kgo.NewClient(kgo.SeedBrokers(broker.ListenAddrs()...), kgo.ConsumerGroup("payouts"), kgo.ConsumeTopics("payouts"), kgo.DisableAutoCommit())
	if err != nil {
		log.Fatal(err)
	}
	defer group.Close()
	for read := 0; read < 3; {
		fetches := group.PollFetches(ctx)
		read += fetches.NumRecords()
		if err := group.CommitRecords(ctx, fetches.Records()...); err != nil {
			log.Fatal(err)
		}
	}
	produce(ctx, broker.ListenAddrs(), 2)

	client, err := sarama.NewClient(broker.ListenAddrs(), sarama.NewConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	groups, err := grouplag.Read(ctx, client)
	if err != nil {
		log.Fatal(err)
	}
	for _, g := range groups {
		fmt.Printf("%s: %s, %d member(s), lag %d\n", g.Name, g.State, g.Members, g.Lag)
		for _, p := range g.Partitions {
			fmt.Printf("  %s/%d committed %d of %d, lag %d\n", p.Topic, p.Partition, p.Committed, p.HighWater, p.Lag)
		}
	}
	// Output:
	// payouts: Stable, 1 member(s), lag 2
	//   payouts/0 committed 3 of 5, lag 2
}

// produce writes n records to payouts.
func produce(ctx context.Context, brokers []string, n int) {
	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	for range n {
		if err := producer.ProduceSync(ctx, &kgo.Record{Topic: "payouts", Value: []byte("{}")}).FirstErr(); err != nil {
			log.Fatal(err)
		}
	}
}
