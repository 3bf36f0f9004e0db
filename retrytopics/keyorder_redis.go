package retrytopics

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// KeyOrder defaults.
const (
	// DefaultKeyOrderPrefix starts every key RedisKeyOrder writes.
	DefaultKeyOrderPrefix = "courier:keyorder:"
	// DefaultKeyOrderTTL is how long a key's parked messages are kept
	// after the last change.
	DefaultKeyOrderTTL = 24 * time.Hour
	// MaxKeyOrderTTL bounds RedisKeyOrderConfig.TTL.
	MaxKeyOrderTTL = 30 * 24 * time.Hour
)

// RedisKeyOrderConfig configures NewRedisKeyOrder. Scope is required.
type RedisKeyOrderConfig struct {
	// Scope tells apart the consumers whose keys are tracked: use the
	// consumer group. Required; it may not contain '{' or '}', and is, as
	// the group, valid UTF-8 without control characters, at most 255 bytes
	// (ValidGroup).
	Scope string
	// Prefix starts every Redis key. Defaults to "courier:keyorder:".
	Prefix string
	// TTL is how long the first parked message of a key may hold the key
	// without moving (being parked again, or settling): a parked message
	// that never settles (its consumer group was deleted, say) stops
	// holding its key back after it, however many later messages keep
	// following it. Make it longer than a message can wait in one tier,
	// consumer downtime included. From 1ms to 30 days (MaxKeyOrderTTL).
	// Defaults to 24h.
	TTL time.Duration
}

// RedisKeyOrder is the KeyOrder of go-redis/v9 (a client, a ring or a
// cluster client; Redis 6.0.6 or newer). Each key with parked messages has
// a list of their ids, in order, and a hash of when each is due, both
// under one hash tag so that a cluster keeps them on one node:
//
//	<prefix><scope>:{<topic>:<key>}:queue   list of ids
//	<prefix><scope>:{<topic>:<key>}:due     id → due time (unix ms)
//
// Every change is one Lua script, so it is atomic; Follow sends the
// scripts of a whole batch in one pipeline.
type RedisKeyOrder struct {
	client redis.UniversalClient
	cfg    RedisKeyOrderConfig
	ttl    string // cfg.TTL in milliseconds
}

var _ KeyOrder = (*RedisKeyOrder)(nil)

// WithDefaults returns cfg with every zero field set to its default: Prefix
// to DefaultKeyOrderPrefix and TTL to DefaultKeyOrderTTL.
func (cfg RedisKeyOrderConfig) WithDefaults() RedisKeyOrderConfig {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultKeyOrderPrefix
	}
	if cfg.TTL == 0 {
		cfg.TTL = DefaultKeyOrderTTL
	}
	return cfg
}

// validate checks cfg, with its defaults applied.
func (cfg *RedisKeyOrderConfig) validate() error {
	switch {
	case cfg.Scope == "":
		return fmt.Errorf("%w: RedisKeyOrderConfig.Scope is empty; set it to the consumer group", ErrInvalidConfig)
	case strings.ContainsAny(cfg.Scope+cfg.Prefix, "{}"):
		return fmt.Errorf("%w: RedisKeyOrderConfig.Scope or Prefix contains '{' or '}', which Redis Cluster reads as a hash tag; remove them", ErrInvalidConfig)
	case cfg.TTL < 0:
		return fmt.Errorf("%w: RedisKeyOrderConfig.TTL is %v; use a positive value, or 0 for the default of %v", ErrInvalidConfig, cfg.TTL, DefaultKeyOrderTTL)
	case cfg.TTL < time.Millisecond, cfg.TTL > MaxKeyOrderTTL:
		return fmt.Errorf("%w: RedisKeyOrderConfig.TTL is %v; use 1ms to %v, or 0 for the default of %v", ErrInvalidConfig, cfg.TTL, MaxKeyOrderTTL, DefaultKeyOrderTTL)
	}
	if err := ValidGroup(cfg.Scope); err != nil {
		return fmt.Errorf("%w: RedisKeyOrderConfig.Scope %q %w", ErrInvalidConfig, short(cfg.Scope), err)
	}
	if err := ValidGroup(cfg.Prefix); err != nil {
		return fmt.Errorf("%w: RedisKeyOrderConfig.Prefix %q %w", ErrInvalidConfig, short(cfg.Prefix), err)
	}
	return nil
}

