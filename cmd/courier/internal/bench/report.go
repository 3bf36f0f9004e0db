package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Report is what `courier bench` prints: where and how the figures were
// measured, and the figures of each harness that ran.
type Report struct {
	// Date is when the run started.
	Date time.Time `json:"date"`
	// Command is the command line that reproduces the run.
	Command  string   `json:"command"`
	Machine  Machine  `json:"machine"`
	Services Services `json:"services"`
	// Network is the network profile every harness ran under; zero:
	// loopback.
	Network Network `json:"network"`
	// Relay, Consume, Soak, Enqueue, Replay and Rebalance are nil when
	// their harness did not run.
	Relay     *RelayReport     `json:"relay,omitempty"`
	Consume   *ConsumeReport   `json:"consume,omitempty"`
	Soak      *SoakReport      `json:"soak,omitempty"`
	Enqueue   *EnqueueReport   `json:"enqueue,omitempty"`
	Replay    *ReplayReport    `json:"replay,omitempty"`
	Rebalance *RebalanceReport `json:"rebalance,omitempty"`
	// Earlier are the headline figures of the runs before this one,
	// newest first (HeadlinesOf the report this one replaces); the
	// Markdown of a run of every harness lists them below its own.
	Earlier []Headline `json:"earlier,omitempty"`
}

