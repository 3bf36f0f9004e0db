package bench

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisServerLoad is what the Redis server spent while the Redis dedupe
// configuration consumed its backlog: where the dedupe's time goes when
// Redis is the limit. Each field is the median of the rounds.
type RedisServerLoad struct {
	// Busy is the server's CPU time (INFO cpu: used_cpu_user plus
	// used_cpu_sys) over the consuming time: 1 is one core busy all along.
	// Redis runs its commands on one thread, so near 1 it is the limit.
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

// parseRedisCounters reads the CPU time and the commands processed from
// INFO's "field:value" lines.
func parseRedisCounters(info string) (redisCounters, error) {
	fields := map[string]float64{"used_cpu_user": math.NaN(), "used_cpu_sys": math.NaN(), "total_commands_processed": math.NaN()}
	for line := range strings.Lines(info) {
		name, value, ok := strings.Cut(strings.TrimRight(line, "\r\n"), ":")
		if _, wanted := fields[name]; !ok || !wanted {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) {
			return redisCounters{}, fmt.Errorf("bench: Redis's INFO gives %s as %q, not a count", name, truncate(value))
		}
		fields[name] = v
	}
	for name, v := range fields {
		if math.IsNaN(v) {
			return redisCounters{}, fmt.Errorf("bench: Redis's INFO lacks %s", name)
		}
	}
	return redisCounters{cpu: fields["used_cpu_user"] + fields["used_cpu_sys"], commands: fields["total_commands_processed"]}, nil
}

// redisLoads gathers a RedisServerLoad per round.
type redisLoads struct{ busy, micros, commands []float64 }

// add records a round in which the server went from before to after while
// messages were consumed in took.
func (l *redisLoads) add(before, after redisCounters, took time.Duration, messages int) {
	cpu, commands := after.cpu-before.cpu, after.commands-before.commands
	if took <= 0 || commands <= 0 || messages <= 0 {
		return
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
