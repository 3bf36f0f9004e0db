package testkit_test

import (
	"fmt"

	"github.com/courierkit/courier/internal/testkit"
)

// Tests call testkit.Postgres(t), testkit.NewRedis(t) and testkit.NewKafka(t)
// for their own schema, key prefix and brokers; a real cluster is named by
// COURIER_TEST_KAFKA_BROKERS, parsed like this.
func ExampleParseBrokers() {
	fmt.Println(testkit.ParseBrokers("kafka-1:9092, kafka-2:9092,"))
	// Output: [kafka-1:9092 kafka-2:9092]
}
