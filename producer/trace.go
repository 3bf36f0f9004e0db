package producer

import (
	"context"
	"maps"

	"go.opentelemetry.io/otel/propagation"

	"github.com/courierkit/courier/internal/ceheader"
)

// Trace context headers (W3C Trace Context), captured at enqueue and
// published with the event.
const (
	HeaderTraceParent = ceheader.TraceParent // traceparent
	HeaderTraceState  = ceheader.TraceState  // tracestate
)

var traceContext propagation.TraceContext

// traceHeaders is the W3C trace context of ctx as headers, or nil when
// ctx carries no span.
func traceHeaders(ctx context.Context) map[string]string {
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return nil
	}
	return carrier
}

// withTrace returns headers plus trace (from traceHeaders), unless trace is
// empty or headers already name a traceparent. The caller's map is never
// modified.
func withTrace(headers, trace map[string]string) map[string]string {
	if len(trace) == 0 {
		return headers
	}
	if _, set := headers[HeaderTraceParent]; set {
		return headers
	}
	out := make(map[string]string, len(headers)+len(trace))
	maps.Copy(out, headers)
	maps.Copy(out, trace)
	return out
}
