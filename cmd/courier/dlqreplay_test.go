package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/dlq"
	"github.com/courierkit/courier/record"
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

// TestDLQReplayToGroup: --to-group writes each dead letter of a consumer
// group to the first retry tier of its topic, due now and naming the
// group, and skips a dead letter of the relay (no group) with the reason,
// exiting 1; the dry run and --output json name the tier as the target;
// --consumer-group and --error-kind select by the envelope's group and
// kind.
func TestDLQReplayToGroup(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t, 3)
	tier := f.topic + ".retry.5s"
	f.k.CreateTopic(t, tier, 3)
	f.deadLetters(t, 2, "psp timeout") // group payouts, partition 0, offsets 0 and 1
	pub, err := dlq.NewWriter(record.NewSyncPublisher(f.producer), dlq.WriterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := dlq.New(dlq.Original{Topic: f.topic, Partition: dlq.NoPartition, Offset: dlq.NoOffset, Key: []byte("order-r")},
		dlq.Failure{Error: "broker refused it", Kind: dlq.KindPermanent})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pub.Write(context.Background(), relay); err != nil {
		t.Fatal(err)
	}

	var list struct {
		DeadLetters []dlqEntryJSON `json:"dead_letters"`
	}
	for flag, want := range map[string]int{"--consumer-group=payouts": 2, "--error-kind=permanent": 1, "--consumer-group=ledger": 0} {
		code, out, errOut := courier(t, f.args("dlq", "list", f.dlqName, flag, "--output", "json")...)
		if err := json.Unmarshal([]byte(out), &list); err != nil || code != exitOK || len(list.DeadLetters) != want {
			t.Errorf("dlq list %s: exit %d, %v, %d dead letters, want %d\n%s\n%s", flag, code, err, len(list.DeadLetters), want, out, errOut)
		}
	}

	toGroup := []string{"dlq", "replay", f.dlqName, "--to-group", "--retry-delays", "5s,1m"}
	code, out, errOut := courier(t, f.args(append(toGroup, "--dry-run", "--output", "json")...)...)
	var dry struct {
		Report  replayReportJSON   `json:"report"`
		Records []replayRecordJSON `json:"records"`
	}
	if err := json.Unmarshal([]byte(out), &dry); err != nil || code != exitFailure || !dry.Report.ToGroup || dry.Report.Moved != 2 || dry.Report.Skipped != 1 {
		t.Fatalf("dry run --to-group: exit %d, %v, report %+v; want exit 1, 2 would move, 1 skipped\n%s\n%s", code, err, dry.Report, out, errOut)
	}
	for _, r := range dry.Records {
		switch r.Action {
		case dlq.ActionWouldMove:
			if r.To != tier || r.ToPartition == nil || *r.ToPartition != 0 || r.ConsumerGroup != "payouts" {
				t.Errorf("would move %+v, want to %s/0 for group payouts", r, tier)
			}
		case dlq.ActionSkipped:
			if r.ConsumerGroup != "" || !strings.Contains(r.Reason, "the relay dead-lettered it before it reached Kafka; replay it to its topic") {
				t.Errorf("skipped %+v, want the relay's dead letter with the reason", r)
			}
		default:
			t.Errorf("dry run reported %+v", r)
		}
	}
	if n := len(f.k.ReadAll(t, tier)); n != 0 {
		t.Fatalf("the dry run wrote %d records to %s", n, tier)
	}

	code, out, errOut = courier(t, f.args(toGroup...)...)
	if code != exitFailure || !strings.Contains(out, f.dlqName+" 0@0 → "+tier+" 0@0") || !strings.Contains(out, f.dlqName+" 0@1 → "+tier+" 0@1") ||
		!strings.Contains(out, "skipped     "+f.dlqName+" 0@2") || !strings.Contains(out, "moved 2 record(s) of "+f.dlqName+" to the first retry tier of the group that failed each") ||
		!strings.Contains(errOut, "1 record(s) of "+f.dlqName+" were skipped") || !strings.Contains(errOut, "without --to-group") {
		t.Fatalf("replay --to-group: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := len(f.k.ReadAll(t, f.topic)); n != 0 {
		t.Errorf("the original topic got %d records; --to-group writes to the tier only", n)
	}
	got := f.k.ReadAll(t, tier)
	if len(got) != 2 {
		t.Fatalf("%s holds %d records, want 2", tier, len(got))
	}
	for i, m := range got {
		want := map[string]string{"ce_id": fmt.Sprintf("evt-%d", i), "retry_attempt": "1", "retry_failed_attempts": "0", "retry_original_topic": f.topic,
			"retry_original_partition": "0", "retry_original_offset": fmt.Sprint(i), "retry_last_error": "psp timeout",
			"retry_consumer_group": "payouts", "replay_count": "1"}
		headers := map[string]string{}
		for _, h := range m.Headers {
			headers[string(h.Key)] = string(h.Value)
		}
		for k, v := range want {
			if headers[k] != v {
				t.Errorf("record %d: header %s=%q, want %q (headers %v)", i, k, headers[k], v, headers)
			}
		}
		if headers["retry_not_before"] == "" || string(m.Key) != fmt.Sprintf("order-%d", i) {
			t.Errorf("record %d: key %q, headers %v; want order-%d with retry_not_before", i, m.Key, headers, i)
		}
	}
}

func TestDLQReplayToGroupUsageErrors(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t, 1)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"with --to", []string{"--to-group", "--retry-delays", "5s", "--to", "orders"}, "--to-group and --to"},
		{"without delays", []string{"--to-group"}, "--to-group needs --retry-delays"},
		{"delays alone", []string{"--retry-delays", "5s"}, "--retry-delays and --retry-suffix go with --to-group"},
		{"suffix alone", []string{"--retry-suffix", ".again"}, "--retry-delays and --retry-suffix go with --to-group"},
		{"zero delay", []string{"--to-group", "--retry-delays", "5s,0s"}, "Delays[1] is 0s"},
		{"not a delay", []string{"--to-group", "--retry-delays", "soon"}, "retry-delays"},
		{"bad suffix", []string{"--to-group", "--retry-delays", "5s", "--retry-suffix", "+x"}, "Suffix"},
		{"unknown kind", []string{"--error-kind", "fatal"}, "--error-kind fatal: use retries_exhausted or permanent"},
		{"group with a control character", []string{"--consumer-group", "pay\x1b[2Jouts"}, "--consumer-group holds a control character"},
	} {
		code, _, errOut := courier(t, f.args(append([]string{"dlq", "replay", f.dlqName}, tc.args...)...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "\x1b") {
			t.Errorf("%s: exit %d (want %d)\n%s", tc.name, code, exitUsage, errOut)
		}
	}
}

