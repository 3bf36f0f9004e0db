package dedupe

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/courierkit/courier/internal/textcut"
)

// DefaultPrefix starts every key of a Redis store.
const DefaultPrefix = "courier:dedupe:"

// The values a Redis store writes: an id's key holds "claim:<token>",
// the token of the owner that claimed it; a key written before claims
// had tokens may hold "done:<unix ms>", which still reads as processed.
const (
	claimValuePrefix = "claim:"
	doneValuePrefix  = "done:"
)

// claimRounds bounds the rounds of Claim's second phase: an id whose key
// changes between the read and the takeover is looked at again, at most
// this many times in all, and is reported Busy after that.
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
	// It counts from the id's mark. A window shorter than the consumer's
	// lease (Dedupe.Lease) keeps an id Busy, not free, after its window,
	// until the lease of the claim that marked it runs out.
	// A longer window covers later redeliveries (a consumer group reset to
	// an old offset, a dead letter replayed twice) and costs memory: for
	// a UUID id about 230 bytes per id processed within the window, its
	// key (about 150) and its member of a done set (about 80), as
	// `redis-cli MEMORY USAGE` reports them. From 1ms to ten years
	// (MaxWindow). Defaults to 24h (DefaultWindow).
	Window time.Duration
}

// Redis is a Store in Redis, for any handler: it makes at-least-once
// delivery idempotent within the window.
//
// Each id is one key, Prefix + Scope + ":" + id, written once, when the id
// is claimed: it holds "claim:<token>" and lives for the window and the
// lease. The token stands for the claim's owner (see Token); the owner's
// claim call keeps two keys under Prefix + ":" + Scope + ":" (a prefix no
// id key of the same Prefix can have, as a Scope is never empty):
//
//	lease:<token>   the owner, while its lease runs (PX lease)
//	done:<token>    a set of the ids the owner processed (PX window)
//
// An id is processed when it is in the done set of the token its key
// holds; claimed, while that token's lease runs; free again when neither,
// or when its key is gone. So marking a batch processed is one SADD, not a
// write per id, and a claim is one SET NX per id.
//
// Claim and Done cost one pipelined round trip per batch (Claim one more
// on a cluster or a ring, for its lease, and more for ids it finds taken),
// Release and Extend two. go-redis runs a pipeline on a single node or,
// for a *redis.ClusterClient, splits it by slot over the nodes in
// parallel: every command and script touches one key. Only SET, GET, EXISTS, PEXPIRE,
// SADD, SISMEMBER, DEL and EVALSHA/EVAL are used: any Redis since 2.6.12
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
	// keyPrefix is Prefix + Scope + ":", the start of every id's key.
	keyPrefix string
	// ownerPrefix is Prefix + ":" + Scope + ":", the start of every
	// owner's lease and done set.
	ownerPrefix string
	// window is how long a processed id is remembered.
	window time.Duration
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
		client:      client,
		keyPrefix:   cfg.Prefix + cfg.Scope + ":",
		ownerPrefix: cfg.Prefix + ":" + cfg.Scope + ":",
		window:      cfg.Window,
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

// Token returns the token that stands for owner in the keys and values the
// store writes: 16 characters of base64url, from the SHA-256 of owner, so
// that a key's value stays short whatever the owner.
func Token(owner string) string {
	sum := sha256.Sum256([]byte(owner))
	return base64.RawURLEncoding.EncodeToString(sum[:12])
}

// LeaseKey returns the key that holds owner while its lease runs, e.g.
// "courier:dedupe::payouts:lease:3q2-7wAAAAAAAAAA".
func (r *Redis) LeaseKey(owner string) string { return r.leaseKey(Token(owner)) }

// DoneKey returns the key of the set of the ids owner marked processed,
// e.g. "courier:dedupe::payouts:done:3q2-7wAAAAAAAAAA".
func (r *Redis) DoneKey(owner string) string { return r.doneKey(Token(owner)) }

// tokenLen is the length of a Token.
const tokenLen = 16

