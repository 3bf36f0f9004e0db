package topicname_test

import (
	"fmt"

	"github.com/courierkit/courier/internal/topicname"
)

func ExampleValidate() {
	fmt.Println(topicname.Validate("orders.retry.5s"))
	fmt.Println("orders+retry", topicname.Validate("orders+retry"))
	// Output:
	// <nil>
	// orders+retry "orders+retry" has '+'; Kafka topics use only ASCII letters, digits, '.', '_' and '-'
}
