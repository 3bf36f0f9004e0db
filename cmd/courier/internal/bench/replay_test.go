package bench

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/courierkit/courier/internal/testkit"
)

// TestReplayReportsBothConfigurations: on a few hundred dead letters, one
// round, the report holds the copy loop and courier's replay, each with a
// rate, the replay's ratio to the loop and its target, and the Markdown
// table shows both; every copy left its target topic with each record
// once.
func TestReplayReportsBothConfigurations(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	report, err := Replay(ctx, ReplayConfig{Brokers: k.Brokers, DeadLetters: 300, Name: testkit.UniqueName(t, 30)})
	if err != nil {
		t.Fatal(err)
	}
	if report.DeadLetters != 300 || report.Rounds != 1 || report.Partitions != partitions || len(report.Results) != 2 {
		t.Fatalf("report %+v, want 2 configurations over 300 dead letters, 1 round", report)
	}
	for i, want := range []string{RawCopyLoop, ReplayDefaults} {
		res := report.Results[i]
		if res.Name != want || res.Rate <= 0 || res.Baseline != RawCopyLoop || res.Ratio <= 0 {
			t.Errorf("result %d: %+v, want %s with a rate and a ratio to %s", i, res, want, RawCopyLoop)
		}
		if c := res.CPU; runtime.GOOS == "linux" && (c == nil && report.CPUUnknown == "" || c != nil && c.ProcessMicrosPerMessage <= 0) {
			t.Errorf("%s: CPU %+v (unknown: %q), want the process's CPU per message", res.Name, c, report.CPUUnknown)
		}
	}
	if r := report.Results[1]; r.Target != replayTarget || r.Ratio != r.Rate/report.Results[0].Rate {
		t.Errorf("%s: ratio %v, target %v; want its rate over the loop's and the goal's %v", r.Name, r.Ratio, r.Target, replayTarget)
	}
	var md strings.Builder
	report.writeMarkdown(&md)
	for _, want := range []string{"## DLQ replay\n", "| `" + RawCopyLoop + "` | ", "| `" + ReplayDefaults + "` | ", " | 0.80× ("} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the Markdown lacks %q:\n%s", want, md.String())
		}
	}
	var text bytes.Buffer
	if err := report.WriteText(&text); err != nil || !strings.Contains(text.String(), ReplayDefaults) || !strings.Contains(text.String(), "target 0.80x") {
		t.Errorf("text %v:\n%s", err, text.String())
	}
}

// TestReplayFailsACopyThatLosesRecords: a configuration that writes one
// record fewer than it was given fails the run, naming the count its
// target topic holds; so does one that writes one twice.
func TestReplayFailsACopyThatLosesRecords(t *testing.T) {
	t.Parallel()
	k := testkit.NewKafka(t, testkit.InProcess())
	for name, change := range map[string]func(msgs []*sarama.ProducerMessage) []*sarama.ProducerMessage{
		"lost": func(msgs []*sarama.ProducerMessage) []*sarama.ProducerMessage { return msgs[1:] },
		"doubled": func(msgs []*sarama.ProducerMessage) []*sarama.ProducerMessage {
			again := *msgs[0]
			return append(msgs, &again)
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			run, err := NewReplayRun(ReplayConfig{Brokers: k.Brokers, DeadLetters: 50, Name: testkit.UniqueName(t, 30)})
			if err != nil {
				t.Fatal(err)
			}
			// A copy that reads every dead letter and writes what change
			// leaves of their originals.
			run.cases[1].copy = func(_ context.Context, cfg *ReplayConfig, dl *deadLetters) error {
				var msgs []*sarama.ProducerMessage
				for _, m := range k.ReadAll(t, dl.dlq) {
					msgs = append(msgs, &sarama.ProducerMessage{Topic: dl.target, Key: sarama.ByteEncoder(m.Key), Value: sarama.ByteEncoder(m.Value)})
				}
				sp, err := sarama.NewSyncProducer(dl.brokers, cfg.Sarama())
				if err != nil {
					return err
				}
				defer sp.Close()
				return sp.SendMessages(change(msgs))
			}
			want := "holds 49 records, want the 50 dead letters, each once"
			if name == "doubled" {
				want = "holds 51 records, want the 50 dead letters, each once"
			}
			if err := run.Round(context.Background()); err == nil || !strings.Contains(err.Error(), ReplayDefaults+": ") || !strings.Contains(err.Error(), want) {
				t.Fatalf("Round: %v; want %s to fail with %q", err, ReplayDefaults, want)
			}
		})
	}
}
