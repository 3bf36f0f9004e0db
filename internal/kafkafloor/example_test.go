package kafkafloor_test

import (
	"fmt"

	"github.com/IBM/sarama"
	"github.com/courierkit/courier/internal/kafkafloor"
)

// Kafka 4.0 accepts Produce from version 3 and a Sarama configured for
// Kafka 2.1 or later; an older Version is refused before any connection.
func ExampleCheck() {
	fmt.Println(kafkafloor.Accepts(0, 2), kafkafloor.Accepts(0, 3))
	fmt.Println(kafkafloor.Check(sarama.V2_1_0_0))
	fmt.Println(kafkafloor.Check(sarama.V2_0_0_0))
	// Output:
	// false true
	// <nil>
	// Sarama Version 2.0.0 is older than 2.1.0, the oldest courier supports: Kafka 4.0 refuses the older protocol versions Sarama would send (KIP-896); set Version to sarama.V2_1_0_0 or later, or leave Sarama's default
}
