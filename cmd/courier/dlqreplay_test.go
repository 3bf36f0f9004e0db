package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/dlq"
)

func TestReplayProgressDrawsABarOnATerminal(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	p := &progress{w: &out, tty: true}
	p.update(dlq.ReplayReport{Total: 100, Read: 50, Moved: 40, Elapsed: 2 * time.Second})
	got := out.String()
	if !strings.HasPrefix(got, "\r\033[K["+strings.Repeat("=", 15)+strings.Repeat(" ", 15)+"] 50/100 read, 40 moved") || !strings.Contains(got, "ETA 2s") {
		t.Fatalf("bar = %q", got)
	}
	p.clear()
	if !strings.HasSuffix(out.String(), "\r\033[K") || p.drawn {
		t.Fatalf("clear left %q", out.String())
	}
}

func TestReplayProgressWritesPlainLinesElsewhere(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	p := &progress{w: &out}
	p.update(dlq.ReplayReport{Total: 10, Read: 10, Moved: 10})
	p.update(dlq.ReplayReport{Total: 10, Read: 10, Moved: 10}) // within plainEvery: no second line
	if got := out.String(); got != "replay: 10/10 read, 10 moved, 0 already replayed, 0 left out, 0 refused, 0 corrupt, 0 skipped, ETA 0s\n" {
		t.Fatalf("plain progress = %q", got)
	}
}

// TestReplayDryRunSaysWouldMove: a dry run's summary and progress say
// "would move", never "moved", since nothing was written.
func TestReplayDryRunSaysWouldMove(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	report := dlq.ReplayReport{DryRun: true, Total: 3, Read: 3, Moved: 3}
	if err := printReplaySummary(&out, dlq.ReplayConfig{Topic: "orders.dlq"}, report); err != nil {
		t.Fatal(err)
	}
	p := &progress{w: &out}
	p.update(report)
	if got := out.String(); strings.Contains(got, "moved") || strings.Count(got, "would move") != 3 {
		t.Errorf("dry-run summary and progress:\n%s\nwant \"would move\" three times and no \"moved\"", got)
	}
}

// TestReplayLineSaysTheKindOnce: an error that starts with its kind
// (consumer.Permanent's "permanent: …") is printed with the kind once.
func TestReplayLineSaysTheKindOnce(t *testing.T) {
	t.Parallel()
	key := "order-1"
	env := dlq.Envelope{OriginalTopic: "orders", ErrorKind: dlq.KindPermanent, Error: "permanent: invalid amount -5", OriginalKey: &key}
	line := replayLine("orders.dlq", dlq.ReplayedRecord{Entry: dlq.Entry{Envelope: env}, Action: dlq.ActionMoved, To: "orders"})
	if strings.Contains(line, "permanent: permanent:") || !strings.Contains(line, "permanent: invalid amount -5") {
		t.Errorf("replay line %q, want the kind said once before the error", line)
	}
}
