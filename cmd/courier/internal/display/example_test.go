package display_test

import (
	"fmt"
	"time"

	"github.com/courierkit/courier/cmd/courier/internal/display"
)

func ExampleText() {
	fmt.Println(display.Text("order-42"))
	fmt.Println(display.Text("evil\x1b[2Jkey"))
	// Output:
	// order-42
	// evil\x1b[2Jkey
}

func ExampleParseTime() {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	t, _ := display.ParseTime("since", "2h", now)
	fmt.Println(t.Format(time.RFC3339))
	_, err := display.ParseTime("since", "yesterday", now)
	fmt.Println(err)
	// Output:
	// 2026-11-26T10:00:00Z
	// since "yesterday": use an RFC 3339 time (2026-01-16T09:00:00Z) or a duration ago (90m, 2h, 7d)
}
