package dlqindex_test

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/courierkit/courier/cmd/courier/internal/dlqindex"
	"github.com/courierkit/courier/dlq"
)

// longErrorEnvelope returns an envelope-mode record whose error is longer
// than dlq.MaxErrorBytes: courier never writes one, Decode reads it.
func longErrorEnvelope(t *testing.T, at time.Time) *kgo.Record {
	t.Helper()
	r := deadLetter(t, 0, dlq.Original{Topic: "orders", Partition: 0, Offset: 9, Key: []byte("long")},
		dlq.Failure{Error: "PLACEHOLDER", Kind: dlq.KindPermanent, FailedAt: at}, false)
	long := strings.Repeat("é", dlq.MaxErrorBytes) + " the end"
	r.Value = bytes.Replace(r.Value, []byte(`"error":"PLACEHOLDER"`), []byte(`"error":"`+long+`"`), 1)
	if env, err := dlq.Decode(r.Value); err != nil || len(env.Error) <= dlq.MaxErrorBytes {
		t.Fatalf("the long error does not decode as such: %d bytes, %v", len(env.Error), err)
	}
	return r
}

func TestHostileContentStaysData(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	at := time.Date(2026, 1, 16, 9, 0, 0, 0, time.UTC)
	escapes := "\x1b[31mred\x1b[0m\r\n\x00"
	write := func(i int, key []byte, text string, raw bool) *kgo.Record {
		return deadLetter(t, 0, dlq.Original{Topic: "orders", Partition: 0, Offset: int64(i), Key: key},
			dlq.Failure{Error: text, Kind: dlq.KindRetriesExhausted, FailedAt: at.Add(time.Duration(i) * time.Second)}, raw)
	}
	f.produce(t, []*kgo.Record{
		write(0, []byte(escapes), "boom\x1b]0;pwned\x07 and \u2028 more", false),
		write(1, []byte{0xc3, 0x28, 0x00}, "\xff\xfe bytes that are not UTF-8", true),
		write(2, []byte("\u202egnp.exe"), escapes, true),
		longErrorEnvelope(t, at.Add(3*time.Second)),
		{Partition: 0, Key: []byte{0xff, 0x1b}, Value: []byte{0x00, 0x1b, 0xff, '{'}, Timestamp: at.Add(4 * time.Second)},
		{Partition: 0, Value: []byte(`{"envelope_version":1e999}`), Timestamp: at.Add(5 * time.Second)},
	})
	x := f.refreshed(t)

	all := listAll(t, x, dlq.Filter{}, 2)
	if want := newestFirst(f.scanned(t, dlq.Filter{})); !reflect.DeepEqual(all, want) {
		t.Fatalf("List holds %d items, Scan %d; first difference at %d", len(all), len(want), firstDifference(all, want))
	}
	byOffset := map[int64]dlqindex.Item{}
	for _, it := range all {
		byOffset[it.Offset] = it
	}
	if it := byOffset[0]; it.Key == nil || *it.Key != escapes || it.KeyBinary {
		t.Errorf("the key with control characters came back as %+v", it.Key)
	}
	if it := byOffset[1]; it.Key == nil || *it.Key != "wygA" || !it.KeyBinary {
		t.Errorf("the key that is not UTF-8 came back as %v (binary %v), want its base64 wygA", it.Key, it.KeyBinary)
	}
	if it := byOffset[3]; len(it.Error) > dlq.MaxErrorBytes || !strings.HasSuffix(it.Error, "… (truncated)") {
		t.Errorf("an error of %d bytes is kept at %d bytes, want it cut to dlq.MaxErrorBytes", dlq.MaxErrorBytes*2+8, len(it.Error))
	}
	if byOffset[4].Corrupt == "" || byOffset[5].Corrupt == "" {
		t.Errorf("records that are not envelopes were read as %+v and %+v", byOffset[4], byOffset[5])
	}

	entries := f.scanned(t, dlq.Filter{})
	for name, filter := range map[string]dlq.Filter{
		"control characters in the key":   {Key: escapes},
		"control characters in the error": {ErrorContains: "\x1b]0;PWNED\x07"},
		"a NUL":                           {ErrorContains: "\x00"},
		"the key's base64 is no key":      {Key: "wygA"},
		"invalid UTF-8":                   {ErrorContains: "\xff"},
		"an empty range":                  {FromOffset: 5, UntilOffset: 2},
		"since after until":               {Since: at.Add(time.Hour), Until: at},
	} {
		var kept []dlq.Entry
		for _, e := range entries {
			if filter.Match(e) {
				kept = append(kept, e)
			}
		}
		if got := x.Summary(filter); !reflect.DeepEqual(got, summaryOf(kept)) {
			t.Errorf("%s: Summary\n got %+v\nwant %+v", name, got, summaryOf(kept))
		}
	}
}

func TestListTakesAnyLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, 1)
	f.produce(t, newCorpus(1).next(t, dlqindex.MaxLimit+dlqindex.DefaultLimit))
	x := f.refreshed(t)
	for limit, want := range map[int]int{-5: dlqindex.DefaultLimit, 0: dlqindex.DefaultLimit, 3: 3, 1 << 40: dlqindex.MaxLimit} {
		if items, next := x.List(dlq.Filter{}, dlqindex.Cursor{}, limit); len(items) != want || next.IsZero() {
			t.Errorf("List with limit %d gave %d items (next %q), want %d and a next page", limit, len(items), next, want)
		}
	}
}

func TestParseCursorRefusesWhatNoPageGave(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"x", "1.2", "1.2.3.4", "a.b.c", "1.-1.3", "1.2.-3", "1.99999999999.3", "1..3",
		"\x1b[31m1.2.3", strings.Repeat("9", 1000), "1.2.3\n"} {
		c, err := dlqindex.ParseCursor(s)
		if err == nil {
			t.Errorf("ParseCursor(%q) = %v, want an error", s, c)
			continue
		}
		if strings.ContainsFunc(err.Error(), func(r rune) bool { return r < 0x20 || r == 0x7f }) || len(err.Error()) > 200 {
			t.Errorf("ParseCursor(%q): the error %q holds a control character or is long", s, err)
		}
	}
}

func FuzzParseCursor(f *testing.F) {
	for _, s := range []string{"", "1737021598120.3.1842", "-9223372036854775808.0.0", "+1.0.0", "a.b.c", "1.2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := dlqindex.ParseCursor(s)
		if err != nil {
			return
		}
		if back, err := dlqindex.ParseCursor(c.String()); err != nil || back != c {
			t.Errorf("ParseCursor(%q) = %v, whose String %q reads back as %v, %v", s, c, c.String(), back, err)
		}
	})
}