// Machine describes the machine and the build that measured.
type Machine struct {
	// NumCPU is runtime.NumCPU(): the cores this process may use.
	NumCPU     int    `json:"num_cpu"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	GoVersion  string `json:"go_version"`
	OS         string `json:"os"`
	Arch       string `json:"arch"`
	// CPU is the processor's model name; empty where /proc/cpuinfo does
	// not tell it.
	CPU string `json:"cpu,omitempty"`
	// LoadAverage is /proc/loadavg's 1, 5 and 15 minute load averages when
	// the run started: other work on the machine; empty where unknown.
	LoadAverage string `json:"load_average,omitempty"`
	// Commit is the VCS revision the binary was built from, with
	// "-dirty" when the tree had changes; empty where the build did not
	// record it (go run does not).
	Commit string `json:"commit,omitempty"`
}

// Services names the services the figures were measured against.
type Services struct {
	// PostgreSQL is the server's version; empty when no harness used it.
	PostgreSQL string `json:"postgresql,omitempty"`
	// Redis is the server's version; empty when no harness used it.
	Redis string `json:"redis,omitempty"`
	// Kafka says which broker: the in-process kfake one, or the
	// addresses of a cluster; empty when no harness used one.
	Kafka string `json:"kafka"`
}

// ThisMachine describes the machine this process runs on and the build it
// runs.
func ThisMachine() Machine {
	m := Machine{
		NumCPU: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(),
		OS: runtime.GOOS, Arch: runtime.GOARCH, CPU: cpuModel(),
	}
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		if fields := strings.Fields(string(load)); len(fields) >= 3 {
			m.LoadAverage = strings.Join(fields[:3], " ")
		}
	}
	if info, ok := debug.ReadBuildInfo(); ok {
		dirty := false
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				m.Commit = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if m.Commit != "" && dirty {
			m.Commit += "-dirty"
		}
	}
	return m
}

// busy reports whether other work held at least half the cores when the
// run started (the 1-minute load average), and that load.
func (m Machine) busy() (float64, bool) {
	fields := strings.Fields(m.LoadAverage)
	if len(fields) == 0 || m.NumCPU == 0 {
		return 0, false
	}
	load, err := strconv.ParseFloat(fields[0], 64)
	return load, err == nil && load >= float64(m.NumCPU)/2
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if name, value, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return ""
}

// KfakeVersion is the version of the in-process broker's module
// (github.com/twmb/franz-go/pkg/kfake) this binary was built with, or
// "(unknown version)".
func KfakeVersion() string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == "github.com/twmb/franz-go/pkg/kfake" {
				return dep.Version
			}
		}
	}
	return "(unknown version)"
}

// WriteText writes the header as plain lines, then each harness's tables
// as the benchmarks print them.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, line := range r.header() {
		fmt.Fprintf(&b, "%s: %s\n", line[0], line[1])
	}
	b.WriteByte('\n')
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	if r.Relay != nil {
		if err := r.Relay.WriteText(w); err != nil {
			return err
		}
	}
	if r.Consume != nil {
		if err := r.Consume.WriteText(w); err != nil {
			return err
		}
	}
	if r.Soak != nil {
		if err := r.Soak.WriteText(w); err != nil {
			return err
		}
	}
	if r.Enqueue != nil {
		if err := r.Enqueue.WriteText(w); err != nil {
			return err
		}
	}
	if r.Replay != nil {
		if err := r.Replay.WriteText(w); err != nil {
			return err
		}
	}
	if r.Rebalance != nil {
		return r.Rebalance.WriteText(w)
	}
	return nil
}

// header is the report's header as name, value pairs.
func (r Report) header() [][2]string {
	m := r.Machine
	lines := [][2]string{
		{"Date", r.Date.UTC().Format("2006-01-02 15:04 MST")},
		{"Command", r.Command},
		{"Cores", fmt.Sprintf("%d (runtime.NumCPU), GOMAXPROCS %d", m.NumCPU, m.GOMAXPROCS)},
	}
	cpu := m.OS + "/" + m.Arch
	if m.CPU != "" {
		cpu = m.CPU + ", " + cpu
	}
	lines = append(lines, [2]string{"CPU", cpu})
	if m.LoadAverage != "" {
		lines = append(lines, [2]string{"Load average at the start", m.LoadAverage + " (1, 5 and 15 minutes)"})
	}
	lines = append(lines, [2]string{"Go", m.GoVersion})
	if m.Commit != "" {
		lines = append(lines, [2]string{"Commit", m.Commit})
	}
	if r.Services.PostgreSQL != "" {
		lines = append(lines, [2]string{"PostgreSQL", r.Services.PostgreSQL})
	}
	if r.Services.Redis != "" {
		lines = append(lines, [2]string{"Redis", r.Services.Redis})
	}
	if r.Services.Kafka != "" {
		lines = append(lines, [2]string{"Kafka", r.Services.Kafka})
	}
	if profile := r.profile(); profile != "" {
		lines = append(lines, [2]string{"Profile", profile})
	}
	return lines
}

// profile says how far the services were from the benchmark: the
// run's Network, and for the relay's scaling run PostgreSQL behind a
// proxy delaying every packet; "" for a loopback report without the
// relay's figures.
func (r Report) profile() string {
	if r.Relay == nil && !r.Network.On() {
		return ""
	}
	p := r.Network.String()
	if r.Relay != nil && len(r.Relay.Scale) > 0 && r.Relay.ScaleDelay > 0 {
		p += fmt.Sprintf("; the relay scaling run reaches PostgreSQL through a proxy holding every packet %v each way (network)", r.Relay.ScaleDelay)
	}
	return p
}

// WriteMarkdown writes the report as a Markdown document: the header, then
// a table per measurement in which every figure stands beside its
// baseline, measured in the same run, and the ratio of the two.
func (r Report) WriteMarkdown(w io.Writer) error {
	var b, body strings.Builder
	b.WriteString("# courier benchmarks\n\n")
	for _, line := range r.header() {
		value := line[1]
		if line[0] == "Command" {
			value = "`" + value + "`"
		}
		fmt.Fprintf(&b, "- **%s:** %s\n", line[0], value)
	}
	if r.Relay != nil || r.Consume != nil || r.Enqueue != nil || r.Replay != nil {
		fmt.Fprintf(&b, `
Each figure stands beside a baseline measured in the same run, against the same services, and the
ratio of the two is the figure to read. The services and the benchmark share the machine's %s,
with whatever else runs on it (see the load average above), so absolute figures can move by 15 %%
or more from one run to the next on a busy machine: compare figures of one report with each
other, and runs with each other by their ratios. Configurations take turns, so that a machine
whose speed drifts meets them all alike, and each figure is a median.
`, plural(r.Machine.NumCPU, "core"))
	}
	if load, busy := r.Machine.busy(); busy {
		fmt.Fprintf(&b, `
**The machine was busy when this run started** (load average %.2f over the last minute, on
%s): other work competed with the benchmark for the cores, so these figures are lower and
noisier than on a quiet machine, and the ratios hold better than the absolute figures.
`, load, plural(r.Machine.NumCPU, "core"))
	}
	if r.Relay != nil {
		r.Relay.writeMarkdown(&body)
	}
	if r.Consume != nil {
		r.Consume.writeMarkdown(&body)
	}
	if r.Soak != nil {
		r.Soak.writeMarkdown(&body)
	}
	if r.Enqueue != nil {
		r.Enqueue.writeMarkdown(&body)
	}
	if r.Replay != nil {
		r.Replay.writeMarkdown(&body)
	}
	if r.Rebalance != nil {
		r.Rebalance.writeMarkdown(&body)
	}
	if r.Relay != nil && r.Consume != nil && r.Enqueue != nil {
		this, _ := HeadlineOf(b.String() + body.String())
		writeHeadlines(&b, this, r.Earlier)
	}
	b.WriteString(body.String())
	_, err := io.WriteString(w, b.String())
	return err
}

func (r ConsumeReport) writeMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, `
## Consumer

Consuming a backlog of %s messages (%d-byte JSON with CloudEvents headers, %s keys, %d
partitions) with the runner (retries and dead letters on), beside the baseline, a raw Sarama
consumer group that only marks each message; then %s messages with a handler taking 5 ms, on 16
workers per partition beside 1, each beside its ceiling (the backlog's busiest worker handling its
messages one after the other). `+"`runner/1%%-permanent`"+` fails 1 %% of the messages for good (they
go to the dead-letter topic); `+"`runner/1%%-through-retry-tiers`"+` fails them twice, through retry
tiers of 50 ms and 100 ms, and its rate is the main topic's; the dedupe runs claim and mark every
message in an in-process map or in Redis. The clock starts at the group's first fetch on the
in-process broker, and when the consumer starts on a cluster. %s each, and a figure is the
messages over the median time.

| configuration | msgs/s | baseline | baseline msgs/s | ratio | ceiling msgs/s |
| --- | ---: | --- | ---: | ---: | ---: |
`, thousands(float64(r.Messages)), payloadSize, thousands(keys), partitions, thousands(float64(r.SlowMessages)), plural(r.Rounds, "backlog"))
	writeRateTable(b, r.rows())
	r.writeRedisAlone(b)
	r.writeRedisServer(b)
	r.writeCPUMarkdown(b)
}

// writeRedisAlone writes what redis-benchmark measured beside the Redis
// dedupe, when it ran.
func (r ConsumeReport) writeRedisAlone(b *strings.Builder) {
	alone, dedupe, ok := r.redisAlone()
	if !ok {
		return
	}
	fmt.Fprintf(b, `
## Redis dedupe beside redis-benchmark

`+"`%s`"+` sends Redis a claim per message, before it is handled (SET NX, pipelined a
batch at a time), and a done mark per batch once its messages are handled (one SADD of their
ids). After each round, redis-benchmark ran each command against the same Redis, on %d
connections, requests for %s messages (at least 1,000 requests), nearly every key and id new (as every message's id is),
with keys, values and ids as long as the consumer's; a figure is the median of %s. Redis alone,
spending on each message a claim and its share of a done mark, serves the messages/s of the
last row but one: the most any Redis dedupe with these commands could reach on this Redis and
machine, with nothing else to do.

| Redis commands | redis-benchmark ops/s | msgs/s |
| --- | ---: | ---: |
`, DedupeRedis, redisBenchClients, thousands(float64(r.Messages)), plural(r.Rounds, "run"))
	for _, c := range r.Redis {
		fmt.Fprintf(b, "| %s: `%s` | %s | %s |\n", c.What, c.Command, thousands(c.Rate), thousands(c.MessageRate()))
	}
	fmt.Fprintf(b, "| Redis alone, a claim and a share of a done mark per message | | %s |\n", thousands(alone))
	fmt.Fprintf(b, "| `%s` | | %s (%s Redis alone) |\n", DedupeRedis, thousands(dedupe), ratio(dedupe/alone))
}

// writeRedisServer writes what the Redis server spent while the Redis
// dedupe consumed, when it was measured.
func (r ConsumeReport) writeRedisServer(b *strings.Builder) {
	l := r.RedisServer
	if l == nil {
		return
	}
	fmt.Fprintf(b, `
## Redis server while the Redis dedupe consumed

Redis's own counters (`+"`INFO cpu`, `INFO stats`"+`) read before and after each `+"`%s`"+` run:
the CPU time of its main thread, which runs every command, over the consuming time, and per
command it ran. Near 1 core busy, Redis serves no more commands. The CPU is read from the group's
join to its shutdown, the time from the first fetch, so the share reads a little high. Anything
else using that Redis meanwhile counts too. Median of %s.

| cores busy | µs of CPU per command | commands per message |
| ---: | ---: | ---: |
| %.2f | %.1f | %.2f |
`, DedupeRedis, plural(r.Rounds, "run"), l.Busy, l.MicrosPerCommand, l.CommandsPerMessage)
}

// writeCPUText writes where the CPU went while each configuration
// consumed, as lines; a configuration without a figure says unknown.
func (r ConsumeReport) writeCPUText(b *strings.Builder) {
	fmt.Fprintf(b, "CPU while consuming (this process: getrusage; the machine: /proc/stat), median of %s:\n", plural(r.Rounds, "run"))
	fmt.Fprintf(b, "  %-36s %13s %8s %16s %13s\n", "", "process cores", "us/msg", "machine cores", "machine idle")
	for _, res := range r.Results {
		if c := res.CPU; c != nil {
			fmt.Fprintf(b, "  %-36s %13.2f %8.2f %10.2f of %-2d %12.0f%%\n", res.Name, c.ProcessBusy, c.ProcessMicrosPerMessage, c.MachineBusy, c.MachineCPUs, c.MachineIdle*100)
		} else {
			fmt.Fprintf(b, "  %-36s %13s\n", res.Name, "unknown")
		}
	}
	if r.CPUUnknown != "" {
		fmt.Fprintf(b, "  (some rounds have no CPU figure: %s)\n", r.CPUUnknown)
	}
}

// writeCPUMarkdown writes where the CPU went while each configuration
// consumed, as a table; a configuration without a figure says unknown.
func (r ConsumeReport) writeCPUMarkdown(b *strings.Builder) {
	fmt.Fprintf(b, `
## CPU while consuming

Read at the group's first fetch and at the last settled message, the window each rate is timed
over: this process's CPU time (`+"`getrusage`"+`, user and system; the in-process broker counts
in it) over that time, and per message; and the whole machine's (`+"`/proc/stat`"+`: the services
and anything else running count too). A configuration whose process keeps about as many cores busy
as the machine has is bound by the CPU; one with cores to spare and the machine idle is waiting.
Median of %s.

