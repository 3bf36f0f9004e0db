package kafkaaddr_test

import (
	"fmt"

	"github.com/courierkit/courier/internal/kafkaaddr"
)

// A good address passes; one no dial could reach says what is wrong.
func ExampleValidate() {
	for _, addr := range []string{"kafka-1:9092", "kafka-1", "kafka-1:99999"} {
		if err := kafkaaddr.Validate(addr); err != nil {
			fmt.Printf("%q: %v\n", addr, err)
			continue
		}
		fmt.Printf("%q: ok\n", addr)
	}
	// Output:
	// "kafka-1:9092": ok
	// "kafka-1": is not a host:port address; write it as "kafka-1:9092"
	// "kafka-1:99999": has no valid port (1-65535); write it as "kafka-1:9092"
}
