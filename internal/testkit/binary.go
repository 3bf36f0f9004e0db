package testkit

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

var courierBinary struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

// CourierBinary builds cmd/courier once per test process and returns the
// path of the binary, for tests that run the CLI as a user would (signals,
// exit codes, a process killed mid-run).
func CourierBinary(t testing.TB) string {
	t.Helper()
	b := &courierBinary
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "courier-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, "courier")
		b.out, b.err = exec.Command("go", "build", "-o", b.path, "github.com/courierkit/courier/cmd/courier").CombinedOutput()
	})
	if b.err != nil {
		t.Fatalf("testkit: build cmd/courier: %v\n%s", b.err, b.out)
	}
	return b.path
}
