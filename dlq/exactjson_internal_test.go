package dlq

import (
	"bytes"
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// TestExactJSONAgreesWithCompact: exactJSON, a single pass, says yes
// exactly when json.Compact would give the same bytes back (for valid,
// UTF-8, non-null JSON): the definition it replaces.
func TestExactJSONAgreesWithCompact(t *testing.T) {
	reference := func(v []byte) bool {
		if !utf8.Valid(v) || !json.Valid(v) || string(v) == "null" {
			return false
		}
		var compact bytes.Buffer
		return json.Compact(&compact, v) == nil && bytes.Equal(compact.Bytes(), v)
	}
	for _, v := range []string{
		`{"a":1}`, `{"a": 1}`, "{\"a\":1}\n", ` {"a":1}`, `[1,2,3]`, `[1, 2]`, `"text with spaces"`,
		`{"k":"a \" b"}`, `{"k":"a \\"}`, `{"k":"a \\" , "}`, `{"k":"\\\\","j":[ ]}`, `{"k":"tab\tinside"}`,
		`null`, ` null`, `12`, `1.5e3`, `true`, `{"a":{"b":[{"c":"d e"}]}}`, "{\"a\":\r\n1}",
		"\"\xff\"", `{"a":`, ``,
	} {
		if got, want := exactJSON([]byte(v)), reference([]byte(v)); got != want {
			t.Errorf("exactJSON(%q) = %t, want %t", v, got, want)
		}
	}
}
