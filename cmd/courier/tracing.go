package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
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

// otlpHeadersEnv are the standard variables that give the exporter's
// headers: comma-separated name=value pairs (an auth token, say).
var otlpHeadersEnv = []string{"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "OTEL_EXPORTER_OTLP_HEADERS"}

// validate checks where spans would go: --otlp-endpoint, or the
// OTEL_EXPORTER_OTLP_* endpoint it falls back to, must be an http or https
// URL with a host; the OTEL_EXPORTER_OTLP_*HEADERS variables must be
// name=value pairs. Errors name the flag or variable and the header names,
// never a value or a password.
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
		return usageError{fmt.Errorf("%s %q: want an http or https URL with a host, e.g. http://otel-collector:4318", from, redact.ConnString(endpoint))}
	}
	for _, name := range otlpHeadersEnv {
		for pair := range strings.SplitSeq(os.Getenv(name), ",") {
			if strings.TrimSpace(pair) == "" {
				continue
			}
			if header, _, ok := strings.Cut(pair, "="); !ok || strings.TrimSpace(header) == "" {
				return usageError{fmt.Errorf("%s: %s is not name=value (e.g. Authorization=Bearer%%20<token>, percent-encoded)", name, headerName(pair))}
			}
		}
	}
	return nil
}

// headerName names the header of a pair of OTEL_EXPORTER_OTLP_HEADERS
// that is not name=value, for an error: the text before its ':' when that
// is a header name, else no name at all, since the pair may be a bare
// token.
func headerName(pair string) string {
	name, _, ok := strings.Cut(pair, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || len(name) > 64 || strings.ContainsFunc(name, func(r rune) bool {
		return !(r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return "a header"
	}
	return "the header " + strconv.Quote(name)
}

// endpointText says where spans go, for the start log, without a
// password: "off" when tracing is off.
func (f *traceFlags) endpointText() string {
	if u := f.endpointURL(); u != "" {
		return redact.ConnString(u)
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
	logs := &exportLog{log: log, secrets: redact.Secrets(f.endpointURL())}
	unregister := registerExportLog(logs)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return tp, func() {
		defer unregister()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceShutdownTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("cannot export the last spans", "error", redact.String(err.Error(), logs.secrets))
		}
	}, nil
}

// exportLog is where a command that traces logs OpenTelemetry's errors
// (a collector that cannot be reached, say): at most one a minute, masked.
// The spans are lost; the work goes on.
type exportLog struct {
	log     *slog.Logger
	secrets []string
	last    atomic.Int64 // unix nanoseconds of the last error logged
}

// exportLogs are the commands tracing in this process. OpenTelemetry's
// error handler is global: one, installed once, logs each error through
// every one of them, masked with all their secrets, since an error does not
// say whose exporter it came from.
var exportLogs struct {
	once sync.Once
	mu   sync.Mutex
	logs map[*exportLog]bool
}

// registerExportLog adds l to exportLogs until unregister is called.
func registerExportLog(l *exportLog) (unregister func()) {
	exportLogs.once.Do(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(handleExportError)) })
	exportLogs.mu.Lock()
	defer exportLogs.mu.Unlock()
	if exportLogs.logs == nil {
		exportLogs.logs = map[*exportLog]bool{}
	}
	exportLogs.logs[l] = true
	return func() {
		exportLogs.mu.Lock()
		defer exportLogs.mu.Unlock()
		delete(exportLogs.logs, l)
	}
}

// handleExportError logs err through each registered exportLog that has
// not logged one in the last minute.
func handleExportError(err error) {
	if err == nil {
		return
	}
	exportLogs.mu.Lock()
	var secrets []string
	logs := make([]*exportLog, 0, len(exportLogs.logs))
	for l := range exportLogs.logs {
		secrets = append(secrets, l.secrets...)
		logs = append(logs, l)
	}
	exportLogs.mu.Unlock()
	text := redact.String(err.Error(), secrets)
	now := time.Now().UnixNano()
	for _, l := range logs {
		last := l.last.Load()
		if now-last < int64(time.Minute) || !l.last.CompareAndSwap(last, now) {
			continue
		}
		l.log.Warn("cannot export spans; they are dropped (logged at most once a minute)", "error", text)
	}
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