// TestDLQReplayExpectsWhatItsDryRunShowed: a dry run prints its count and
// set; --expect with them replays those records. When a matching dead
// letter arrived since, --expect of the old count writes nothing, prints
// the dry run as it is now and exits 1; so does the old set at the same
// count, after another run replayed one of its records; --expect 0 writes
// nothing and exits 1 when there is something to move. --expect or
// --expect-set with --dry-run, --expect below 0 and a malformed set are
// usage errors.
func TestDLQReplayExpectsWhatItsDryRunShowed(t *testing.T) {
	t.Parallel()
	f := newDLQFixture(t, 1)
	f.deadLetters(t, 2, "psp timeout")
	replay := []string{"dlq", "replay", f.dlqName, "--error", "timeout"}
	dryRun := func() replayReportJSON {
		t.Helper()
		var dry struct {
			Report replayReportJSON `json:"report"`
		}
		code, out, errOut := courier(t, f.args(append(replay, "--dry-run", "--output", "json")...)...)
		if err := json.Unmarshal([]byte(out), &dry); err != nil || code != exitOK || len(dry.Report.Set) != 32 {
			t.Fatalf("dry run: exit %d, %v, %+v\n%s", code, err, dry.Report, errOut)
		}
		return dry.Report
	}
	first := dryRun()
	if code, out, _ := courier(t, f.args(append(replay, "--dry-run")...)...); code != exitOK || !strings.Contains(out, "--expect 2 --expect-set "+first.Set) {
		t.Errorf("the dry run's text: exit %d\n%s\nwant the --expect and --expect-set that replay it", code, out)
	}
	f.deadLetters(t, 1, "psp timeout") // arrives after the dry run
	code, out, errOut := courier(t, f.args(append(replay, "--expect", "2", "--expect-set", first.Set)...)...)
	if code != exitFailure || !strings.Contains(out, "dry run: 3 record(s)") || !strings.Contains(errOut, "would move 3 record(s), not the 2 its dry run showed") {
		t.Fatalf("--expect 2 of 3: exit %d\n%s%s\nwant exit 1 with the dry run of 3 and why", code, out, errOut)
	}
	if code, _, errOut = courier(t, f.args(append(replay, "--expect", "0")...)...); code != exitFailure || !strings.Contains(errOut, "not the 0 --expect names") {
		t.Fatalf("--expect 0 of 3: exit %d\n%s\nwant exit 1", code, errOut)
	}
	if n := len(f.k.ReadAll(t, f.topic)); n != 0 {
		t.Fatalf("a replay whose set changed wrote %d records", n)
	}
	three := dryRun()
	if code, out, errOut = courier(t, f.args(append(replay, "--max", "1")...)...); code != exitOK { // another run moves one of the three
		t.Fatalf("--max 1: exit %d\n%s%s", code, out, errOut)
	}
	f.deadLetters(t, 1, "psp timeout")
	code, _, errOut = courier(t, f.args(append(replay, "--expect", "3", "--expect-set", three.Set)...)...)
	if code != exitFailure || !strings.Contains(errOut, "not the ones its dry run showed") {
		t.Fatalf("3 other records: exit %d\n%s\nwant exit 1 saying they are not the dry run's", code, errOut)
	}
	now := dryRun()
	if code, out, errOut = courier(t, f.args(append(replay, "--expect", "3", "--expect-set", now.Set)...)...); code != exitOK || !strings.Contains(out, "moved 3 record(s)") {
		t.Fatalf("--expect 3 of the new dry run: exit %d\n%s%s", code, out, errOut)
	}
	if n := len(f.k.ReadAll(t, f.topic)); n != 4 {
		t.Errorf("%d records replayed, want 4 (1, then 3)", n)
	}
	for _, args := range [][]string{{"--expect", "-1"}, {"--expect", "2", "--dry-run"}, {"--expect-set", now.Set, "--dry-run"}, {"--expect-set", "nope"}} {
		if code, _, errOut := courier(t, f.args(append(replay, args...)...)...); code != exitUsage || !strings.Contains(errOut, "xpect") {
			t.Errorf("replay %v: exit %d %s, want a usage error naming --expect or ExpectSet", args, code, errOut)
		}
	}
}
