package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel"

	"github.com/courierkit/courier/internal/redact"
	"github.com/courierkit/courier/internal/textcut"
)

// otlpSecrets returns what must never be printed of where spans go and
// with which credentials: the secrets of each endpoint given and of the
// OTEL_EXPORTER_OTLP_*ENDPOINT variables (endpointSecrets; the exporter
// parses them all, even one the flag overrides, and logs one it cannot
// parse whole), and every value of the OTEL_EXPORTER_OTLP_*HEADERS
// variables as written (percent-encoded) and as sent, each in the forms a
// collector may echo it (redact.HeaderSecrets).
func otlpSecrets(endpoints ...string) []string {
	var out []string
	for _, name := range otlpEndpointEnv {
		out = append(out, endpointSecrets(os.Getenv(name))...)
	}
	for _, endpoint := range endpoints {
		out = append(out, endpointSecrets(endpoint)...)
	}
	for _, name := range otlpHeadersEnv {
		for pair := range strings.SplitSeq(os.Getenv(name), ",") {
			_, value, ok := strings.Cut(pair, "=")
			if !ok { // not name=value: "Name: value", or a bare token
				if _, after, colon := strings.Cut(pair, ":"); colon {
					value = after
				} else {
					value = pair
				}
			}
			out = append(out, redact.HeaderSecrets(value)...)
			if decoded, err := url.PathUnescape(value); err == nil {
				out = append(out, redact.HeaderSecrets(decoded)...)
			}
		}
	}
	return out
}

// endpointSecrets returns the secrets of an endpoint URL: redact.Secrets's
// (its password, password-like query values) and its user when it has no
// password (a token, as in http://<token>@collector), found in the text,
// so in a URL that does not parse too.
func endpointSecrets(endpoint string) []string {
	out := redact.Secrets(endpoint)
	rest := endpoint
	if _, after, ok := strings.Cut(endpoint, "://"); ok {
		rest = after
	}
	if user, _, ok := strings.Cut(rest, "@"); ok && len(user) >= 3 && !strings.ContainsAny(user, ":/?#") {
		out = append(out, user)
		if decoded, err := url.PathUnescape(user); err == nil {
			out = append(out, decoded)
		}
	}
	return out
}

// logTextLimit bounds each text courier logs for OpenTelemetry: an
// export's error quotes the collector's answer whole (up to 4 MiB).
const logTextLimit = 512

// logText is s as courier logs it for OpenTelemetry: its secrets masked,
// on one line (tabs and line breaks as spaces), every other rune a
// terminal may act on (a control character, a bidi override) as U+FFFD,
// so that no escape of a collector's answer reaches the log raw whatever
// the handler does, and cut to logTextLimit bytes.
func logText(s string, secrets []string) string {
	return textcut.Line(redact.String(s, secrets), logTextLimit, func(r rune) bool { return !strconv.IsPrint(r) })
}

// exportLog is where a command that traces logs what OpenTelemetry
// reports, masked with its secrets (logText): failed exports (a collector
// that cannot be reached, or refuses the credentials), at most one a
// minute, and the SDK's own log lines (otelLogSink). The spans are lost;
// the work goes on.
type exportLog struct {
	log     *slog.Logger
	secrets []string
	last    atomic.Int64 // unix nanoseconds of the last error logged
}

// exportLogs are the commands tracing in this process. OpenTelemetry's
// error handler and logger are global: each is installed once, and logs
// through every one of them, masked with all their secrets, since neither
// says whose exporter it speaks of.
var exportLogs struct {
	once sync.Once
	mu   sync.Mutex
	logs map[*exportLog]bool
}

