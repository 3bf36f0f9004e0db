package bench

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// CPUUse is where the CPU went while a configuration consumed its backlog,
// from the group's first fetch to the last settled message (the window its
// rate is timed over): whether it kept the cores busy or waited. Each field
// is the median of the rounds.
type CPUUse struct {
	// ProcessBusy is this process's CPU time (getrusage: user and system)
	// over the consuming time: the cores it kept busy. The in-process
	// broker runs in this process and counts here too.
	ProcessBusy float64 `json:"process_busy_cores"`
	// ProcessMicrosPerMessage is that CPU time per message consumed.
	ProcessMicrosPerMessage float64 `json:"process_cpu_us_per_message"`
	// MachineBusy is the cores the whole machine kept busy meanwhile
	// (/proc/stat: all but idle and iowait), this process, the services
	// and anything else alike.
	MachineBusy float64 `json:"machine_busy_cores"`
	// MachineCPUs is how many CPUs /proc/stat counts: the most MachineBusy
	// can reach.
	MachineCPUs int `json:"machine_cpus"`
	// MachineIdle is the share of the machine's CPU time spent idle or
	// waiting on I/O, from 0 to 1.
	MachineIdle float64 `json:"machine_idle_share"`
}

// cpuSample is this process's and the machine's CPU counters at one moment.
type cpuSample struct {
	at      time.Time
	process time.Duration // user and system time of this process
	machine machineCPU
}

// machineCPU is the first "cpu" line of /proc/stat, summed, and the number
// of CPUs.
type machineCPU struct {
	total uint64 // clock ticks of every state but guest (counted in user)
	idle  uint64 // clock ticks idle or waiting on I/O
	cpus  int
}

// procStatFields are the first fields of /proc/stat's "cpu" line that
// count: user, nice, system, idle, iowait, irq, softirq and steal. The
// guest fields after them are counted in user and nice already.
const procStatFields = 8

// parseProcStat reads the machine's CPU counters from the text of
// /proc/stat: the first "cpu" line's ticks, and the "cpuN" lines for the
// number of CPUs. Older kernels give fewer than eight fields; four
// (user, nice, system, idle) are the least it takes.
func parseProcStat(stat string) (machineCPU, error) {
	var m machineCPU
	found := false
	for line := range strings.Lines(stat) {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], "cpu") {
			continue
		}
		if fields[0] != "cpu" {
			if _, err := strconv.Atoi(fields[0][len("cpu"):]); err == nil {
				m.cpus++
			}
			continue
		}
		if found {
			continue
		}
		found = true
		ticks := fields[1:min(len(fields), 1+procStatFields)]
		if len(ticks) < 4 {
			return machineCPU{}, fmt.Errorf("bench: /proc/stat's cpu line %q has %d fields, want at least 4", truncate(strings.TrimSpace(line)), len(ticks))
		}
		for i, f := range ticks {
			n, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return machineCPU{}, fmt.Errorf("bench: /proc/stat's cpu line gives %q as field %d, not a count", truncate(f), i+1)
			}
			m.total += n
			if i == 3 || i == 4 { // idle, iowait
				m.idle += n
			}
		}
	}
	if !found {
		return machineCPU{}, fmt.Errorf("bench: /proc/stat has no cpu line")
	}
	if m.cpus == 0 {
		return machineCPU{}, fmt.Errorf("bench: /proc/stat has no cpuN line to count the CPUs by")
	}
	return m, nil
}

// cpuUsed is the CPU use between two samples, over which messages were
// consumed. It fails when a counter went backwards or no time passed.
func cpuUsed(before, after cpuSample, messages int) (CPUUse, error) {
	wall := after.at.Sub(before.at)
	process := after.process - before.process
	total := int64(after.machine.total) - int64(before.machine.total)
	idle := int64(after.machine.idle) - int64(before.machine.idle)
	switch {
	case wall <= 0 || messages <= 0:
		return CPUUse{}, fmt.Errorf("bench: %d messages in %v: no CPU figure", messages, wall)
	case process < 0 || idle < 0 || total < idle:
		return CPUUse{}, fmt.Errorf("bench: the CPU counters went backwards (process %v, machine %d ticks of which %d idle): no figure", process, total, idle)
	case total == 0:
		return CPUUse{}, fmt.Errorf("bench: the machine's CPU counters did not move in %v: no figure", wall)
	}
	busyShare := float64(total-idle) / float64(total)
	return CPUUse{
		ProcessBusy:             process.Seconds() / wall.Seconds(),
		ProcessMicrosPerMessage: float64(process.Microseconds()) / float64(messages),
		MachineBusy:             busyShare * float64(after.machine.cpus),
		MachineCPUs:             after.machine.cpus,
		MachineIdle:             1 - busyShare,
	}, nil
}

// cpuWindow reads the CPU counters around a consuming window.
type cpuWindow struct {
	before, after cpuSample
	err           error // the first reading that failed
}

// start reads the counters as the window opens.
func (w *cpuWindow) start() { w.before, w.err = readCPU() }

// stop reads the counters as the window closes, unless start failed.
func (w *cpuWindow) stop() {
	if w.err == nil {
		w.after, w.err = readCPU()
	}
}

// use is the CPU use over the window, in which messages were consumed.
func (w *cpuWindow) use(messages int) (CPUUse, error) {
	if w.err != nil {
		return CPUUse{}, w.err
	}
	return cpuUsed(w.before, w.after, messages)
}

// machineBusyShare is the share of the machine's CPU time busy over the
// window, from 0 to 1; 0 when unknown.
func (w *cpuWindow) machineBusyShare() float64 {
	use, err := w.use(1) // the share does not depend on the messages
	if err != nil {
		return 0
	}
	return 1 - use.MachineIdle
}

// machineMicrosPer is the machine's busy CPU time over the window (every
// core, every process: PostgreSQL, the broker, the relays) per event, in
// µs; 0 when unknown. Unlike a rate, it carries to a machine of more cores.
func (w *cpuWindow) machineMicrosPer(events int) float64 {
	use, err := w.use(events)
	if err != nil {
		return 0
	}
	return use.MachineBusy * w.after.at.Sub(w.before.at).Seconds() * 1e6 / float64(events)
}

// cpuUses gathers a configuration's CPUUse per round, and the first reason
// a round had none.
type cpuUses struct {
	rounds []CPUUse
	err    error
}

// add records a round's use, or why there is none.
func (u *cpuUses) add(use CPUUse, err error) {
	if err != nil {
		if u.err == nil {
			u.err = err
		}
		return
	}
	u.rounds = append(u.rounds, use)
}

// median is the median of each field over the rounds (the CPUs of the
// last), or nil before a round was recorded.
func (u *cpuUses) median() *CPUUse {
	if len(u.rounds) == 0 {
		return nil
	}
	field := func(f func(CPUUse) float64) float64 {
		xs := make([]float64, len(u.rounds))
		for i, r := range u.rounds {
			xs[i] = f(r)
		}
		return median(xs)
	}
	return &CPUUse{
		ProcessBusy:             field(func(r CPUUse) float64 { return r.ProcessBusy }),
		ProcessMicrosPerMessage: field(func(r CPUUse) float64 { return r.ProcessMicrosPerMessage }),
		MachineBusy:             field(func(r CPUUse) float64 { return r.MachineBusy }),
		MachineCPUs:             u.rounds[len(u.rounds)-1].MachineCPUs,
		MachineIdle:             field(func(r CPUUse) float64 { return r.MachineIdle }),
	}
}
