package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/net/http/httpguts"

	"github.com/courierkit/courier/internal/redact"
)

// traceFlags turn on OpenTelemetry spans, exported over OTLP/HTTP.
type traceFlags struct {
	endpoint string // --otlp-endpoint
}

// The standard OpenTelemetry variables that turn tracing on without
// --otlp-endpoint: the exporter reads them (and OTEL_EXPORTER_OTLP_HEADERS,
// _TIMEOUT, _CERTIFICATE, …) itself.
var otlpEndpointEnv = []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"}

const (
	// traceShutdownTimeout is the most the export of the last spans takes
	// at exit.
	traceShutdownTimeout = 5 * time.Second
	// traceShutdownGrace is how long before the end of the shutdown
	// budget the last exports are cut, so that the SDK has returned by
	// then.
	traceShutdownGrace = 250 * time.Millisecond
	// traceExportTimeout bounds one export of spans, its retries included,
	// whatever OTEL_EXPORTER_OTLP_TIMEOUT and OTEL_BSP_EXPORT_TIMEOUT say
	// (they may shorten it) and the exporter's retries (a minute by
	// default) would take: a collector that never answers holds the
	// exporter that long, never the work.
	traceExportTimeout = 10 * time.Second
)

func (f *traceFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.endpoint, "otlp-endpoint", "", "export OpenTelemetry spans over OTLP/HTTP to this collector, e.g. http://otel-collector:4318 "+
		"(to its /v1/traces unless the URL has a path; empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT when set, else no spans)")
	bindEnv(fs, "otlp-endpoint")
}

// otlpHeadersEnv are the standard variables that give the exporter's
// headers: comma-separated name=value pairs (an auth token, say), each
// value percent-encoded.
var otlpHeadersEnv = []string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"}

// validate checks where spans would go: --otlp-endpoint, or the
// OTEL_EXPORTER_OTLP_* endpoint it falls back to, must be an http or https
// URL with a host; the OTEL_EXPORTER_OTLP_*HEADERS variables must hold
// headers the exporter can send (checkOTLPHeaders). Errors name the flag
// or variable and the header names, never a value or a password.
func (f *traceFlags) validate() error {
	endpoint := f.endpointURL()
	if endpoint == "" {
		return nil
	}
	from := "--otlp-endpoint"
	if f.endpoint == "" {
		from = f.endpointEnv()
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Errorf("%s %q: want an http or https URL with a host, e.g. http://otel-collector:4318", from, redact.String(endpoint, otlpSecrets(f.endpoint)))}
	}
	for _, name := range otlpHeadersEnv {
		if err := checkOTLPHeaders(name, os.Getenv(name)); err != nil {
			return usageError{err}
		}
	}
	return nil
}

// checkOTLPHeaders refuses what the exporter would drop, logging it, or
// could never send of the variable name's headers (value): a pair that is
// not name=value, a name that is not an HTTP header name, a value that is
// not percent-encoded right or that holds a control character once
// decoded. Its errors name the variable and the header, never a value.
func checkOTLPHeaders(name, value string) error {
	for pair := range strings.SplitSeq(value, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		header, v, ok := strings.Cut(pair, "=")
		header = strings.TrimSpace(header)
		if !ok || header == "" {
			label := "a header" // the pair may be a bare token
			if before, _, colon := strings.Cut(pair, ":"); colon {
				label = headerLabel(before)
			}
			return fmt.Errorf("%s: %s is not name=value (e.g. Authorization=Bearer%%20<token>, percent-encoded)", name, label)
		}
		if !httpguts.ValidHeaderFieldName(header) {
			return fmt.Errorf("%s: a header's name holds a character HTTP does not allow in one; use letters, digits and !#$%%&'*+-.^_`|~, e.g. Authorization", name)
		}
		decoded, err := url.PathUnescape(v)
		if err != nil {
			return fmt.Errorf("%s: the value of %s is not percent-encoded right (a %% not followed by two hex digits); write a %% as %%25", name, headerLabel(header))
		}
		if !httpguts.ValidHeaderFieldValue(strings.TrimSpace(decoded)) {
			return fmt.Errorf("%s: the value of %s holds a control character once percent-decoded (such as %%0A), which an HTTP header cannot carry; remove it", name, headerLabel(header))
		}
	}
	return nil
}

// headerLabel names a header for an error: the header "name" when name
// (trimmed) is an HTTP header name of at most 64 bytes, else "a header",
// since the text may be a token.
func headerLabel(name string) string {
	name = strings.TrimSpace(name)
	if len(name) > 64 || !httpguts.ValidHeaderFieldName(name) {
		return "a header"
	}
	return "the header " + strconv.Quote(name)
}