// registerExportLog adds l to exportLogs until unregister is called.
func registerExportLog(l *exportLog) (unregister func()) {
	exportLogs.once.Do(func() {
		otel.SetErrorHandler(otel.ErrorHandlerFunc(handleExportError))
		otel.SetLogger(logr.New(otelLogSink{}))
	})
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

// registeredExportLogs returns the exportLogs registered and all their
// secrets.
func registeredExportLogs() ([]*exportLog, []string) {
	exportLogs.mu.Lock()
	defer exportLogs.mu.Unlock()
	var secrets []string
	logs := make([]*exportLog, 0, len(exportLogs.logs))
	for l := range exportLogs.logs {
		secrets = append(secrets, l.secrets...)
		logs = append(logs, l)
	}
	return logs, secrets
}

// handleExportError logs err through each registered exportLog that has
// not logged one in the last minute.
func handleExportError(err error) {
	if err == nil {
		return
	}
	logs, secrets := registeredExportLogs()
	now := time.Now().UnixNano()
	due := logs[:0]
	for _, l := range logs {
		if last := l.last.Load(); now-last >= int64(time.Minute) && l.last.CompareAndSwap(last, now) {
			due = append(due, l)
		}
	}
	if len(due) == 0 {
		return
	}
	// Masked once due: the text may hold megabytes of the collector's answer.
	text := logText(err.Error(), secrets)
	for _, l := range due {
		l.log.Warn("cannot export spans; they are dropped (logged at most once a minute)", "error", text)
	}
}

// otelLogSink is OpenTelemetry's logger (otel.SetLogger), which the SDK
// and the exporter log through: a value of the environment they cannot
// parse, say (the SDK's default logger prints it whole on stderr). Each
// line goes to every registered exportLog, as component=opentelemetry, its
// message and values masked and cut (logText). V-levels become slog levels
// as logr's own slog bridge maps them, V(n) to slog.Level(-n): the SDK's
// errors are errors, its warnings (V(1)) and notes (V(4)) are shown at
// --log-level debug, its debug lines (V(8)) never.
type otelLogSink struct {
	name   string
	values []any // from WithValues
}

// Init does nothing: lines carry no caller.
func (otelLogSink) Init(logr.RuntimeInfo) {}

// Enabled reports whether a registered log shows lines of V-level level.
func (otelLogSink) Enabled(level int) bool {
	logs, _ := registeredExportLogs()
	return slices.ContainsFunc(logs, func(l *exportLog) bool { return l.log.Enabled(context.Background(), slog.Level(-level)) })
}

// Info logs a line of V-level level.
func (s otelLogSink) Info(level int, msg string, keysAndValues ...any) {
	s.log(slog.Level(-level), msg, keysAndValues)
}

// Error logs err as an error.
func (s otelLogSink) Error(err error, msg string, keysAndValues ...any) {
	s.log(slog.LevelError, msg, append([]any{"error", err}, keysAndValues...))
}

// WithValues returns the sink with keysAndValues added to its lines.
func (s otelLogSink) WithValues(keysAndValues ...any) logr.LogSink {
	s.values = append(slices.Clip(s.values), keysAndValues...)
	return s
}

// WithName returns the sink with name added to its logger's name.
func (s otelLogSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	s.name = name
	return s
}

// log logs msg with the sink's values and keysAndValues, each as text,
// masked and cut, through every registered exportLog.
func (s otelLogSink) log(level slog.Level, msg string, keysAndValues []any) {
	logs, secrets := registeredExportLogs()
	attrs := []any{"component", "opentelemetry"}
	if s.name != "" {
		attrs = append(attrs, "logger", logText(s.name, secrets))
	}
	kvs := append(slices.Clip(s.values), keysAndValues...)
	for i := 0; i < len(kvs); i += 2 {
		var value any = "(missing)"
		if i+1 < len(kvs) {
			value = kvs[i+1]
		}
		if m, ok := value.(logr.Marshaler); ok {
			value = m.MarshalLog()
		}
		attrs = append(attrs, logText(fmt.Sprint(kvs[i]), secrets), logText(fmt.Sprint(value), secrets))
	}
	msg = logText(msg, secrets)
	for _, l := range logs {
		l.log.Log(context.Background(), level, msg, attrs...)
	}
}
