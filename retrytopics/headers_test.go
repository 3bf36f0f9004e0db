package retrytopics_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/record"
	"github.com/courierkit/courier/retrytopics"
)

func ptrs(hs []record.Header) []*record.Header {
	out := make([]*record.Header, len(hs))
	for i := range hs {
		out[i] = &hs[i]
	}
	return out
}

func TestHeadersRoundTrip(t *testing.T) {
	now := time.UnixMilli(time.Now().UnixMilli())
	info := retrytopics.Info{
		Round: 2, FailedAttempts: 6, OriginalTopic: "orders", OriginalPartition: 3, OriginalOffset: 1842,
		OriginalTimestamp: now.Add(-time.Minute), NotBefore: now.Add(time.Minute), FirstFailedAt: now.Add(-time.Second),
		LastError: "psp timeout", ConsumerGroup: "payouts",
	}
	original := []*record.Header{
		{Key: []byte("ce_id"), Value: []byte("id-1")},
		{Key: []byte(retrytopics.HeaderAttempt), Value: []byte("1")}, // from the tier before: replaced
		{Key: []byte("retry_policy"), Value: []byte("the application's own")},
		nil,
		{Key: []byte("bin"), Value: []byte{0xff}},
	}
	hs := retrytopics.Headers(original, info)
	var names []string
	for _, h := range hs {
		names = append(names, string(h.Key))
	}
	if got := strings.Join(names[:3], ","); got != "ce_id,retry_policy,bin" {
		t.Errorf("headers start %q, want the original ones without the old retry header", got)
	}
	if strings.Count(strings.Join(names, ","), retrytopics.HeaderAttempt) != 1 {
		t.Errorf("headers %q: retry_attempt appears more than once", names)
	}
	got, found, err := retrytopics.Parse(ptrs(hs))
	if err != nil || !found {
		t.Fatalf("Parse: %v, %t", err, found)
	}
	if !got.NotBefore.Equal(info.NotBefore) || !got.FirstFailedAt.Equal(info.FirstFailedAt) || !got.OriginalTimestamp.Equal(info.OriginalTimestamp) {
		t.Errorf("times %v %v %v, want %v %v %v", got.NotBefore, got.FirstFailedAt, got.OriginalTimestamp, info.NotBefore, info.FirstFailedAt, info.OriginalTimestamp)
	}
	got.NotBefore, got.FirstFailedAt, got.OriginalTimestamp = info.NotBefore, info.FirstFailedAt, info.OriginalTimestamp
	if got != info {
		t.Errorf("Parse = %+v, want %+v", got, info)
	}
	stripped := retrytopics.Strip(ptrs(hs))
	if len(stripped) != 3 || string(stripped[1].Key) != "retry_policy" {
		t.Errorf("Strip kept %d headers, want the three original ones", len(stripped))
	}
}

func TestHeadersCapTheLastError(t *testing.T) {
	hs := retrytopics.Headers(nil, retrytopics.Info{Round: 1, OriginalTopic: "o", NotBefore: time.Now(), LastError: strings.Repeat("x", 10_000)})
	for _, h := range hs {
		if string(h.Key) == retrytopics.HeaderLastError && len(h.Value) > dlq.MaxHeaderValueBytes {
			t.Errorf("retry_last_error is %d bytes, want at most %d", len(h.Value), dlq.MaxHeaderValueBytes)
		}
	}
}

func TestParse(t *testing.T) {
	valid := func() []*record.Header {
		return ptrs(retrytopics.Headers(nil, retrytopics.Info{Round: 1, OriginalTopic: "orders", NotBefore: time.Now()}))
	}
	if _, found, err := retrytopics.Parse([]*record.Header{{Key: []byte("ce_id"), Value: []byte("x")}}); found || err != nil {
		t.Errorf("Parse of a plain record: found %t, %v", found, err)
	}
	set := func(name, value string) []*record.Header {
		hs := valid()
		for _, h := range hs {
			if string(h.Key) == name {
				h.Value = []byte(value)
			}
		}
		return hs
	}
	drop := func(name string) []*record.Header {
		var out []*record.Header
		for _, h := range valid() {
			if string(h.Key) != name {
				out = append(out, h)
			}
		}
		return out
	}
	for name, hs := range map[string][]*record.Header{
		retrytopics.HeaderNotBefore:         set(retrytopics.HeaderNotBefore, "tomorrow"),
		retrytopics.HeaderAttempt:           set(retrytopics.HeaderAttempt, "-1"),
		retrytopics.HeaderOriginalPartition: set(retrytopics.HeaderOriginalPartition, "99999999999"),
		retrytopics.HeaderOriginalTopic:     drop(retrytopics.HeaderOriginalTopic),
		retrytopics.HeaderOriginalOffset:    drop(retrytopics.HeaderOriginalOffset),
	} {
		_, found, err := retrytopics.Parse(hs)
		var he *retrytopics.HeaderError
		if !found || !errors.Is(err, retrytopics.ErrMalformedHeaders) || !errors.As(err, &he) || he.Header != name {
			t.Errorf("%s: found %t, error %v; want a HeaderError naming it", name, found, err)
		}
	}
}
