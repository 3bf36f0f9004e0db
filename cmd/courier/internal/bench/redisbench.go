package bench

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/internal/rediskeys"
)

// The redis-benchmark runs of a round: what Redis alone does with the
// commands the Redis dedupe sends for each message.
const (
	// redisBenchBatch is the ids of a batch: the consumer's TakeBatch. The
	// claims of a batch go to Redis in one pipeline; its done mark is one
	// SADD of them all.
	redisBenchBatch   = consumer.DefaultTakeBatch
	redisBenchClients = partitions
	// redisBenchMinRequests is the fewest requests a run sends, so that it
	// lasts long enough for redis-benchmark to time it (a run of a dozen
	// requests can end within its clock's resolution: "inf" requests/s).
	redisBenchMinRequests = 1000
	// redisBenchKeyspace is redis-benchmark's -r: __rand_int__ is drawn
	// from so many values that nearly every key is new, as every message's
	// id is. redis-benchmark reads -r as an int: a larger value wraps,
	// and every command then writes one key.
	redisBenchKeyspace = 1_000_000_000
	// The blank constant fails to compile when the keyspace would
	// wrap in redis-benchmark's int.
	_ int32 = redisBenchKeyspace
	// dedupeWindow is the Window of the Redis dedupe configuration.
	dedupeWindow = 10 * time.Minute
)

// RedisCommandRate is what redis-benchmark measured of one command.
type RedisCommandRate struct {
	// What names the command's part in deduplication.
	What string `json:"what"`
	// Command is the redis-benchmark command line, as run in the last
	// round.
	Command string `json:"command"`
	// Rate is the median of the rounds' requests per second.
	Rate float64 `json:"ops_per_s"`
	// Messages is how many messages one request serves: 1 for a claim,
	// a batch for a done mark.
	Messages int `json:"messages_per_op"`
}

// MessageRate is the messages per second the command's rate serves.
func (c RedisCommandRate) MessageRate() float64 { return c.Rate * float64(c.Messages) }

// redisBench runs redis-benchmark against the Redis of the dedupe
// configuration, for the commands the dedupe sends: per message a claim
// (SET NX PX of the id's key, for the window and the lease), and per
// batch a done mark (SADD of the batch's ids to a new set), on keys,
// values and ids as long as the consumer's. (A batch's other commands,
// the SET of its lease and the MULTI, PEXPIRE and EXEC around its done
// mark, cost Redis about 2% of its ids'.)
type redisBench struct {
	path   string // of redis-benchmark
	client redis.UniversalClient
	host   string
	port   string
	prefix string // of every key it writes, deleted after each run
	cmds   []redisBenchCmd
}

// redisBenchCmd is one command redis-benchmark measures, and its rates.
type redisBenchCmd struct {
	what     string
	messages int      // messages one request serves
	pipeline int      // requests to a pipeline (-P)
	args     []string // after the options
	line     string   // the last command line run
	rates    []float64
}

// RedisBenchmarkTarget returns the host and port at which redis-benchmark
// reaches the Redis of client, or an error saying why it cannot: it must be
// a single Redis (a *redis.Client) on database 0, reached over TCP without
// TLS or a password (which redis-benchmark would show on its command line).
func RedisBenchmarkTarget(client redis.UniversalClient) (host, port string, err error) {
	c, ok := client.(*redis.Client)
	if !ok {
		return "", "", fmt.Errorf("bench: redis-benchmark needs a single Redis (a *redis.Client), not a %T", client)
	}
	opts := c.Options()
	if opts.TLSConfig != nil || opts.Password != "" || opts.Network == "unix" {
		return "", "", errors.New("bench: redis-benchmark is run only against a Redis reached over TCP without TLS or a password (it would show the password on its command line)")
	}
	if opts.DB != 0 {
		return "", "", fmt.Errorf("bench: redis-benchmark writes to database 0, the dedupe to database %d", opts.DB)
	}
	host, port, err = net.SplitHostPort(opts.Addr)
	if err != nil || host == "" || port == "" {
		return "", "", fmt.Errorf("bench: the Redis address %q is not host:port", opts.Addr)
	}
	return host, port, nil
}

