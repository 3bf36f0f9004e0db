package ceheader_test

import (
	"strings"
	"testing"

	"github.com/courierkit/courier/internal/ceheader"
)

// TestValidTenant: a tenant is at most MaxAttributeBytes of UTF-8 without
// control characters, and the string and the byte check agree.
func TestValidTenant(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("t", ceheader.MaxAttributeBytes)
	for value, want := range map[string]bool{
		"":                 true,
		"acme":             true,
		"müller-gmbh":      true,
		"acme corp":        true,
		long:               true,
		long + "t":         false,
		"acme\xff":         false,
		"acme\x00":         false,
		"acme\t":           false,
		"acme\x1b[31m":     false,
		"acme\x7f":         false,
		"acme\u0085":       false,
		"acme\u009b31m":    false,
		"\x1b]0;pwned\x07": false,
		long[:2047] + "\n": false,
		long[:2046] + "ü":  true,
		long[:2047] + "ü":  false,
	} {
		if got := ceheader.ValidTenant(value); got != want {
			t.Errorf("ValidTenant(%.40q) = %v, want %v", value, got, want)
		}
		if got := ceheader.ValidTenantBytes([]byte(value)); got != want {
			t.Errorf("ValidTenantBytes(%.40q) = %v, want %v", value, got, want)
		}
	}
}
