package testkit

import (
	"log/slog"
	"strings"
	"testing"
)

// Logger returns a logger that writes warnings and errors to tb's log, so a
// failing test shows what the code under test complained about. Records
// whose text contains one of skip are dropped (after formatting, as a
// service would format them): a benchmark that expects a flood of one log
// line names it there.
func Logger(tb testing.TB, skip ...string) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{tb, skip}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type logWriter struct {
	tb   testing.TB
	skip []string
}

func (w logWriter) Write(p []byte) (int, error) {
	line := string(p)
	for _, s := range w.skip {
		if strings.Contains(line, s) {
			return len(p), nil
		}
	}
	w.tb.Log(strings.TrimSuffix(line, "\n"))
	return len(p), nil
}
