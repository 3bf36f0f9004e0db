package textcut_test

import (
	"fmt"

	"github.com/courierkit/courier/internal/textcut"
)

// A value too long for its place is cut on a character, and says so.
func ExampleCut() {
	fmt.Println(textcut.Cut("café crème", 8, "…"))
	fmt.Println(textcut.Cut("ok\xff", 8, "…"))
	// Output:
	// café…
	// ok�
}
