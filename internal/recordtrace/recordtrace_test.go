package recordtrace_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/internal/recordtrace"
	"github.com/courierkit/courier/record"
)

const (
	parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	other  = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
)

func h(k, v string) record.Header { return record.Header{Key: []byte(k), Value: []byte(v)} }

func show(hs []record.Header) []string {
	var out []string
	for _, x := range hs {
		out = append(out, string(x.Key)+"="+string(x.Value))
	}
	return out
}

// spanContext is a span context of trace ids, with state as its tracestate.
func spanContext(t *testing.T, state string) context.Context {
	t.Helper()
	ts, err := trace.ParseTraceState(state)
	if err != nil {
		t.Fatal(err)
	}
	tid, _ := trace.TraceIDFromHex("11111111111111111111111111111111")
	sid, _ := trace.SpanIDFromHex("2222222222222222")
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
	return trace.ContextWithSpanContext(context.Background(), sc)
}

const stamped = "00-11111111111111111111111111111111-2222222222222222-01"

func TestTracingStamp(t *testing.T) {
	for _, c := range []struct {
		name  string
		state string
		in    []record.Header
		want  []string
	}{
		{"replaced in place, later ones dropped", "", []record.Header{h("a", "1"), h("traceparent", parent), h("tracestate", "x=1"), h("b", "2"), h("traceparent", other)},
			[]string{"a=1", "traceparent=" + stamped, "b=2"}},
		{"appended", "k=v", []record.Header{h("a", "1")}, []string{"a=1", "tracestate=k=v", "traceparent=" + stamped}},
		{"tracestate replaced", "k=v", []record.Header{h("tracestate", "x=1"), h("traceparent", parent)},
			[]string{"tracestate=k=v", "traceparent=" + stamped}},
		{"no headers", "", nil, []string{"traceparent=" + stamped}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := show(c.in)
			got := recordtrace.Stamp(spanContext(t, c.state), c.in)
			if !slices.Equal(show(got), c.want) {
				t.Errorf("Stamp = %q, want %q", show(got), c.want)
			}
			if !slices.Equal(show(c.in), before) {
				t.Errorf("Stamp changed its argument to %q", show(c.in))
			}
		})
	}
	in := []record.Header{h("traceparent", parent)}
	if got := recordtrace.Stamp(context.Background(), in); !slices.Equal(show(got), show(in)) {
		t.Errorf("Stamp without a span = %q, want the headers as they were", show(got))
	}
}

func TestTracingSpanContext(t *testing.T) {
	for _, c := range []struct {
		name    string
		headers []record.Header
		want    string // the span id, "" for none
	}{
		{"one", []record.Header{h("traceparent", parent)}, "00f067aa0ba902b7"},
		{"the last counts", []record.Header{h("traceparent", other), h("traceparent", parent)}, "00f067aa0ba902b7"},
		{"malformed", []record.Header{h("traceparent", "00-zz-not-a-trace")}, ""},
		{"a malformed last one", []record.Header{h("traceparent", parent), h("traceparent", "\xff\x00")}, ""},
		{"case-sensitive name", []record.Header{h("Traceparent", parent)}, ""},
		{"none", nil, ""},
	} {
		sc := recordtrace.SpanContext(c.headers)
		got := ""
		if sc.IsValid() {
			got = sc.SpanID().String()
			if !sc.IsRemote() {
				t.Errorf("%s: not remote", c.name)
			}
		}
		if got != c.want {
			t.Errorf("%s: span %q, want %q", c.name, got, c.want)
		}
	}
}

type panicky struct{}

func (*panicky) Error() string { panic("boom") }

func TestTracingFail(t *testing.T) {
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	for _, err := range []error{fmt.Errorf("psp \xff down: %w", context.Canceled), (*panicky)(nil), &panicky{}} {
		_, span := tp.Tracer("test").Start(context.Background(), "op")
		recordtrace.Fail(span, err) // must not panic
		span.End()
	}
	spans := exporter.GetSpans()
	want := []struct{ status, typ string }{
		{"psp \uFFFD down: context canceled", "*fmt.wrapError"},
		{"<nil>", "*recordtrace_test.panicky"}, // as fmt prints a nil receiver that panics
		{"%!v(PANIC=Error method: boom)", "*recordtrace_test.panicky"},
	}
	if len(spans) != len(want) {
		t.Fatalf("%d spans, want %d", len(spans), len(want))
	}
	for i, s := range spans {
		if s.Status.Code != codes.Error || s.Status.Description != want[i].status || len(s.Events) != 1 || s.Events[0].Name != "exception" {
			t.Errorf("span %d: status %+v events %v, want error %q", i, s.Status, s.Events, want[i].status)
			continue
		}
		for _, kv := range s.Events[0].Attributes {
			if kv.Key == "exception.type" && kv.Value.AsString() != want[i].typ {
				t.Errorf("span %d: exception.type %q, want %q", i, kv.Value.AsString(), want[i].typ)
			}
		}
	}
}

// TestTracingText: an attribute value is valid UTF-8 and at most
// MaxTextBytes, cut on a rune boundary; a short valid one is kept as is.
func TestTracingText(t *testing.T) {
	if got := recordtrace.Text("order-42"); got != "order-42" {
		t.Errorf("Text(order-42) = %q", got)
	}
	if got := recordtrace.Text("a\xffb"); got != "a\uFFFDb" {
		t.Errorf("Text(a\\xffb) = %q, want the byte replaced", got)
	}
	huge := strings.Repeat("é", recordtrace.MaxTextBytes) // 2 bytes each
	got := recordtrace.Text(huge)
	if len(got) > recordtrace.MaxTextBytes || !utf8.ValidString(got) || len(got) < recordtrace.MaxTextBytes-1 {
		t.Errorf("Text of %d bytes gave %d bytes (valid %v), want at most %d, cut on a rune", len(huge), len(got), utf8.ValidString(got), recordtrace.MaxTextBytes)
	}
}