// NewRedisKeyOrder validates cfg, applies its defaults and returns a
// RedisKeyOrder on client, which it does not close.
func NewRedisKeyOrder(client redis.UniversalClient, cfg RedisKeyOrderConfig) (*RedisKeyOrder, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: the Redis client is nil; pass one from redis.NewClient", ErrInvalidConfig)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &RedisKeyOrder{client: client, cfg: cfg, ttl: strconv.FormatInt(cfg.TTL.Milliseconds(), 10)}, nil
}

// keys returns the list and the hash of m's key.
func (o *RedisKeyOrder) keys(m Parked) []string {
	base := o.cfg.Prefix + o.cfg.Scope + ":{" + m.Topic + ":" + m.Key + "}:"
	return []string{base + "queue", base + "due"}
}

// The TTL runs from when a key's first parked message last moved (parked
// or became first), not from the last change: followers joining or moving
// behind it do not extend it, so a first message that is lost releases its
// key after the TTL even while later messages keep arriving.

// followScript parks ARGV[1] behind the key's parked messages when there
// are some, and returns its position and the first one's due time.
var followScript = redis.NewScript(`
local n = redis.call('LLEN', KEYS[1])
if n == 0 then return {-1, 0} end
local pos = redis.call('LPOS', KEYS[1], ARGV[1])
if not pos then
	redis.call('RPUSH', KEYS[1], ARGV[1])
	pos = n
end
local due = redis.call('HGET', KEYS[2], redis.call('LINDEX', KEYS[1], 0))
return {pos, tonumber(due) or 0}
`)

// parkScript parks ARGV[1] (keeping its place if parked) due at ARGV[2],
// and restarts the TTL (ARGV[3]) when it is the first.
var parkScript = redis.NewScript(`
local pos = redis.call('LPOS', KEYS[1], ARGV[1])
if not pos then
	redis.call('RPUSH', KEYS[1], ARGV[1])
	pos = redis.call('LLEN', KEYS[1]) - 1
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
if pos == 0 then
	redis.call('PEXPIRE', KEYS[1], ARGV[3])
	redis.call('PEXPIRE', KEYS[2], ARGV[3])
elseif redis.call('PTTL', KEYS[2]) < 0 then
	redis.call('PEXPIRE', KEYS[2], math.max(redis.call('PTTL', KEYS[1]), 1))
end
return 1
`)

// unparkScript removes ARGV[1] from the key's parked messages, and
// restarts the TTL (ARGV[2]) for the next one when it was the first.
var unparkScript = redis.NewScript(`
local first = redis.call('LINDEX', KEYS[1], 0)
redis.call('LREM', KEYS[1], 0, ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
if redis.call('LLEN', KEYS[1]) == 0 then
	redis.call('DEL', KEYS[2])
elseif first == ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1
`)

// Follow implements KeyOrder: one pipeline for all of msgs.
func (o *RedisKeyOrder) Follow(ctx context.Context, msgs []Parked) ([]Place, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	var cmds []*redis.Cmd
	run := func(evalSha bool) error {
		cmds = cmds[:0]
		_, err := o.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for _, m := range msgs {
				if evalSha {
					cmds = append(cmds, followScript.EvalSha(ctx, pipe, o.keys(m), m.ID))
				} else {
					cmds = append(cmds, followScript.Eval(ctx, pipe, o.keys(m), m.ID))
				}
			}
			return nil
		})
		return err
	}
	err := run(true)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		err = run(false) // EVAL loads the script for the next EVALSHA
	}
	if err != nil {
		return nil, o.wrap("follow", err)
	}
	places := make([]Place, len(msgs))
	for i, cmd := range cmds {
		vals, err := cmd.Int64Slice()
		if err != nil || len(vals) != 2 {
			return nil, o.wrap("follow", errors.Join(errors.New("unexpected reply of the follow script"), err))
		}
		places[i].Position = int(vals[0])
		if vals[0] >= 0 && vals[1] > 0 {
			places[i].FirstDue = time.UnixMilli(vals[1])
		}
	}
	return places, nil
}

// Park implements KeyOrder.
func (o *RedisKeyOrder) Park(ctx context.Context, m Parked, due time.Time) error {
	err := parkScript.Run(ctx, o.client, o.keys(m), m.ID, due.UnixMilli(), o.ttl).Err()
	return o.wrap("park", err)
}

// Unpark implements KeyOrder.
func (o *RedisKeyOrder) Unpark(ctx context.Context, m Parked) error {
	err := unparkScript.Run(ctx, o.client, o.keys(m), m.ID, o.ttl).Err()
	return o.wrap("unpark", err)
}

func (o *RedisKeyOrder) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("retrytopics: key order %s in Redis: %w (is Redis running? try `make services`)", op, err)
}
