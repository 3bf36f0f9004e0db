package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/courierkit/courier/internal/testkit"
)

// TestParseRedisCounters: the CPU time is user plus system, the commands
// are total_commands_processed; a missing or malformed field is an error
// that names it and quotes no more than a bounded, escaped value.
func TestParseRedisCounters(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.25\r\nused_cpu_user:2.5\r\nused_cpu_sys_children:9\r\n\r\n# Stats\r\ntotal_commands_processed:4000\r\n"
	got, err := parseRedisCounters(info)
	if err != nil {
		t.Fatal(err)
	}
	if got != (redisCounters{cpu: 3.75, commands: 4000}) {
		t.Errorf("parsed %+v, want cpu 3.75 and 4000 commands (a Redis before 6.2: the process's CPU)", got)
	}
	withThread := "used_cpu_sys:1.25\r\nused_cpu_user:2.5\r\nused_cpu_sys_main_thread:1\r\nused_cpu_user_main_thread:2\r\ntotal_commands_processed:4000\r\n"
	if got, err := parseRedisCounters(withThread); err != nil || got != (redisCounters{cpu: 3, commands: 4000}) {
		t.Errorf("parsed %+v, %v; want the main thread's cpu 3 and 4000 commands", got, err)
	}
	for _, tc := range []struct{ info, want string }{
		{"used_cpu_sys:1\r\nused_cpu_user:1\r\n", "lacks total_commands_processed"},
		{"used_cpu_sys:1\r\nused_cpu_user:x\x1b[2J\r\ntotal_commands_processed:1\r\n", `used_cpu_user as "x\x1b[2J"`},
		{"used_cpu_sys:-1\r\nused_cpu_user:1\r\ntotal_commands_processed:1\r\n", `used_cpu_sys as "-1"`},
		{"", "lacks"},
	} {
		_, err := parseRedisCounters(tc.info)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseRedisCounters(%q) = %v, want an error containing %q", tc.info, err, tc.want)
		}
	}
}

// TestRedisLoadsTakeTheMedians: each round's load is its CPU over the
// consuming time, per command and commands per message; the report gives
// the medians, and nothing before a round.
func TestRedisLoadsTakeTheMedians(t *testing.T) {
	var l redisLoads
	if l.load() != nil {
		t.Fatal("a load before any round")
	}
	l.add(redisCounters{cpu: 10, commands: 1000}, redisCounters{cpu: 1, commands: 2000}, time.Second, 1000) // restarted
	if l.load() != nil {
		t.Fatal("a load from a server whose CPU went backwards")
	}
	for _, cpu := range []float64{0.5, 2, 1} {
		l.add(redisCounters{cpu: 10, commands: 1000}, redisCounters{cpu: 10 + cpu, commands: 1000 + 400_000}, 2*time.Second, 200_000)
	}
	got := l.load()
	if got.Busy != 0.5 || got.MicrosPerCommand != 2.5 || got.CommandsPerMessage != 2 {
		t.Errorf("load = %+v, want 0.5 cores busy, 2.5 us per command, 2 commands per message", *got)
	}
}

// TestConsumeReportShowsTheRedisServersLoad: a run with Redis dedupe on a
// single Redis reports what the server spent, in the text and Markdown.
func TestConsumeReportShowsTheRedisServersLoad(t *testing.T) {
	k := testkit.NewKafka(t)
	run, err := NewConsumeRun(ConsumeConfig{
		Brokers: k.Brokers, Sarama: k.Config, Name: testkit.UniqueName(t, 60), Messages: 2000,
		Redis: testkit.NewRedis(t).Client, Only: []string{DedupeRedis},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Round(context.Background()); err != nil {
		t.Fatal(err)
	}
	report := run.Report()
	l := report.RedisServer
	if l == nil {
		t.Fatal("the report lacks the Redis server's load")
	}
	// Each message costs a claim, pipelined, and a share of its batch's
	// done mark; other tests sharing the Redis may add a few commands.
	if l.CommandsPerMessage < 1 || l.Busy <= 0 || l.MicrosPerCommand <= 0 {
		t.Errorf("load = %+v, want at least 1 command per message and some CPU", *l)
	}
	var text bytes.Buffer
	if err := report.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "redis-server while runner/dedupe-redis consumed") {
		t.Errorf("the text lacks the Redis server's load:\n%s", text.String())
	}
	var md strings.Builder
	report.writeMarkdown(&md)
	if !strings.Contains(md.String(), "## Redis server while the Redis dedupe consumed") {
		t.Errorf("the Markdown lacks the Redis server's load:\n%s", md.String())
	}
}
