package redact_test

import (
	"fmt"

	"github.com/courierkit/courier/internal/redact"
)

// A password is masked in the connection string, and wherever an error
// message quotes it.
func ExampleConnString() {
	conn := "host=db password = s3cret port=notaport"
	fmt.Println(redact.ConnString(conn))
	fmt.Println(redact.String(`cannot parse "s3cret"`, redact.Secrets(conn)))
	// Output:
	// host=db password = xxxxx port=notaport
	// cannot parse "xxxxx"
}
