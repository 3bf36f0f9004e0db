package testkit

import (
	"context"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServer is a redis-server process of the test's own, for fault tests
// that stop and restart Redis without disturbing the shared one. It keeps
// its data in an append-only file synced on every write, so a restart
// loses nothing, as a production Redis with persistence would.
type RedisServer struct {
	// Addr is host:port; it stays the same across restarts.
	Addr string
	dir  string
	cmd  *exec.Cmd
}

// StartRedisServer starts a redis-server on a free port, stopped when the
// test ends. A machine without redis-server skips the test with a hint,
// and fails it under CI=true.
func StartRedisServer(t testing.TB) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		unavailable(t, "Redis", "redis-server (the binary)", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &RedisServer{Addr: l.Addr().String(), dir: t.TempDir()}
	_ = l.Close()
	s.Start(t)
	t.Cleanup(func() { s.Stop(t) })
	return s
}

// Start starts the server again after Stop, and waits until it answers.
func (s *RedisServer) Start(t testing.TB) {
	t.Helper()
	_, port, _ := net.SplitHostPort(s.Addr)
	s.cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port, "--dir", s.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no", "--logfile", "")
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("testkit: start redis-server: %v", err)
	}
	client := s.Client()
	defer client.Close()
	WaitFor(t, 10*time.Second, "redis-server on "+s.Addr+" to answer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return client.Ping(ctx).Err() == nil
	})
}

// Stop kills the server (SIGKILL: no goodbye to its clients) and waits for
// it to exit. It does nothing when the server is stopped.
func (s *RedisServer) Stop(t testing.TB) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Client returns a client of the server with short timeouts, so that an
// outage shows quickly; the caller closes it.
func (s *RedisServer) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
}
