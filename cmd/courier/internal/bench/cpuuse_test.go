package bench

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// procStat is the head of a two-CPU machine's /proc/stat.
const procStat = `cpu  100 20 30 800 50 5 5 10 7 0
cpu0 50 10 15 400 25 3 2 5 7 0
cpu1 50 10 15 400 25 2 3 5 0 0
intr 12345 0 0
ctxt 999
cpu_extra_looking 1 2 3 4
`

// TestParseProcStat: the total is the ticks of the first eight fields
// (guest is inside user), idle is idle plus iowait, and the CPUs are the
// cpuN lines; a malformed or missing line is an error that names it and
// quotes no more than a bounded, escaped value.
func TestParseProcStat(t *testing.T) {
	got, err := parseProcStat(procStat)
	if err != nil {
		t.Fatal(err)
	}
	if want := (machineCPU{total: 1020, idle: 850, cpus: 2}); got != want {
		t.Errorf("parsed %+v, want %+v", got, want)
	}
	if got, err := parseProcStat("cpu 1 2 3 4\ncpu0 1 2 3 4\n"); err != nil || got != (machineCPU{total: 10, idle: 4, cpus: 1}) {
		t.Errorf("an old kernel's four fields: parsed %+v, %v; want 10 ticks, 4 idle, 1 CPU", got, err)
	}
	for _, tc := range []struct{ stat, want string }{
		{"", "no cpu line"},
		{"intr 1 2\n", "no cpu line"},
		{"cpu 1 2 3 4\n", "no cpuN line"},
		{"cpu 1 2 3\ncpu0 1 2 3\n", "has 3 fields, want at least 4"},
		{"cpu 1 2 x\x1b[2J 4\ncpu0 1 2 3 4\n", `gives "x\x1b[2J" as field 3`},
		{"cpu 1 2 -3 4\ncpu0 1 2 3 4\n", `gives "-3" as field 3`},
		{"cpu 1 2 3 99999999999999999999999\ncpu0 1\n", "as field 4, not a count"},
		{"cpu 1 2 3 " + strings.Repeat("9", 300) + "\ncpu0 1\n", strings.Repeat("9", 200) + "…"},
	} {
		_, err := parseProcStat(tc.stat)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseProcStat(%q) = %v, want an error containing %q", tc.stat, err, tc.want)
		}
	}
}

// TestCPUUsed: the process's cores busy are its CPU time over the wall
// time, and per message; the machine's are the busy share of its ticks
// times its CPUs (the relay scaling's figure is that share). Counters that went backwards or did not move give an
// error, never a figure.
func TestCPUUsed(t *testing.T) {
	at := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	before := cpuSample{at: at, process: 3 * time.Second, machine: machineCPU{total: 1000, idle: 800, cpus: 2}}
	after := cpuSample{at: at.Add(2 * time.Second), process: 6 * time.Second, machine: machineCPU{total: 1400, idle: 900, cpus: 2}}
	got, err := cpuUsed(before, after, 100_000)
	if err != nil {
		t.Fatal(err)
	}
	want := CPUUse{ProcessBusy: 1.5, ProcessMicrosPerMessage: 30, MachineBusy: 1.5, MachineCPUs: 2, MachineIdle: 0.25}
	if got != want {
		t.Errorf("cpuUsed = %+v, want %+v", got, want)
	}
	if got := (&cpuWindow{before: before, after: after}).machineBusyShare(); got != 0.75 {
		t.Errorf("machineBusyShare = %v, want 0.75", got)
	}
	if got := (&cpuWindow{before: before, after: after, err: errors.New("no /proc/stat")}).machineBusyShare(); got != 0 {
		t.Errorf("machineBusyShare of a window not read = %v, want 0", got)
	}
	// 1.5 cores busy for 2s is 3s of CPU: 30µs for each of 100,000 events.
	if got := (&cpuWindow{before: before, after: after}).machineMicrosPer(100_000); math.Abs(got-30) > 1e-9 {
		t.Errorf("machineMicrosPer = %v, want 30", got)
	}
	backwards := after
	backwards.process = time.Second
	stalled := after
	stalled.machine = before.machine
	idler := after
	idler.machine.idle = 1500
	for name, tc := range map[string]struct {
		after    cpuSample
		messages int
		want     string
	}{
		"process backwards": {backwards, 1, "went backwards"},
		"machine stalled":   {stalled, 1, "did not move"},
		"idle over total":   {idler, 1, "went backwards"},
		"no time":           {before, 1, "no CPU figure"},
		"no messages":       {after, 0, "no CPU figure"},
	} {
		if _, err := cpuUsed(before, tc.after, tc.messages); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: cpuUsed = %v, want an error containing %q", name, err, tc.want)
		}
	}
}

