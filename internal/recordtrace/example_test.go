package recordtrace_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/trace"

	"github.com/courierkit/courier/internal/recordtrace"
	"github.com/courierkit/courier/record"
)

// A record read with one trace context is written on with another: that of
// the span of the write.
func ExampleStamp() {
	read := []record.Header{
		{Key: []byte("ce_id"), Value: []byte("evt-1")},
		{Key: []byte("traceparent"), Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")},
	}
	producer := recordtrace.SpanContext(read)
	fmt.Println("read:", producer.TraceID(), producer.SpanID())

	send, _ := trace.SpanIDFromHex("b7ad6b7169203331") // the span of the write
	ctx := trace.ContextWithSpanContext(context.Background(), producer.WithSpanID(send))
	for _, h := range recordtrace.Stamp(ctx, read) {
		fmt.Printf("%s: %s\n", h.Key, h.Value)
	}
	// Output:
	// read: 4bf92f3577b34da6a3ce929d0e0e4736 00f067aa0ba902b7
	// ce_id: evt-1
	// traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01
}
