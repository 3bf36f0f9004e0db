// Package groupname applies courier's rules for consumer group ids, for
// the packages that carry one in a record (the retry headers, the
// dead-letter envelope) or select records by one.
package groupname

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxBytes bounds a consumer group id.
const MaxBytes = 255

// Validate says what is wrong with a consumer group id, if anything: it
// has at most MaxBytes, is valid UTF-8 and holds no control character. The
// empty id passes; callers that need one check that themselves. Its errors
// read after the name, e.g. "consumer group " + err.Error().
func Validate(s string) error {
	switch {
	case len(s) > MaxBytes:
		return fmt.Errorf("has %d bytes; a consumer group id has at most %d", len(s), MaxBytes)
	case !utf8.ValidString(s):
		return errors.New("is not valid UTF-8")
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return errors.New("holds a control character")
	}
	return nil
}
