package producer_test

import (
	"context"
	"fmt"
	"log"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/courierkit/courier/producer"
	"github.com/courierkit/courier/record"
)

// Publish records with the relay's own publisher, outside a relay. Its
// produce requests are idempotent: a batch sent again because its answer
// was lost is kept once. For a cluster that refuses producer ids, pass
// producer.WithoutIdempotence() (the relay's RelayConfig.DisableIdempotence).
func ExampleNewSaramaPublisher() {
	broker, err := kfake.NewCluster(kfake.SeedTopics(1, "orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()

	pub, err := producer.NewSaramaPublisher(broker.ListenAddrs(), producer.NewSaramaConfig())
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	records := []*record.Record{
		{Topic: "orders", Key: []byte("order-42"), Value: []byte(`{"n":1}`)},
		{Topic: "orders", Key: []byte("order-42"), Value: []byte(`{"n":2}`)},
	}
	for i, err := range pub.Publish(context.Background(), records) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("record %d: partition %d offset %d\n", i, records[i].Partition, records[i].Offset)
	}
	// Output:
	// record 0: partition 0 offset 0
	// record 1: partition 0 offset 1
}
