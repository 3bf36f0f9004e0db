package bench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// TestParseRedisBenchmarkCSV reads the rps of redis-benchmark's --csv
// output and refuses, with an error, output that is not one test with a
// positive rate.
func TestParseRedisBenchmarkCSV(t *testing.T) {
	const header = `"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"` + "\n"
	rate, err := parseRedisBenchmarkCSV([]byte(header + `"SET k:__rand_int__ v NX PX 1000","338359.94","3.350","1.176","1.407","5.559","5.559","5.559"` + "\n"))
	if err != nil || rate != 338359.94 {
		t.Errorf("rate %v, error %v; want 338359.94", rate, err)
	}
	for name, out := range map[string]string{
		"empty":          "",
		"no test":        header,
		"two tests":      header + `"a","1"` + "\n" + `"b","2"` + "\n",
		"no rps column":  `"test","ops"` + "\n" + `"a","1"` + "\n",
		"short line":     header + `"a"` + "\n",
		"not a number":   header + `"a","fast"` + "\n",
		"zero":           header + `"a","0"` + "\n",
		"negative":       header + `"a","-5"` + "\n",
		"infinite":       header + `"a","+Inf"` + "\n",
		"not a number 2": header + `"a","NaN"` + "\n",
		"not CSV":        "\x1b[2J\"unterminated",
	} {
		if rate, err := parseRedisBenchmarkCSV([]byte(out)); err == nil {
			t.Errorf("%s: rate %v, want an error", name, rate)
		} else if strings.Contains(err.Error(), "\x1b") {
			t.Errorf("%s: the error carries a raw control character: %q", name, err)
		}
	}
}

// TestRunRedisBenchmark runs a stand-in for redis-benchmark that prints
// its arguments to stderr and a rate as CSV, and one that fails: the rate
// is read, and a failure quotes the program's stderr.
func TestRunRedisBenchmark(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	script := "#!/bin/sh\necho \"$@\" >&2\nprintf '\"test\",\"rps\"\\n\"SET\",\"1234.5\"\\n'\n"
	if err := os.WriteFile(ok, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	rate, err := runRedisBenchmark(context.Background(), ok, []string{"-n", "10", "--csv"})
	if err != nil || rate != 1234.5 {
		t.Errorf("rate %v, error %v; want 1234.5", rate, err)
	}
	failing := filepath.Join(dir, "failing")
	if err := os.WriteFile(failing, []byte("#!/bin/sh\necho 'Could not connect to Redis' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := runRedisBenchmark(context.Background(), failing, nil); err == nil || !strings.Contains(err.Error(), "Could not connect to Redis") {
		t.Errorf("error %v, want one quoting the program's stderr", err)
	}
}

// TestRedisBenchmarkTarget: redis-benchmark is given a TCP Redis on
// database 0 without TLS or a password; any other client is refused with
// the reason.
func TestRedisBenchmarkTarget(t *testing.T) {
	client := func(opts *redis.Options) redis.UniversalClient {
		c := redis.NewClient(opts)
		t.Cleanup(func() { c.Close() })
		return c
	}
	host, port, err := RedisBenchmarkTarget(client(&redis.Options{Addr: "127.0.0.1:6379"}))
	if err != nil || host != "127.0.0.1" || port != "6379" {
		t.Errorf("host %q port %q error %v, want 127.0.0.1 6379", host, port, err)
	}
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:7000"}})
	t.Cleanup(func() { cluster.Close() })
	for name, c := range map[string]redis.UniversalClient{
		"password": client(&redis.Options{Addr: "127.0.0.1:6379", Password: "s3cret"}),
		"database": client(&redis.Options{Addr: "127.0.0.1:6379", DB: 2}),
		"cluster":  cluster,
	} {
		_, _, err := RedisBenchmarkTarget(c)
		if err == nil {
			t.Errorf("%s: no error", name)
		} else if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: the error shows the password: %v", name, err)
		}
	}
}

func TestShortArgsWritesARunOnce(t *testing.T) {
	got := strings.Join(shortArgs([]string{"-P", "1", "SADD", "d", "id", "id", "id", "x", "x"}), " ")
	if want := "-P 1 SADD d id (×3) x (×2)"; got != want {
		t.Errorf("shortArgs = %q, want %q", got, want)
	}
}

// TestConsumeReportShowsRedisAlone: with redis-benchmark's figures the
// report shows each command's rate, the messages/s it serves and its
// command line, the messages/s Redis alone serves with a claim and a share
// of a done mark per message, and the dedupe's share of it.
func TestConsumeReportShowsRedisAlone(t *testing.T) {
	r := ConsumeReport{Messages: 200_000, SlowMessages: 4_000, Rounds: 5, Results: []Result{
		{Name: Raw, Rate: 400_000, Baseline: Raw, Ratio: 1},
		{Name: DedupeRedis, Rate: 100_000, Baseline: Raw, Ratio: 0.25},
	}, Redis: []RedisCommandRate{
		{What: "a claim", Command: "redis-benchmark -P 256 --csv SET k:__rand_int__ claim:o NX PX 600000", Rate: 300_000, Messages: 1},
		{What: "a done mark of 256 ids", Command: "redis-benchmark -P 1 --csv SADD d:__rand_int__ id-__rand_int__", Rate: 2_343.75, Messages: 256},
	}}
	var md strings.Builder
	r.writeMarkdown(&md)
	for _, want := range []string{
		"## Redis dedupe beside redis-benchmark\n",
		"| a claim: `redis-benchmark -P 256 --csv SET k:__rand_int__ claim:o NX PX 600000` | 300,000 | 300,000 |\n",
		"| a done mark of 256 ids: `redis-benchmark -P 1 --csv SADD d:__rand_int__ id-__rand_int__` | 2,344 | 600,000 |\n",
		"| Redis alone, a claim and a share of a done mark per message | | 200,000 |\n",
		"| `runner/dedupe-redis` | | 100,000 (0.50× Redis alone) |\n",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("the Markdown lacks %q:\n%s", want, md.String())
		}
	}
	var text bytes.Buffer
	if err := r.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if want := "Redis alone, a claim and a share of a done mark per message: 200000 msgs/s; runner/dedupe-redis: 100000 msgs/s (0.50x)"; !strings.Contains(text.String(), want) {
		t.Errorf("the text lacks %q:\n%s", want, text.String())
	}
	r.Redis = nil
	md.Reset()
	r.writeMarkdown(&md)
	if strings.Contains(md.String(), "redis-benchmark") {
		t.Errorf("without redis-benchmark's figures the report still mentions it:\n%s", md.String())
	}
}
