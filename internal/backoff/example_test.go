package backoff_test

import (
	"fmt"
	"time"

	"github.com/courierkit/courier/internal/backoff"
)

func ExamplePolicy_Delay() {
	p := backoff.Policy{Base: time.Second, Factor: 2, Max: 30 * time.Second}
	for attempt := 1; attempt <= 6; attempt++ {
		fmt.Print(p.Delay(attempt, nil), " ")
	}
	fmt.Println()
	// Output: 1s 2s 4s 8s 16s 30s
}
