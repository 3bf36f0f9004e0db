package ceheader_test

import (
	"fmt"

	"github.com/courierkit/courier/internal/ceheader"
)

// The header that carries an event's id, on which consumers dedupe.
func Example() {
	fmt.Println(ceheader.ID, ceheader.TraceParent)
	// Output: ce_id traceparent
}
