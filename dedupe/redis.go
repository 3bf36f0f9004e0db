package dedupe

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultPrefix starts every key of a Redis store.
const DefaultPrefix = "courier:dedupe:"

// The values a Redis store writes, so that `redis-cli GET` tells a person
// what a key is: "claim:<owner>" while a claim is held, "done:<unix ms>"
// once the id was processed.
const (
	claimValuePrefix = "claim:"
	doneValuePrefix  = "done:"
)

// claimRounds bounds the rounds of Claim: an id whose key expires between
// a failed SET NX and the GET that reads it is tried again, at most this
// many times in all, and is reported Busy after that.
const claimRounds = 3

// RedisConfig configures a Redis store. Scope is required.
type RedisConfig struct {
	// Scope is what is deduplicated, usually the consumer group: stores of
	// different scopes never see each other's ids. It must not contain
	// ':', which separates it from the id in a key (scope "a:b" with id "c"
	// and scope "a" with id "b:c" would share a key), and must be valid
	// UTF-8 without control characters, at most 255 bytes (MaxScopeBytes).
	// Required.
	Scope string
	// Prefix starts every key, so that courier's keys are easy to find and
	// to tell from the application's. On Redis Cluster it should not hold a
	// hash tag ({…}), which would put every id on one node. At most 255
	// bytes of UTF-8. Defaults to "courier:dedupe:" (DefaultPrefix).
	Prefix string
	// Window is how long a processed id is remembered: a message delivered
	// again within it is skipped, one delivered later is processed again.
	// A longer window covers later redeliveries (a consumer group reset to
	// an old offset, a dead letter replayed twice) and costs memory:
	// one key of about 136 bytes (for a UUID id, `redis-cli MEMORY USAGE`)
	// per id processed within the window. From 1ms to ten years
	// (MaxWindow). Defaults to 24h (DefaultWindow).
	Window time.Duration
}

// Redis is a Store in Redis, for any handler: it makes at-least-once
// delivery idempotent within the window. Each id is one key, Prefix +
// Scope + ":" + id, holding "claim:<owner>" (expiring with the lease) or
// "done:<unix ms>" (expiring with the window).
//
// Every method costs one pipelined round trip per batch (Claim a second one
// for ids it finds taken), which go-redis runs on a single node or, for a
// *redis.ClusterClient, splits by slot over the nodes in parallel. Only
// SET, GET, PEXPIRE, DEL and EVALSHA/EVAL are used: any Redis since 2.6.12
// will do.
//
// go-redis resends a pipeline after a network error (Options.MaxRetries):
// an id whose first SET NX did reach Redis then reads as the owner's own
// claim, Busy, until its lease passes.
//
// A Redis is safe for concurrent use. It does not report metrics: the
// consumer measures each call around it.
type Redis struct {
	client redis.UniversalClient
	// keyPrefix is Prefix + Scope + ":".
	keyPrefix string
	// windowMillis is window in milliseconds, as a PX argument.
	windowMillis any
}

var _ Store = (*Redis)(nil)

// NewRedis validates cfg, applies its defaults and returns a store that uses
// client (a *redis.Client, *redis.ClusterClient or *redis.Ring). It does not
// contact Redis; the first call that fails says so.
func NewRedis(client redis.UniversalClient, cfg RedisConfig) (*Redis, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: the client is nil; pass a *redis.Client or *redis.ClusterClient", ErrInvalidConfig)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Redis{
		client:       client,
		keyPrefix:    cfg.Prefix + cfg.Scope + ":",
		windowMillis: cfg.Window.Milliseconds(),
	}, nil
}

// WithDefaults returns cfg with every zero field set to its default: Prefix
// to DefaultPrefix and Window to DefaultWindow.
func (cfg RedisConfig) WithDefaults() RedisConfig {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	cfg.Window = windowOrDefault(cfg.Window)
	return cfg
}

// validate checks cfg, with its defaults applied.
func (cfg *RedisConfig) validate() error {
	if err := validScope(cfg.Scope); err != nil {
		return err
	}
	if strings.Contains(cfg.Scope, ":") {
		return fmt.Errorf("%w: Scope %q contains ':', which separates the scope from the id in a key; use another separator, e.g. %q",
			ErrInvalidConfig, cfg.Scope, strings.ReplaceAll(cfg.Scope, ":", "."))
	}
	if err := validName("Prefix", cfg.Prefix); err != nil {
		return err
	}
	if err := validWindow(cfg.Window); err != nil {
		return err
	}
	if cfg.Window < time.Millisecond {
		return fmt.Errorf("%w: Window is %v; Redis expires keys in whole milliseconds: use at least 1ms", ErrInvalidConfig, cfg.Window)
	}
	return nil
}

// Key returns the Redis key of id, e.g. "courier:dedupe:payouts:evt-1":
// the prefix and the id as StoredID makes it.
func (r *Redis) Key(id string) string { return r.keyPrefix + StoredID(id) }

