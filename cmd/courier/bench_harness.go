package main

import (
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/courierkit/courier/cmd/courier/internal/bench"
)

// harnessFlags are the flags of a bench subcommand that runs one harness
// against Kafka: --output and --brokers.
type harnessFlags struct {
	format  string
	brokers string
}

// register registers --output, defaulting to defaultFormat, and --brokers.
func (h *harnessFlags) register(fs *pflag.FlagSet, defaultFormat string) {
	fs.StringVarP(&h.format, "output", "o", envOr("COURIER_OUTPUT", defaultFormat), "output format: markdown, text or json (env COURIER_OUTPUT)")
	fs.StringVar(&h.brokers, "brokers", envOr("COURIER_BROKERS", ""),
		"Kafka bootstrap addresses, comma-separated (env COURIER_BROKERS); empty: an in-process broker")
}

// checkOutput refuses an --output other than markdown, text or json.
func checkOutput(format string) error {
	switch format {
	case "markdown", "text", "json":
		return nil
	}
	return usageError{fmt.Errorf("--output %q: use markdown, text or json", format)}
}

// durationFlag is a duration flag's name and value, for checkPositive.
type durationFlag struct {
	name  string
	value time.Duration
}

// checkPositive refuses a duration flag of no length or less; example is
// a duration to suggest.
func checkPositive(example string, flags ...durationFlag) error {
	for _, d := range flags {
		if d.value <= 0 {
			return usageError{fmt.Errorf("--%s %v: use a positive duration, e.g. %s", d.name, d.value, example)}
		}
	}
	return nil
}

// startHarness begins a bench subcommand that runs one harness against
// Kafka: the report's header, the broker (in-process unless brokers names
// a cluster; the caller closes it) and a logger of warnings to stderr.
func startHarness(cmd *cobra.Command, brokers string) (bench.Report, *benchKafka, *slog.Logger, error) {
	report := bench.Report{Date: time.Now(), Command: commandLine(cmd), Machine: bench.ThisMachine()}
	kafka, err := startBenchKafka(brokers)
	if err != nil {
		return report, nil, nil, err
	}
	report.Services.Kafka = kafka.name
	return report, kafka, slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn})), nil
}

// writeHarness prints the report of one harness: Markdown is the whole
// report; text and json are the harness's alone (text writes it, data is
// what json encodes), as the bench subcommands print theirs.
func writeHarness(cmd *cobra.Command, format string, report bench.Report, text func(io.Writer) error, data any) error {
	w := cmd.OutOrStdout()
	switch format {
	case "json":
		return writeJSON(w, data)
	case "text":
		return text(w)
	}
	return report.WriteMarkdown(w)
}
