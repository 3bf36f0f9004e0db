package breakerdefault_test

import (
	"fmt"

	"github.com/courierkit/courier/internal/breakerdefault"
)

// Both halves' breakers open after the same number of failures, and stay
// open as long.
func Example() {
	fmt.Println(breakerdefault.Failures, breakerdefault.OpenFor, breakerdefault.Probes)
	// Output: 5 30s 1
}
