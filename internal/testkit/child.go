package testkit

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Child is the test binary running one of its own tests as a child
// process (the os/exec TestHelperProcess idiom), for tests that kill a
// process mid-work. The child test must do nothing unless its environment
// says it is a child, and should stop cleanly when its stdin closes.
type Child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    bytes.Buffer // stdout and stderr; read only after the child is reaped
	reaped bool
}

// StartChild runs the test named test (e.g. "TestRelayChildProcess") in a
// child process with env added to the test's environment. The child is
// killed when the test ends, and its output logged if the test failed.
func StartChild(t testing.TB, test string, env []string) *Child {
	t.Helper()
	c := &Child{cmd: exec.Command(os.Args[0], "-test.run=^"+test+"$")}
	c.cmd.Env = append(os.Environ(), env...)
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.out
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("testkit: start child %s: %v", test, err)
	}
	t.Cleanup(func() {
		if !c.reaped {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
			c.reaped = true
		}
		if t.Failed() {
			t.Logf("output of child %d (%v):\n%s", c.cmd.Process.Pid, c.cmd.ProcessState, c.out.String())
		}
	})
	return c
}

// Kill SIGKILLs the child, which must still be running, and reaps it.
func (c *Child) Kill(t testing.TB) {
	t.Helper()
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatalf("testkit: kill child %d: %v", c.cmd.Process.Pid, err)
	}
	err := c.cmd.Wait()
	c.reaped = true
	if ws, ok := c.cmd.ProcessState.Sys().(syscall.WaitStatus); ok && !(ws.Signaled() && ws.Signal() == syscall.SIGKILL) {
		t.Fatalf("testkit: child %d ended before it was killed (%v):\n%s", c.cmd.Process.Pid, err, c.out.String())
	}
}

// Dump sends the child SIGQUIT, so that it prints the stacks of its
// goroutines (run it with GOTRACEBACK=all for all of them) into its output,
// and reaps it: evidence of where a child that should be working waits.
func (c *Child) Dump(t testing.TB) {
	t.Helper()
	if c.reaped {
		return
	}
	if err := c.cmd.Process.Signal(syscall.SIGQUIT); err != nil {
		t.Logf("testkit: SIGQUIT child %d: %v", c.cmd.Process.Pid, err)
	}
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
	c.reaped = true
}

// Stop closes the child's stdin and waits up to 30s for a clean exit.
func (c *Child) Stop(t testing.TB) {
	t.Helper()
	_ = c.stdin.Close()
	exited := make(chan error, 1)
	go func() { exited <- c.cmd.Wait() }()
	select {
	case err := <-exited:
		c.reaped = true
		if err != nil {
			t.Errorf("testkit: child %d did not exit cleanly: %v\n%s", c.cmd.Process.Pid, err, c.out.String())
		}
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-exited
		c.reaped = true
		t.Fatalf("testkit: child %d did not stop within 30s of its stdin closing:\n%s", c.cmd.Process.Pid, c.out.String())
	}
}

// CheckOutput fails the test if the reaped child reported a data race or
// panicked.
func (c *Child) CheckOutput(t testing.TB) {
	t.Helper()
	out := c.out.String()
	for _, bad := range []string{"WARNING: DATA RACE", "panic:"} {
		if strings.Contains(out, bad) {
			t.Errorf("testkit: child %d printed %q:\n%s", c.cmd.Process.Pid, bad, out)
		}
	}
}

// UntilStdinCloses returns a context that ends when this process's stdin
// closes: how a child started by StartChild learns that the parent stopped
// it (Stop) or died.
func UntilStdinCloses() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return ctx, cancel
}