// Claim sets each id's key to "claim:<owner>" for lease, where no key is
// (SET NX PX, pipelined). For the ids whose key is taken it reads the key
// in a second round trip: "done:…" is Processed, a claim (owner's own too)
// is Busy, and a key that expired in between is claimed again. When Claim
// fails, it releases the claims it took before it returns the error. Ids
// are keyed by StoredID (hashed when long or not UTF-8); an empty id fails
// the call with an error matching ErrInvalidID.
func (r *Redis) Claim(ctx context.Context, owner string, ids []string, lease time.Duration) ([]Status, error) {
	px, err := leaseMillis(lease)
	if err != nil {
		return nil, err
	}
	statuses := make([]Status, len(ids)) // Claimed unless found otherwise
	if len(ids) == 0 {
		return statuses, nil
	}
	if err := checkIDs(ids...); err != nil {
		return nil, err
	}
	keys := r.keys(ids)
	value := any(claimValuePrefix + owner)

	// at lists the positions tried in this round; nil: all of them.
	var at []int
	for round := 1; ; round++ {
		taken, err := r.setNX(ctx, keys, at, value, px, statuses)
		var gone []int
		if err == nil && len(taken) > 0 {
			gone, err = r.inspect(ctx, keys, taken, statuses)
		}
		if err != nil {
			return nil, r.undoClaims(ctx, owner, keys, statuses, err)
		}
		if len(gone) == 0 {
			return statuses, nil
		}
		if round == claimRounds { // the keys keep expiring under us: let the caller come back
			for _, p := range gone {
				statuses[p] = Busy
			}
			return statuses, nil
		}
		at = gone
	}
}

// unsettled marks, in Claim, an id whose SET NX failed with an error.
const unsettled Status = -1

// setNX claims keys[p] for each position p in at (every key when at is
// nil) and records Claimed or, tentatively, Busy for each. It returns the
// positions whose keys were taken.
func (r *Redis) setNX(ctx context.Context, keys []string, at []int, value, px any, statuses []Status) (taken []int, err error) {
	n := len(keys)
	if at != nil {
		n = len(at)
	}
	cmds := perKey(ctx, r.client.Pipeline(), n, func(i int) *string {
		if at != nil {
			return &keys[at[i]]
		}
		return &keys[i]
	}, []any{"set"}, []any{value, "nx", "px", px}, redis.NewStatusCmd)
	for i, cmd := range cmds {
		p := i
		if at != nil {
			p = at[i]
		}
		switch e := cmd.Err(); {
		case e == nil:
			statuses[p] = Claimed
		case errors.Is(e, redis.Nil):
			statuses[p] = Busy
			taken = append(taken, p)
		default:
			statuses[p] = unsettled
			err = e
		}
	}
	if err != nil {
		return nil, r.fail("claim", n, err)
	}
	return taken, nil
}

// inspect reads the keys at positions taken and settles their statuses; it
// returns the positions whose keys were gone, to be claimed again.
func (r *Redis) inspect(ctx context.Context, keys []string, taken []int, statuses []Status) (gone []int, err error) {
	cmds := perKey(ctx, r.client.Pipeline(), len(taken), func(i int) *string { return &keys[taken[i]] },
		[]any{"get"}, nil, redis.NewStringCmd)
	for i, cmd := range cmds {
		p := taken[i]
		switch v, e := cmd.(*redis.StringCmd).Result(); {
		case errors.Is(e, redis.Nil):
			gone = append(gone, p)
		case e != nil:
			return nil, r.fail("claim: read taken ids", len(taken), e)
		case strings.HasPrefix(v, doneValuePrefix):
			statuses[p] = Processed
		default: // a claim, owner's own or another's
			statuses[p] = Busy
		}
	}
	return gone, nil
}

// undoClaims releases the claims a failed Claim took (statuses says which)
// and returns err, joined with the release's error if that failed too.
func (r *Redis) undoClaims(ctx context.Context, owner string, keys []string, statuses []Status, err error) error {
	var claimed []string
	for p, s := range statuses {
		if s == Claimed {
			claimed = append(claimed, keys[p])
		}
	}
	if len(claimed) == 0 {
		return err
	}
	if relErr := r.releaseKeys(ctx, owner, claimed); relErr != nil {
		return errors.Join(err, fmt.Errorf("dedupe: the %d ids claimed before the failure stay claimed until their lease passes: %w", len(claimed), relErr))
	}
	return err
}

// Done sets each id's key to "done:<unix ms>" for the window, whoever
// holds its claim (SET PX, pipelined).
func (r *Redis) Done(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	value := any(doneValuePrefix + strconv.FormatInt(time.Now().UnixMilli(), 10))
	keys := r.keys(ids)
	cmds := perKey(ctx, r.client.Pipeline(), len(keys), func(i int) *string { return &keys[i] },
		[]any{"set"}, []any{value, "px", r.windowMillis}, redis.NewStatusCmd)
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return r.fail("done", len(ids), err)
		}
	}
	return nil
}

// script is a Lua script and its SHA1, by which EVALSHA runs it.
type script struct{ body, sha string }

func newScript(body string) script { return script{body: body, sha: redis.NewScript(body).Hash()} }

