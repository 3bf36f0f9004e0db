package probe_test

import (
	"fmt"
	"net/http/httptest"

	"github.com/courierkit/courier/internal/probe"
)

func ExampleFunc() {
	live := probe.Func(func() (bool, any) { return true, probe.Plain{Status: "live", Reason: "Run is running"} })
	rec := httptest.NewRecorder()
	live.ServeHTTP(rec, httptest.NewRequest("GET", "/livez", nil))
	fmt.Print(rec.Code, " ", rec.Body.String())
	// Output: 200 {"status":"live","reason":"Run is running"}
}
