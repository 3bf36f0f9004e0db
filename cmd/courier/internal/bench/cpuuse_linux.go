package bench

import (
	"fmt"
	"os"
	"syscall"
	"time"
)

// readCPU reads this process's CPU time (getrusage) and the machine's
// counters (/proc/stat).
func readCPU() (cpuSample, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return cpuSample{}, fmt.Errorf("bench: getrusage: %w", err)
	}
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuSample{}, fmt.Errorf("bench: read the machine's CPU counters: %w", err)
	}
	machine, err := parseProcStat(string(stat))
	if err != nil {
		return cpuSample{}, err
	}
	process := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return cpuSample{at: time.Now(), process: process, machine: machine}, nil
}
