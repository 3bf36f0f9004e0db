package integration_test

import (
	"fmt"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/retrytopics"
)

// The topics a pipeline test sets up besides its main topic: one per retry
// tier, then the dead-letter topic, as the consumer names them.
func Example() {
	topology, err := retrytopics.New("orders", retrytopics.Config{Delays: []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}}, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(topology.Topics(), topology.DeadLetter, topology.DeadLetter == dlq.Topic("orders", ""))
	// Output: [orders.retry.50ms orders.retry.100ms] orders.dlq true
}