| configuration | process cores busy | process µs of CPU per message | machine cores busy | machine idle |
| --- | ---: | ---: | ---: | ---: |
`, plural(r.Rounds, "run"))
	for _, res := range r.Results {
		if c := res.CPU; c != nil {
			fmt.Fprintf(b, "| `%s` | %.2f | %.2f | %.2f of %d | %.0f %% |\n", res.Name, c.ProcessBusy, c.ProcessMicrosPerMessage, c.MachineBusy, c.MachineCPUs, c.MachineIdle*100)
		} else {
			fmt.Fprintf(b, "| `%s` | unknown | | | |\n", res.Name)
		}
	}
	if r.CPUUnknown != "" {
		fmt.Fprintf(b, "\nSome rounds have no CPU figure: %s.\n", r.CPUUnknown)
	}
}

// rateRow is a rate beside its baseline, as the tables show it.
type rateRow struct {
	name     string
	rate     float64
	baseline string // the name of the row whose rate ratio compares with
	ratio    float64
	note     string // at the end of the text line
	cell     string // the Markdown table's last column
}

// writeRateLines writes rows as the lines the benchmarks print.
func writeRateLines(b *strings.Builder, rows []rateRow) {
	for _, row := range rows {
		fmt.Fprintf(b, "  %-36s %9.0f  %5.2fx %s", row.name, row.rate, row.ratio, row.baseline)
		if row.note != "" {
			b.WriteString("  " + row.note)
		}
		b.WriteByte('\n')
	}
}

// writeRateTable writes rows as the rows of a Markdown table whose columns
// are the name, the rate, the baseline's name, its rate, the ratio, and
// the cell.
func writeRateTable(b *strings.Builder, rows []rateRow) {
	rates := map[string]float64{}
	for _, row := range rows {
		rates[row.name] = row.rate
	}
	for _, row := range rows {
		fmt.Fprintf(b, "| `%s` | %s | `%s` | %s | %s | %s |\n",
			row.name, thousands(row.rate), row.baseline, thousands(rates[row.baseline]), ratio(row.ratio), row.cell)
	}
}

// plural is n and noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// ratio formats a ratio to a baseline, e.g. 1.07×.
func ratio(x float64) string { return strconv.FormatFloat(x, 'f', 2, 64) + "×" }

// thousands formats x rounded to a whole number with commas between
// thousands, e.g. 60,393.
func thousands(x float64) string {
	digits := strconv.FormatInt(int64(x+0.5), 10)
	var b strings.Builder
	for i, d := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return b.String()
}
