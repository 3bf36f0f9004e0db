package bench

import (
	"context"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// tracer returns a TracerProvider as a service that traces everything
// would configure, sampling every span and exporting it in batches, except
// that its exporter drops the spans: what tracing costs the relay, not
// what a collector does. The run shuts it down.
func (s *relayServices) tracer() trace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardSpans{}))
	s.closers = append(s.closers, func() error { return tp.Shutdown(context.Background()) })
	return tp
}

// discardSpans is a span exporter that drops what it is given.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }
