//go:build !linux

package bench

import (
	"fmt"
	"runtime"
)

// readCPU fails: the CPU counters are read from getrusage and /proc/stat,
// on Linux alone.
func readCPU() (cpuSample, error) {
	return cpuSample{}, fmt.Errorf("bench: CPU use is unknown on %s: it is measured on Linux only", runtime.GOOS)
}
