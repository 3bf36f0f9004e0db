package handled_test

import (
	"fmt"

	"github.com/courierkit/courier/internal/handled"
)

// A handler records each record it handles; the run then counts what was
// lost or handled twice.
func ExampleLog_Count() {
	var log handled.Log
	log.Add("member-a", 0, 0)
	log.Add("member-a", 0, 1)
	log.Add("member-b", 0, 1) // redelivered to the partition's new owner
	fmt.Printf("%+v\n", log.Count([]int64{2}))
	// Output: {Records:2 Lost:1 Duplicates:1}
}
