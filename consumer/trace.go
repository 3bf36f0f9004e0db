package consumer

import "go.opentelemetry.io/otel/propagation"

// traceContext reads the W3C trace context (traceparent, tracestate) of a
// message, so the handler's context continues the producer's trace. A
// missing or malformed traceparent leaves the context without a remote
// span.
var traceContext propagation.TraceContext

// headerCarrier lets the propagator read a message's headers.
type headerCarrier Headers

func (h headerCarrier) Get(key string) string {
	v, _ := Headers(h).Lookup(key)
	return string(v)
}

// Set is never called: the consumer only extracts.
func (h headerCarrier) Set(string, string) {}

func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for _, hd := range h {
		if hd != nil {
			keys = append(keys, string(hd.Key))
		}
	}
	return keys
}
