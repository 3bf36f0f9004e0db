package kfakefloor_test

import (
	"fmt"

	"github.com/IBM/sarama"
	"github.com/courierkit/courier/internal/kfakefloor"
	"github.com/twmb/franz-go/pkg/kfake"
)

// A client configured for Kafka 0.10.2 produces with version 2, which
// Kafka 4.0 removed: the cluster refuses it and says so.
func ExampleRefuse() {
	cluster, err := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	kfakefloor.Refuse(cluster, func(api string, version int16) {
		fmt.Printf("refused %s version %d\n", api, version)
	})

	cfg := sarama.NewConfig()
	cfg.Version = sarama.V0_10_2_0
	cfg.Producer.Return.Successes = true
	cfg.Producer.Retry.Max = 0
	producer, err := sarama.NewSyncProducer(cluster.ListenAddrs(), cfg)
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	_, _, err = producer.SendMessage(&sarama.ProducerMessage{Topic: "orders", Value: sarama.StringEncoder("v")})
	fmt.Println("produced:", err == nil)
	// Output:
	// refused Produce version 2
	// produced: false
}
