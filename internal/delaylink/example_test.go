package delaylink_test

import (
	"fmt"
	"time"

	"github.com/courierkit/courier/internal/delaylink"
)

// A benchmark points its pool at the link instead of PostgreSQL, so each
// round trip to the database costs two milliseconds more.
func Example() {
	link, err := delaylink.New("127.0.0.1:5432", time.Millisecond)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer link.Close()
	fmt.Println(link.Host())
	// Output: 127.0.0.1
}