// endpointText says where spans go, for the start log, without a
// password or a lone user: "off" when tracing is off.
func (f *traceFlags) endpointText() string {
	if u := f.endpointURL(); u != "" {
		return redact.String(u, otlpSecrets(f.endpoint))
	}
	return "off"
}

// provider returns the TracerProvider the flags and the environment ask
// for, named service (unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
// say otherwise), and stop, which exports the last spans and stops it; nil
// and a no-op when tracing is off. Each export takes at most
// traceExportTimeout. The last spans get traceShutdownTimeout at most,
// and no more than what is left of budget since ctx ended (SIGINT or
// SIGTERM), if it did: those not exported by then are dropped, and a line
// says how many. What OpenTelemetry reports goes to log, masked
// (exportLog).
func (f *traceFlags) provider(ctx context.Context, service string, log *slog.Logger, budget time.Duration) (trace.TracerProvider, func(), error) {
	if f.endpointURL() == "" {
		return nil, func() {}, nil
	}
	// Registered first: the exporter logs what it cannot parse of the
	// environment as it is made.
	logs := &exportLog{log: log, secrets: otlpSecrets(f.endpoint)}
	unregister := registerExportLog(logs)
	tp, exporter, err := f.newProvider(ctx, service)
	if err != nil {
		unregister()
		return nil, nil, err
	}
	var endedAt atomic.Int64 // unix nanoseconds
	watch := context.AfterFunc(ctx, func() { endedAt.Store(time.Now().UnixNano()) })
	return tp, func() {
		defer unregister()
		defer exporter.cut()
		watch()
		deadline := time.Now().Add(traceShutdownTimeout)
		if ctx.Err() != nil {
			ended := time.Now() // ctx has just ended, unless watch saw it earlier
			if ns := endedAt.Load(); ns != 0 {
				ended = time.Unix(0, ns)
			}
			if end := ended.Add(budget); end.Before(deadline) {
				deadline = end
			}
		}
		left := time.Until(deadline)
		cut := time.AfterFunc(left-traceShutdownGrace, exporter.cut)
		defer cut.Stop()
		shutdown, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
		defer cancel()
		before := exporter.dropped.Load()
		err := tp.Shutdown(shutdown)
		if dropped := exporter.dropped.Load() - before; dropped > 0 || err != nil {
			attrs := []any{"dropped_spans", dropped, "time_left", max(left, 0).Round(time.Millisecond).String()}
			if err != nil {
				attrs = append(attrs, "error", logText(err.Error(), logs.secrets))
			}
			log.Warn("the last spans could not be exported; they are dropped", attrs...)
		}
	}, nil
}

// newProvider makes the exporter of the flags and the TracerProvider that
// batches spans for it.
func (f *traceFlags) newProvider(ctx context.Context, service string) (*sdktrace.TracerProvider, *boundedExporter, error) {
	var opts []otlptracehttp.Option
	if f.endpoint != "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(tracesURL(f.endpoint)))
	}
	exporter, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("OTLP exporter: %w", err)}
	}
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service)), resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, nil, usageError{fmt.Errorf("OpenTelemetry resource (OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME): %w", err)}
	}
	end, cut := context.WithCancel(context.Background())
	bounded := &boundedExporter{SpanExporter: exporter, end: end, cut: cut}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(bounded), sdktrace.WithResource(res)), bounded, nil
}

// boundedExporter is the OTLP exporter with each export cut after
// traceExportTimeout, or when cut is called (at exit), whichever comes
// first. It counts the spans of the exports that failed.
type boundedExporter struct {
	sdktrace.SpanExporter
	end     context.Context // ended by cut
	cut     context.CancelFunc
	dropped atomic.Int64
}

// ExportSpans exports spans within the bounds.
func (e *boundedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	ctx, cancel := context.WithTimeout(ctx, traceExportTimeout)
	defer cancel()
	defer context.AfterFunc(e.end, cancel)()
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err != nil {
		e.dropped.Add(int64(len(spans)))
	}
	return err
}

// endpointURL is the collector's URL, from the flag or the environment;
// empty when tracing is off.
func (f *traceFlags) endpointURL() string {
	if f.endpoint != "" {
		return f.endpoint
	}
	if name := f.endpointEnv(); name != "" {
		return os.Getenv(name)
	}
	return ""
}

// endpointEnv names the variable that gives the collector's URL; empty
// when none does.
func (f *traceFlags) endpointEnv() string {
	for _, name := range otlpEndpointEnv {
		if os.Getenv(name) != "" {
			return name
		}
	}
	return ""
}

// tracesURL is the URL spans are sent to for --otlp-endpoint endpoint (a
// validated URL): the collector's /v1/traces when it names no path, as
// OTEL_EXPORTER_OTLP_ENDPOINT does, else endpoint as it is.
func tracesURL(endpoint string) string {
	u, _ := url.Parse(endpoint)
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String()
}
