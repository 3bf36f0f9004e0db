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
	HeaderTraceState  = "tracestate"
)

var traceContext propagation.TraceContext

// withTraceContext returns headers plus the W3C trace context of ctx, when
// ctx carries a sampled or unsampled span and headers do not already name a
// traceparent. The caller's map is never modified.
func withTraceContext(ctx context.Context, headers map[string]string) map[string]string {
	if _, set := headers[HeaderTraceParent]; set {
		return headers
	}
	carrier := propagation.MapCarrier{}
	traceContext.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return headers
	}
	out := make(map[string]string, len(headers)+len(carrier))
	maps.Copy(out, headers)
	maps.Copy(out, carrier)
	return out
}
