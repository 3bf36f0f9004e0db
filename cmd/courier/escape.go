package main

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Every string the CLI prints that it read from Kafka or PostgreSQL (or
// that an error quotes from them) goes through display.Text,
// display.Lines or writeJSON, so that a record cannot move the cursor,
// retitle the window or hide text behind escape sequences.

// escapeJSONText rewrites, in JSON that encoding/json wrote, every rune
// it leaves raw that a terminal may act on (DEL, the C1 controls and the
// other runes strconv.IsPrint refuses) as a \uXXXX escape: the JSON
// decodes to the same value. encoding/json escapes the C0 controls itself
// and replaces bytes that are not UTF-8 with U+FFFD.
func escapeJSONText(b []byte) []byte {
	clean := true
	for _, c := range b {
		if c >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return b
	}
	var out bytes.Buffer
	out.Grow(len(b) + 16)
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		switch {
		case r == 0x7f || r >= 0x80 && r != utf8.RuneError && !strconv.IsPrint(r) && r != ' ':
			if r > 0xffff {
				r1, r2 := utf16.EncodeRune(r)
				fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
			} else {
				fmt.Fprintf(&out, `\u%04x`, r)
			}
		default:
			out.Write(b[:size])
		}
		b = b[size:]
	}
	return out.Bytes()
}

// jsonTextWriter passes each write, one JSON document or more (a slog
// JSON record), through escapeJSONText.
type jsonTextWriter struct{ w io.Writer }

func (j jsonTextWriter) Write(p []byte) (int, error) {
	if _, err := j.w.Write(escapeJSONText(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}
