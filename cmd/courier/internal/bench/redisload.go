package bench

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServerLoad is what the Redis server spent while the Redis dedupe
// configuration consumed its backlog: where the dedupe's time goes when
// Redis is the limit. Each field is the median of the rounds.
type RedisServerLoad struct {
	// Busy is the CPU time of the server's main thread, which runs every
	// command (INFO cpu: used_cpu_user_main_thread plus
	// used_cpu_sys_main_thread; the whole process's on a Redis before 6.2,
	// which reports no thread of its own), over the consuming time: 1 is
	// that thread busy all along, and Redis serves no more commands. The CPU
	// is read around the whole run, group join to shutdown, and the time is
	// the consuming alone, so it reads a little high.
	Busy float64 `json:"busy_cores"`
	// MicrosPerCommand is that CPU time per command the server ran
	// (INFO stats: total_commands_processed).
	MicrosPerCommand float64 `json:"cpu_us_per_command"`
	// CommandsPerMessage is the commands the server ran per message
	// consumed.
	CommandsPerMessage float64 `json:"commands_per_message"`
}

// redisCounters are a Redis server's running totals, from INFO.
type redisCounters struct {
	cpu      float64 // seconds
	commands float64
}

// readRedisCounters reads the totals of the server of c.
func readRedisCounters(ctx context.Context, c *redis.Client) (redisCounters, error) {
	info, err := c.Info(ctx, "cpu", "stats").Result()
	if err != nil {
		return redisCounters{}, fmt.Errorf("bench: read Redis's INFO: %w", err)
	}
	return parseRedisCounters(info)
}

// parseRedisCounters reads the main thread's CPU time (the process's when
// INFO gives no thread's) and the commands processed from INFO's
// "field:value" lines.
func parseRedisCounters(info string) (redisCounters, error) {
	fields := map[string]float64{}
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if !ok || !slices.Contains(redisCounterFields, name) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
			return redisCounters{}, fmt.Errorf("bench: Redis's INFO gives %s as %q, not a count", name, truncate(value))
		}
		fields[name] = v
	}
	user, sys := "used_cpu_user_main_thread", "used_cpu_sys_main_thread"
	if _, ok := fields[user]; !ok {
		user, sys = "used_cpu_user", "used_cpu_sys"
	}
	for _, name := range []string{user, sys, "total_commands_processed"} {
		if _, ok := fields[name]; !ok {
			return redisCounters{}, fmt.Errorf("bench: Redis's INFO lacks %s", name)
		}
	}
	return redisCounters{cpu: fields[user] + fields[sys], commands: fields["total_commands_processed"]}, nil
}

// redisCounterFields are the INFO fields parseRedisCounters reads.
var redisCounterFields = []string{"used_cpu_user_main_thread", "used_cpu_sys_main_thread", "used_cpu_user", "used_cpu_sys", "total_commands_processed"}

// redisLoads gathers a RedisServerLoad per round.
type redisLoads struct{ busy, micros, commands []float64 }

// add records a round in which the server went from before to after while
// messages were consumed in took.
func (l *redisLoads) add(before, after redisCounters, took time.Duration, messages int) {
	cpu, commands := after.cpu-before.cpu, after.commands-before.commands
	if took <= 0 || commands <= 0 || messages <= 0 || cpu < 0 {
		return // a server restarted under the run, say: no figure
	}
	l.busy = append(l.busy, cpu/took.Seconds())
	l.micros = append(l.micros, cpu*1e6/commands)
	l.commands = append(l.commands, commands/float64(messages))
}

// load returns the medians, or nil before a round was recorded.
func (l *redisLoads) load() *RedisServerLoad {
	if len(l.busy) == 0 {
		return nil
	}
	return &RedisServerLoad{Busy: median(l.busy), MicrosPerCommand: median(l.micros), CommandsPerMessage: median(l.commands)}
}
