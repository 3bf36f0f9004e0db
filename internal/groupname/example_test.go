package groupname_test

import (
	"fmt"

	"github.com/courierkit/courier/internal/groupname"
)

func ExampleValidate() {
	fmt.Println(groupname.Validate("payouts"))
	fmt.Println("pay\\nouts", groupname.Validate("pay\nouts"))
	// Output:
	// <nil>
	// pay\nouts holds a control character
}