// Compare-and-act scripts on one key: they act only while the key holds
// ARGV[1], the owner's claim.
var (
	releaseScript = newScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)
	extendScript  = newScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end return 0`)
)

// Release deletes the keys of the ids that still hold owner's claim (a
// compare-and-delete script per id, pipelined); others are left alone.
func (r *Redis) Release(ctx context.Context, owner string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	return r.releaseKeys(ctx, owner, r.keys(ids))
}

func (r *Redis) releaseKeys(ctx context.Context, owner string, keys []string) error {
	return r.runScript(ctx, "release", releaseScript, keys, any(claimValuePrefix+owner))
}

// Extend sets the expiry of the keys of the ids that still hold owner's
// claim to lease from now (a compare-and-PEXPIRE script per id,
// pipelined); others are left alone.
func (r *Redis) Extend(ctx context.Context, owner string, ids []string, lease time.Duration) error {
	px, err := leaseMillis(lease)
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	return r.runScript(ctx, "extend", extendScript, r.keys(ids), any(claimValuePrefix+owner), px)
}

// runScript runs script once per key, pipelined, by its SHA; when Redis
// does not know the script yet (NOSCRIPT: a fresh or restarted server, or
// a node of a cluster), it sends those calls again with the script's body,
// which also loads it.
func (r *Redis) runScript(ctx context.Context, op string, s script, keys []string, args ...any) error {
	cmds := r.scriptCalls(ctx, "evalsha", s.sha, keys, args)
	var missing []string
	for i, cmd := range cmds {
		switch err := cmd.Err(); {
		case err == nil:
		case redis.HasErrorPrefix(err, "NOSCRIPT"):
			missing = append(missing, keys[i])
		default:
			return r.fail(op, len(keys), err)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	for _, cmd := range r.scriptCalls(ctx, "eval", s.body, missing, args) {
		if err := cmd.Err(); err != nil {
			return r.fail(op, len(keys), err)
		}
	}
	return nil
}

// scriptCalls runs EVAL or EVALSHA (verb) of one script (its body or SHA),
// with one key each, for every key in one pipeline.
func (r *Redis) scriptCalls(ctx context.Context, verb, bodyOrSHA string, keys []string, args []any) []redis.Cmder {
	return perKey(ctx, r.client.Pipeline(), len(keys), func(i int) *string { return &keys[i] },
		[]any{verb, bodyOrSHA, 1}, args, redis.NewCmd)
}

// perKey runs n commands in one pipeline, command i being head, *key(i),
// tail..., and returns them with their results (each command's Err tells
// whether it failed; a connection failure fails them all). Every command's
// arguments live in one slice, and keys are passed as *string, which
// go-redis writes and routes like a string, so that a command costs one
// allocation: its own.
func perKey[C redis.Cmder](ctx context.Context, pipe redis.Pipeliner, n int, key func(i int) *string, head, tail []any,
	newCmd func(context.Context, ...any) C,
) []redis.Cmder {
	width := len(head) + 1 + len(tail)
	args := make([]any, n*width)
	cmds := make([]redis.Cmder, n)
	for i := range n {
		a := args[i*width : (i+1)*width : (i+1)*width]
		copy(a, head)
		a[len(head)] = key(i)
		copy(a[len(head)+1:], tail)
		cmd := newCmd(ctx, a...)
		cmd.SetFirstKeyPos(int8(len(head)))
		cmds[i] = cmd
	}
	_ = pipe.BatchProcess(ctx, cmds...) // only queues
	_, _ = pipe.Exec(ctx)               // every command holds its own result
	return cmds
}

// keys returns the key of each id (of its StoredID), all of them in one
// string.
func (r *Redis) keys(ids []string) []string {
	ids = storedIDs(ids)
	size := 0
	for _, id := range ids {
		size += len(r.keyPrefix) + len(id)
	}
	var b strings.Builder
	b.Grow(size)
	for _, id := range ids {
		b.WriteString(r.keyPrefix)
		b.WriteString(id)
	}
	all := b.String()
	keys := make([]string, len(ids))
	at := 0
	for i, id := range ids {
		end := at + len(r.keyPrefix) + len(id)
		keys[i] = all[at:end]
		at = end
	}
	return keys
}

// leaseMillis returns lease in milliseconds as a PX argument, refusing a
// lease below 1ms.
func leaseMillis(lease time.Duration) (any, error) {
	if lease < time.Millisecond {
		return nil, fmt.Errorf("%w: lease %v is below 1ms, the resolution of Redis expiries; pass a longer lease", ErrInvalidArgument, lease)
	}
	return lease.Milliseconds(), nil
}

// fail wraps an error of op on n ids; a connection error says how to start
// Redis.
func (r *Redis) fail(op string, n int, err error) error {
	if _, ok := errors.AsType[*net.OpError](err); ok {
		return fmt.Errorf("dedupe: redis %s of %d ids under %s: %w (is Redis running? try `make services`)", op, n, r.keyPrefix, err)
	}
	return fmt.Errorf("dedupe: redis %s of %d ids under %s: %w", op, n, r.keyPrefix, err)
}
