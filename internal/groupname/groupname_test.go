package groupname_test

import (
	"strings"
	"testing"

	"github.com/courierkit/courier/internal/groupname"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	for id, ok := range map[string]bool{
		"":                                      true,
		"payouts":                               true,
		"zahlungen-ü":                           true,
		strings.Repeat("g", groupname.MaxBytes): true,
		strings.Repeat("g", groupname.MaxBytes+1): false,
		"bad\xff":   false,
		"tab\there": false,
		"bell\x07":  false,
	} {
		if err := groupname.Validate(id); (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}
