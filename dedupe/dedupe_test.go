package dedupe_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/courierkit/courier/dedupe"
)

// invalidConfig is a constructor's error and what it must say.
type invalidConfig struct {
	err  error
	want string
}

// expectInvalidConfig checks that each error matches dedupe.ErrInvalidConfig
// and says what it must.
func expectInvalidConfig(t *testing.T, cases []invalidConfig) {
	t.Helper()
	for _, c := range cases {
		if !errors.Is(c.err, dedupe.ErrInvalidConfig) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("got %v, want ErrInvalidConfig saying %q", c.err, c.want)
		}
	}
}

// errOf returns the error of a constructor's results.
func errOf[T any](_ T, err error) error { return err }