// newRedisBench prepares redis-benchmark's commands for a run named name
// against the Redis of client (see RedisBenchmarkTarget).
func newRedisBench(path string, client redis.UniversalClient, name string) (*redisBench, error) {
	host, port, err := RedisBenchmarkTarget(client)
	if err != nil {
		return nil, err
	}
	b := &redisBench{path: path, client: client, host: host, port: port, prefix: "courier:bench:" + name + ":redis-benchmark:"}
	// An id as long as a UUID, __rand_int__ being 12 digits, so a key as
	// long as the consumer's; a claim's value holds an owner's token.
	id := uuid.NewString()[:24] + "__rand_int__"
	key := b.prefix + "bench:" + id
	claim := "claim:" + dedupe.Token(uuid.NewString())
	doneSet := b.prefix + ":bench:done:__rand_int__" // a new set for each batch
	sadd := []string{"SADD", doneSet}
	for range redisBenchBatch {
		sadd = append(sadd, id)
	}
	b.cmds = []redisBenchCmd{
		{what: "a claim", messages: 1, pipeline: redisBenchBatch,
			args: []string{"SET", key, claim, "NX", "PX", strconv.FormatInt((dedupeWindow + consumer.DefaultDedupeLease).Milliseconds(), 10)}},
		{what: fmt.Sprintf("a done mark of %d ids", redisBenchBatch), messages: redisBenchBatch, pipeline: 1, args: sadd},
	}
	return b, nil
}

// round runs redis-benchmark once for each command, requests for n
// messages each, and deletes the keys it wrote.
func (b *redisBench) round(ctx context.Context, n int) error {
	for i := range b.cmds {
		cmd := &b.cmds[i]
		requests := max(n/cmd.messages, redisBenchMinRequests)
		argv := append([]string{"-h", b.host, "-p", b.port, "-n", strconv.Itoa(requests), "-r", strconv.Itoa(redisBenchKeyspace),
			"-c", strconv.Itoa(redisBenchClients), "-P", strconv.Itoa(cmd.pipeline), "--csv"}, cmd.args...)
		rate, err := runRedisBenchmark(ctx, b.path, argv)
		_, delErr := rediskeys.Delete(ctx, b.client, b.prefix)
		if err = errors.Join(err, delErr); err != nil {
			return fmt.Errorf("redis-benchmark %s: %w", cmd.what, err)
		}
		cmd.line = "redis-benchmark " + strings.Join(shortArgs(argv), " ")
		cmd.rates = append(cmd.rates, rate)
	}
	return nil
}

// shortArgs returns argv with a run of the same argument (the ids of a
// done mark) written once, followed by "(×n)", so that a command line
// stays readable in a report.
func shortArgs(argv []string) []string {
	var out []string
	for i := 0; i < len(argv); {
		n := 1
		for i+n < len(argv) && argv[i+n] == argv[i] {
			n++
		}
		out = append(out, argv[i])
		if n > 1 {
			out = append(out, fmt.Sprintf("(×%d)", n))
		}
		i += n
	}
	return out
}

// rates returns the median rate of each command.
func (b *redisBench) rates() []RedisCommandRate {
	out := make([]RedisCommandRate, 0, len(b.cmds))
	for _, cmd := range b.cmds {
		if len(cmd.rates) == 0 {
			continue
		}
		out = append(out, RedisCommandRate{What: cmd.what, Command: cmd.line, Rate: median(cmd.rates), Messages: cmd.messages})
	}
	return out
}

// runRedisBenchmark runs redis-benchmark with argv (--csv among them) and
// returns the requests per second it printed.
func runRedisBenchmark(ctx context.Context, path string, argv []string) (float64, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, argv...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%w: %q", err, truncate(stderr.String()))
	}
	return parseRedisBenchmarkCSV(stdout.Bytes())
}

// parseRedisBenchmarkCSV reads the rps column of the one test in
// redis-benchmark's --csv output: a header line naming the columns, then
// a line per test.
func parseRedisBenchmarkCSV(out []byte) (float64, error) {
	records, err := csv.NewReader(bytes.NewReader(out)).ReadAll()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark's output is not CSV: %w", err)
	}
	if len(records) != 2 {
		return 0, fmt.Errorf("redis-benchmark printed %d CSV lines, want a header and one test: %q", len(records), truncate(string(out)))
	}
	col := slices.Index(records[0], "rps")
	if col < 0 || col >= len(records[1]) {
		return 0, fmt.Errorf("redis-benchmark's CSV has no rps column: %q", truncate(string(out)))
	}
	rate, err := strconv.ParseFloat(records[1][col], 64)
	if err != nil || rate <= 0 || math.IsInf(rate, 0) {
		return 0, fmt.Errorf("redis-benchmark's rps %q is not a positive number", truncate(records[1][col]))
	}
	return rate, nil
}

// truncate quotes at most 200 bytes of s, for an error.
func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