// TestCPUUsesTakeTheMedians: each field is the median of the rounds that
// have a figure; a round without one leaves its reason, and no round at
// all leaves no figure.
func TestCPUUsesTakeTheMedians(t *testing.T) {
	var u cpuUses
	if u.median() != nil {
		t.Fatal("a figure before any round")
	}
	u.add(CPUUse{}, errors.New("bench: /proc/stat has no cpu line"))
	if u.median() != nil || u.err == nil {
		t.Fatalf("after a round without a figure: %+v, %v; want none, and its reason", u.median(), u.err)
	}
	for _, busy := range []float64{0.5, 2, 1} {
		u.add(CPUUse{ProcessBusy: busy, ProcessMicrosPerMessage: 10 * busy, MachineBusy: busy + 0.1, MachineCPUs: 2, MachineIdle: busy / 4}, nil)
	}
	got := *u.median()
	if want := (CPUUse{ProcessBusy: 1, ProcessMicrosPerMessage: 10, MachineBusy: 1.1, MachineCPUs: 2, MachineIdle: 0.25}); got != want {
		t.Errorf("median = %+v, want %+v", got, want)
	}
	if !strings.Contains(u.err.Error(), "no cpu line") {
		t.Errorf("the first round's reason is lost: %v", u.err)
	}
}

// TestCPUOfDrainsTakesTheMediansOfThoseMeasured: a drain's busy share and
// CPU time per event are the medians of its windows that were read; a
// window that was not leaves them, and none at all leaves no figure.
func TestCPUOfDrainsTakesTheMediansOfThoseMeasured(t *testing.T) {
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	window := func(busyTicks uint64) cpuWindow { // of 400 ticks over 1s on 2 CPUs
		return cpuWindow{before: cpuSample{at: at, machine: machineCPU{total: 1000, idle: 800, cpus: 2}},
			after: cpuSample{at: at.Add(time.Second), machine: machineCPU{total: 1400, idle: 800 + 400 - busyTicks, cpus: 2}}}
	}
	unread := window(400)
	unread.err = errors.New("no /proc/stat")
	busy, micros := cpuOf([]cpuWindow{window(100), unread, window(300), window(200)}, 1000)
	// The median window is 200 of 400 ticks: half of 2 cores for 1s, 1s of
	// CPU over 1,000 events.
	if math.Abs(busy-0.5) > 1e-9 || math.Abs(micros-1000) > 1e-9 {
		t.Errorf("cpuOf = %v busy, %v µs/event; want 0.5 and 1000", busy, micros)
	}
	if busy, micros := cpuOf([]cpuWindow{unread}, 1000); busy != 0 || micros != 0 {
		t.Errorf("cpuOf of no measured window = %v, %v; want no figure", busy, micros)
	}
}

// TestConsumeReportShowsTheCPU: the text and the Markdown have a row per
// configuration, unknown where it has no figure, and say why.
func TestConsumeReportShowsTheCPU(t *testing.T) {
	report := ConsumeReport{Messages: 200_000, SlowMessages: 4_000, Rounds: 3, Results: []Result{
		{Name: Raw, Rate: 500_000, Baseline: Raw, Ratio: 1,
			CPU: &CPUUse{ProcessBusy: 1.87, ProcessMicrosPerMessage: 3.74, MachineBusy: 1.95, MachineCPUs: 2, MachineIdle: 0.025}},
		{Name: DedupeRedis, Rate: 40_000, Baseline: Raw, Ratio: 0.08},
	}, CPUUnknown: "bench: /proc/stat has no cpu line"}
	var text bytes.Buffer
	if err := report.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	var md strings.Builder
	report.writeMarkdown(&md)
	for _, tc := range []struct{ doc, want string }{
		{text.String(), "CPU while consuming (this process: getrusage; the machine: /proc/stat), median of 3 runs:\n"},
		{text.String(), "  raw-sarama-group                              1.87     3.74       1.95 of 2             2%\n"},
		{text.String(), "  runner/dedupe-redis                        unknown\n"},
		{text.String(), "(some rounds have no CPU figure: bench: /proc/stat has no cpu line)"},
		{md.String(), "## CPU while consuming\n"},
		{md.String(), "| `raw-sarama-group` | 1.87 | 3.74 | 1.95 of 2 | 2 % |\n"},
		{md.String(), "| `runner/dedupe-redis` | unknown | | | |\n"},
		{md.String(), "Some rounds have no CPU figure: bench: /proc/stat has no cpu line.\n"},
	} {
		if !strings.Contains(tc.doc, tc.want) {
			t.Errorf("the report lacks %q:\n%s", tc.want, tc.doc)
		}
	}
}
