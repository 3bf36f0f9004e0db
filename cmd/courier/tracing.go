package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

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

// traceShutdownTimeout bounds the export of the last spans at exit.
const traceShutdownTimeout = 5 * time.Second

func (f *traceFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.endpoint, "otlp-endpoint", "", "export OpenTelemetry spans over OTLP/HTTP to this collector, e.g. http://otel-collector:4318 "+
		"(to its /v1/traces unless the URL has a path; empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT when set, else no spans)")
	bindEnv(fs, "otlp-endpoint")
}

// validate checks --otlp-endpoint: an http or https URL with a host.
func (f *traceFlags) validate() error {
	if f.endpoint == "" {
		return nil
	}
	u, err := url.Parse(f.endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Errorf("--otlp-endpoint %q: want an http or https URL with a host, e.g. http://otel-collector:4318", redactURL(f.endpoint))}
	}
	return nil
}

// endpointText says where spans go, for the start log, without a
// password: "off" when tracing is off.
func (f *traceFlags) endpointText() string {
	if u := f.endpointURL(); u != "" {
		return redactURL(u)
	}
	return "off"
}

// provider returns the TracerProvider the flags and the environment ask
// for, named service (unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
// say otherwise), and a function that exports the last spans and stops it;
// nil and a no-op when tracing is off. Failed exports are logged, each at
// most once a minute.
func (f *traceFlags) provider(ctx context.Context, service string, log *slog.Logger) (trace.TracerProvider, func(), error) {
	if f.endpointURL() == "" {
		return nil, func() {}, nil
	}
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
	otel.SetErrorHandler(&exportErrors{log: log, secrets: redact.Secrets(f.endpointURL())})
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return tp, func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("cannot export the last spans", "error", err)
		}
	}, nil
}

// exportErrors logs OpenTelemetry's errors (a collector that cannot be
// reached, say), at most one a minute, the endpoint's password masked: the
// spans are lost, the work goes on.
type exportErrors struct {
	log     *slog.Logger
	secrets []string
	last    atomic.Int64 // unix nanoseconds of the last error logged
}

func (h *exportErrors) Handle(err error) {
	now := time.Now().UnixNano()
	last := h.last.Load()
	if err == nil || now-last < int64(time.Minute) || !h.last.CompareAndSwap(last, now) {
		return
	}
	h.log.Warn("cannot export spans; they are dropped (logged at most once a minute)", "error", redact.String(err.Error(), h.secrets))
}

// endpointURL is the collector's URL, from the flag or the environment;
// empty when tracing is off.
func (f *traceFlags) endpointURL() string {
	if f.endpoint != "" {
		return f.endpoint
	}
	for _, name := range otlpEndpointEnv {
		if v := os.Getenv(name); v != "" {
			return v
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

// redactURL is raw with the password of its user info replaced, or a
// placeholder when it does not parse.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}