// isToken reports whether s could be a Token: 16 characters of base64url.
// A claim written by an earlier layout holds its owner itself, and is not
// taken over (it expires with its own lease).
func isToken(s string) bool {
	if len(s) != tokenLen {
		return false
	}
	for i := range len(s) {
		switch c := s[i]; {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

func (r *Redis) leaseKey(token string) string { return r.ownerPrefix + "lease:" + token }
func (r *Redis) doneKey(token string) string  { return r.ownerPrefix + "done:" + token }

// Claim starts owner's lease (its lease key, for lease) and claims each
// free id: SET NX of "claim:<token>" for the window and the lease,
// pipelined after the lease (on a cluster or a ring, after the lease is
// set). For the ids whose key is taken it reads the key: an id in the done
// set of the token it holds is Processed; one whose token's lease runs
// (owner's own too) is Busy; one whose key is gone, or whose token's lease
// ran out before it was done (its owner crashed), is taken over, so
// Claimed. When Claim fails, it releases the claims it took before it
// returns the error.
//
// An owner must be new to each Claim call, as the consumer's are: the ids
// an owner marked processed stay in its done set for the window, so an id
// claimed again under the same owner would read as processed.
//
// Ids are keyed by StoredID (hashed when long or not UTF-8). An empty id
// fails the call with an error matching ErrInvalidID, and so does an id
// whose key holds what the store does not write (a value that is neither
// a claim nor "done:…", an empty one too, or a key of another type), so
// that the consumer dead-letters its message rather than wait on it,
// maybe forever.
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
	stored := storedIDs(ids)
	c := &claim{r: r, keys: r.keys(stored), ids: stored, statuses: statuses, token: Token(owner)}
	c.value = claimValuePrefix + c.token
	c.keyMillis = r.keyMillis(lease)
	taken, err := c.setNX(ctx, owner, px)
	for round := 1; err == nil && len(taken) > 0; round++ {
		if round > claimRounds { // the keys keep changing under us: let the caller come back
			for _, p := range taken {
				statuses[p] = Busy
			}
			break
		}
		taken, err = c.settle(ctx, taken)
	}
	if err != nil {
		return nil, r.undoClaims(ctx, owner, c.keys, statuses, err)
	}
	return statuses, nil
}

// keyMillis is how long, in milliseconds, an id's key lives from its
// claim or the extension of its lease: the window and the lease, so that
// an id marked processed while its claim was live stays processed for the
// window from its mark.
func (r *Redis) keyMillis(lease time.Duration) int64 { return (r.window + lease).Milliseconds() }

// claim is one Claim call's state.
type claim struct {
	r         *Redis
	keys      []string // each id's key
	ids       []string // each id's stored form, a member of a done set
	statuses  []Status
	token     string // the owner's
	value     string // "claim:" + token
	keyMillis int64  // see Redis.keyMillis
}

// unsettled marks, in Claim, an id whose SET NX failed with an error.
const unsettled Status = -1

// setNX starts the owner's lease and claims every key, and records Claimed
// or, tentatively, Busy for each. It returns the positions whose keys were
// taken.
//
// A single Redis runs a pipeline in order, so the lease goes first in the
// same pipeline. A cluster or a ring splits a pipeline over its nodes and
// sends the parts at once (and retries a part that failed later), so there
// the lease is set in a round trip of its own first: no claim may be seen
// without its lease, or another owner would take it over as abandoned.
func (c *claim) setNX(ctx context.Context, owner string, px any) (taken []int, err error) {
	lease := redis.NewStatusCmd(ctx, "set", c.r.leaseKey(c.token), owner, "px", px)
	var first []redis.Cmder
	if _, single := c.r.client.(*redis.Client); single {
		first = append(first, lease)
	} else if err := c.r.client.Process(ctx, lease); err != nil {
		return nil, c.r.fail("claim: start the lease", len(c.keys), err)
	}
	cmds := perKey(ctx, c.r.client.Pipeline(), len(c.keys), func(i int) *string { return &c.keys[i] },
		[]any{"set"}, []any{c.value, "nx", "px", c.keyMillis}, redis.NewStatusCmd, first...)
	for p, cmd := range cmds {
		switch e := cmd.Err(); {
		case e == nil:
			c.statuses[p] = Claimed
		case errors.Is(e, redis.Nil):
			c.statuses[p] = Busy
			taken = append(taken, p)
		default:
			c.statuses[p] = unsettled
			err = e
		}
	}
	if e := lease.Err(); e != nil { // the claims it took are released, as the lease is not there
		return nil, c.r.fail("claim: start the lease", len(c.keys), e)
	}
	if err != nil {
		return nil, c.r.fail("claim", len(c.keys), err)
	}
	return taken, nil
}

// settle reads the keys at positions taken, settles the statuses of those
// processed or busy, and takes the others over: gone keys, and claims
// whose lease ran out before they were done. It returns the positions
// whose keys changed before the takeover, to be looked at again.
func (c *claim) settle(ctx context.Context, taken []int) (again []int, err error) {
	values, present, err := c.read(ctx, taken)
	if err != nil {
		return nil, err
	}
	var over []int // positions to take over, each with the value it holds
	var old []string
	// found are the positions holding a claim of this layout, each with
	// its token; for each, checks asks whether its id is in the token's
	// done set and whether the token's lease runs.
	type claimFound struct {
		at    int // in taken
		token string
	}
	var found []claimFound
	var checks []redis.Cmder
	pipe := c.r.client.Pipeline()
	for i, p := range taken {
		v := values[i]
		token, isClaim := strings.CutPrefix(v, claimValuePrefix)
		switch {
		case !present[i]: // gone
			over, old = append(over, p), append(old, "")
		case strings.HasPrefix(v, doneValuePrefix):
			c.statuses[p] = Processed
		case !isClaim:
			// Not a value of ours: waiting could last forever (a key
			// without expiry), and skipping could lose the message.
			return nil, foreignKey(c.keys[p], strconv.Quote(textcut.Cut(v, 64, "…")))
		case !isToken(token):
			c.statuses[p] = Busy // a claim of an earlier layout: it expires with its lease
		default:
			found = append(found, claimFound{i, token})
			checks = append(checks,
				pipe.SIsMember(ctx, c.r.doneKey(token), c.ids[p]),
				pipe.Exists(ctx, c.r.leaseKey(token)))
		}
	}
	if len(checks) > 0 {
		_, _ = pipe.Exec(ctx) // every command holds its own result
	}
	for j, f := range found {
		done, e1 := checks[2*j].(*redis.BoolCmd).Result()
		live, e2 := checks[2*j+1].(*redis.IntCmd).Result()
		if redis.HasErrorPrefix(e1, "WRONGTYPE") {
			return nil, foreignKey(c.r.doneKey(f.token), "a key of another type than a set")
		}
		if e := errors.Join(e1, e2); e != nil {
			return nil, c.r.fail("claim: read the claims found", len(taken), e)
		}
		switch p := taken[f.at]; {
		case done:
			c.statuses[p] = Processed
		case live > 0:
			c.statuses[p] = Busy
		default: // its owner's lease ran out before it was done
			over, old = append(over, p), append(old, values[f.at])
		}
	}
	if len(over) == 0 {
		return nil, nil
	}
	return c.takeOver(ctx, over, old)
}

// foreignKey is the error of Claim for an id whose key holds what, which
// the store does not write: the key is quoted whole (at most 767 bytes:
// prefix, scope and stored id), so that it can be deleted as it stands.
func foreignKey(key, what string) error {
	return fmt.Errorf("%w: its key %q holds %s, which courier does not write; delete the key (redis-cli DEL) to let the message through",
		ErrInvalidID, key, what)
}

// read returns the values of the keys at positions taken, and whether
// each key is there.
func (c *claim) read(ctx context.Context, taken []int) (values []string, present []bool, err error) {
	cmds := perKey(ctx, c.r.client.Pipeline(), len(taken), func(i int) *string { return &c.keys[taken[i]] },
		[]any{"get"}, nil, redis.NewStringCmd)
	values, present = make([]string, len(taken)), make([]bool, len(taken))
	for i, cmd := range cmds {
		switch v, e := cmd.(*redis.StringCmd).Result(); {
		case errors.Is(e, redis.Nil):
		case redis.HasErrorPrefix(e, "WRONGTYPE"):
			return nil, nil, foreignKey(c.keys[taken[i]], "a key of another type")
		case e != nil:
			return nil, nil, c.r.fail("claim: read taken ids", len(taken), e)
		default:
			values[i], present[i] = v, true
		}
	}
	return values, present, nil
}

// takeOver claims the keys at positions over, each only while it still
// holds what it held when read (old; "" for gone), and records Claimed for
// those it took. It returns the positions whose keys changed meanwhile.
func (c *claim) takeOver(ctx context.Context, over []int, old []string) (again []int, err error) {
	keys := make([]string, len(over))
	args := make([][]any, len(over))
	for i, p := range over {
		keys[i] = c.keys[p]
		args[i] = []any{old[i], c.value, c.keyMillis}
	}
	results, err := c.r.runScript(ctx, "claim: take over", takeOverScript, keys, func(i int) []any { return args[i] })
	for i, p := range over {
		if n, e := results[i].(*redis.Cmd).Int64(); e == nil && n == 1 {
			c.statuses[p] = Claimed // so that a failed Claim releases it too
		} else {
			again = append(again, p)
		}
	}
	if err != nil {
		return nil, err
	}
	return again, nil
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

// Done adds the ids to owner's done set and keeps the set for the window
// from now (SADD and PEXPIRE in one MULTI/EXEC, so that the set never
// stays without its expiry: two commands however many ids). An id whose
// key holds owner's token is processed from then on; one claimed meanwhile
// by another owner (owner's lease ran out) is that owner's to mark.
func (r *Redis) Done(ctx context.Context, owner string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	key := r.doneKey(Token(owner))
	stored := storedIDs(ids)
	args := make([]any, 2, 2+len(stored))
	args[0], args[1] = "sadd", key
	for _, id := range stored {
		args = append(args, id)
	}
	pipe := r.client.TxPipeline()
	add := redis.NewIntCmd(ctx, args...)
	_ = pipe.Process(ctx, add)
	expire := pipe.PExpire(ctx, key, r.window)
	_, _ = pipe.Exec(ctx)
	if err := errors.Join(add.Err(), expire.Err()); err != nil {
		return r.fail("done", len(ids), err)
	}
	return nil
}

// script is a Lua script and its SHA1, by which EVALSHA runs it.
type script struct{ body, sha string }

func newScript(body string) script { return script{body: body, sha: redis.NewScript(body).Hash()} }

// Compare-and-act scripts on one key: they act only while the key holds
// ARGV[1] (the owner's claim; for takeOverScript what it held when read,
// "" for no key).
var (
	releaseScript  = newScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`)
	extendScript   = newScript(`if redis.call("get", KEYS[1]) == ARGV[1] and redis.call("pttl", KEYS[1]) < tonumber(ARGV[2]) then return redis.call("pexpire", KEYS[1], ARGV[2]) end return 0`)
	takeOverScript = newScript(`local v = redis.call("get", KEYS[1]) if (ARGV[1] == "" and v == false) or (ARGV[1] ~= "" and v == ARGV[1]) then redis.call("set", KEYS[1], ARGV[2], "px", ARGV[3]) return 1 end return 0`)
)

// Release deletes the keys of the ids that still hold owner's claim and
// that owner did not mark processed (SISMEMBER of its done set per id,
// pipelined, then a compare-and-delete script per id, pipelined); others
// are left alone.
func (r *Redis) Release(ctx context.Context, owner string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	doneKey := r.doneKey(Token(owner))
	pipe := r.client.Pipeline()
	marked := make([]*redis.BoolCmd, len(ids))
	stored := storedIDs(ids)
	for i, id := range stored {
		marked[i] = pipe.SIsMember(ctx, doneKey, id)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return r.fail("release", len(ids), err)
	}
	keys := r.keys(stored)
	var unmarked []string
	for i, cmd := range marked {
		if !cmd.Val() {
			unmarked = append(unmarked, keys[i])
		}
	}
	if len(unmarked) == 0 {
		return nil
	}
	return r.releaseKeys(ctx, owner, unmarked)
}

func (r *Redis) releaseKeys(ctx context.Context, owner string, keys []string) error {
	value := any(claimValuePrefix + Token(owner))
	_, err := r.runScript(ctx, "release", releaseScript, keys, func(int) []any { return []any{value} })
	return err
}

// Extend pushes owner's lease to lease from now, if it still runs
// (PEXPIRE of its lease key), and then the expiry of the keys of the ids
// that still hold owner's claim to at least the window and the lease from
// now (a compare-and-PEXPIRE script per id, pipelined): two round trips.
// So an id marked processed within the lease stays so for the window from
// its mark. A lease that ran out is not started again (its ids may be
// claimed by another owner already): Extend then fails with ErrLeaseLost.
func (r *Redis) Extend(ctx context.Context, owner string, ids []string, lease time.Duration) error {
	if _, err := leaseMillis(lease); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	token := Token(owner)
	live, err := r.client.PExpire(ctx, r.leaseKey(token), lease).Result()
	if err != nil {
		return r.fail("extend", len(ids), err)
	}
	if !live {
		return fmt.Errorf("%w (owner %q, under %s)", ErrLeaseLost, owner, r.keyPrefix)
	}
	value := any(claimValuePrefix + token)
	keyMillis := r.keyMillis(lease)
	_, err = r.runScript(ctx, "extend", extendScript, r.keys(storedIDs(ids)), func(int) []any { return []any{value, keyMillis} })
	return err
}

// ErrLeaseLost is matched by the error of Extend when owner's lease had
// run out already: its ids may be claimed, and handled, by another owner
// meanwhile. The lease is not started again.
var ErrLeaseLost = errors.New("dedupe: the claims' lease ran out before it was extended; another consumer may be handling their messages")

// runScript runs script once per key, pipelined, by its SHA, with the
// arguments args(i) for key i; when Redis does not know the script yet
// (NOSCRIPT: a fresh or restarted server, or a node of a cluster), it
// sends those calls again with the script's body, which also loads it. It
// returns each key's call, holding its result, also when it fails (the
// error of the first call that failed).
func (r *Redis) runScript(ctx context.Context, op string, s script, keys []string, args func(i int) []any) ([]redis.Cmder, error) {
	cmds := r.scriptCalls(ctx, "evalsha", s.sha, keys, args)
	var missing []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		retried := r.scriptCalls(ctx, "eval", s.body, pick(keys, missing), func(j int) []any { return args(missing[j]) })
		for j, cmd := range retried {
			cmds[missing[j]] = cmd
		}
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return cmds, r.fail(op, len(keys), err)
		}
	}
	return cmds, nil
}

// pick returns the elements of s at positions at.
func pick[T any](s []T, at []int) []T {
	out := make([]T, len(at))
	for i, p := range at {
		out[i] = s[p]
	}
	return out
}

// scriptCalls runs EVAL or EVALSHA (verb) of one script (its body or SHA),
// with one key each and the arguments args(i), for every key in one
// pipeline.
func (r *Redis) scriptCalls(ctx context.Context, verb, bodyOrSHA string, keys []string, args func(i int) []any) []redis.Cmder {
	pipe := r.client.Pipeline()
	cmds := make([]redis.Cmder, len(keys))
	for i := range keys {
		a := append([]any{verb, bodyOrSHA, 1, &keys[i]}, args(i)...)
		cmd := redis.NewCmd(ctx, a...)
		cmd.SetFirstKeyPos(3)
		cmds[i] = cmd
	}
	_ = pipe.BatchProcess(ctx, cmds...) // only queues
	_, _ = pipe.Exec(ctx)               // every command holds its own result
	return cmds
}

// perKey runs n commands in one pipeline, after the commands first,
// command i being head, *key(i), tail..., and returns the n with their
// results (each command's Err tells whether it failed; a connection
// failure fails them all). Every command's arguments live in one slice,
// and keys are passed as *string, which go-redis writes and routes like a
// string, so that a command costs one allocation: its own.
func perKey[C redis.Cmder](ctx context.Context, pipe redis.Pipeliner, n int, key func(i int) *string, head, tail []any,
	newCmd func(context.Context, ...any) C, first ...redis.Cmder,
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
	_ = pipe.BatchProcess(ctx, append(first, cmds...)...) // only queues
	_, _ = pipe.Exec(ctx)                                 // every command holds its own result
	return cmds
}

// keys returns the key of each stored id (see storedIDs), all of them in
// one string.
func (r *Redis) keys(ids []string) []string {
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
		return fmt.Errorf("dedupe: redis %s, a batch of %d, under %s: %w (is Redis running? try `make services`)", op, n, r.keyPrefix, err)
	}
	return fmt.Errorf("dedupe: redis %s, a batch of %d, under %s: %w", op, n, r.keyPrefix, err)
}
