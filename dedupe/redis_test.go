package dedupe_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/courierkit/courier/dedupe"
	"github.com/courierkit/courier/internal/testkit"
)

const testScope = "payouts"

// redisStore is a Redis store on the test's own key prefix, and the client
// under it.
type redisStore struct {
	*dedupe.Redis
	client *redis.Client
	t      testing.TB
}

func newRedisStore(t testing.TB, cfg dedupe.RedisConfig) *redisStore {
	t.Helper()
	r := testkit.NewRedis(t)
	cfg.Prefix = r.Prefix
	if cfg.Scope == "" {
		cfg.Scope = testScope
	}
	s, err := dedupe.NewRedis(r.Client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &redisStore{Redis: s, client: r.Client, t: t}
}

// withHook returns a store on the same keys whose client runs hook.
func (s *redisStore) withHook(hook redis.Hook) *dedupe.Redis {
	s.t.Helper()
	client := redis.NewClient(s.client.Options())
	s.t.Cleanup(func() { client.Close() })
	client.AddHook(hook)
	prefix, _ := strings.CutSuffix(s.Key(""), testScope+":")
	store, err := dedupe.NewRedis(client, dedupe.RedisConfig{Scope: testScope, Prefix: prefix})
	if err != nil {
		s.t.Fatal(err)
	}
	return store
}

func (s *redisStore) claim(owner string, lease time.Duration, ids ...string) []dedupe.Status {
	s.t.Helper()
	statuses, err := s.Claim(context.Background(), owner, ids, lease)
	if err != nil {
		s.t.Fatalf("Claim(%s, %v): %v", owner, ids, err)
	}
	if len(statuses) != len(ids) {
		s.t.Fatalf("Claim(%s, %v) returned %d statuses", owner, ids, len(statuses))
	}
	return statuses
}

// expect claims ids for owner and checks that each gets want.
func (s *redisStore) expect(owner string, want dedupe.Status, ids ...string) {
	s.t.Helper()
	for i, got := range s.claim(owner, time.Minute, ids...) {
		if got != want {
			s.t.Errorf("Claim by %s of %s = %v, want %v", owner, ids[i], got, want)
		}
	}
}

func (s *redisStore) done(ids ...string) {
	s.t.Helper()
	if err := s.Done(context.Background(), ids); err != nil {
		s.t.Fatalf("Done(%v): %v", ids, err)
	}
}

func (s *redisStore) release(owner string, ids ...string) {
	s.t.Helper()
	if err := s.Release(context.Background(), owner, ids); err != nil {
		s.t.Fatalf("Release(%s, %v): %v", owner, ids, err)
	}
}

func (s *redisStore) value(id string) string {
	s.t.Helper()
	v, err := s.client.Get(context.Background(), s.Key(id)).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		s.t.Fatal(err)
	}
	return v
}

func (s *redisStore) ttl(id string) time.Duration {
	s.t.Helper()
	d, err := s.client.PTTL(context.Background(), s.Key(id)).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	return d
}

func TestRedisClaimDoneClaim(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	s.expect("a", dedupe.Claimed, "evt-1")
	if got := s.value("evt-1"); got != "claim:a" {
		t.Errorf("claimed key holds %q, want claim:a", got)
	}
	if key, want := s.Key("evt-1"), strings.TrimSuffix(s.Key(""), "payouts:")+"payouts:evt-1"; key != want {
		t.Errorf("Key = %q, want %q", key, want)
	}
	s.expect("b", dedupe.Busy, "evt-1")
	s.expect("a", dedupe.Busy, "evt-1") // owner's own claim: the same id again waits
	if got := s.value("evt-1"); got != "claim:a" {
		t.Errorf("claims of a held id changed its key to %q", got)
	}

	before := time.Now().UnixMilli()
	s.done("evt-1")
	s.expect("a", dedupe.Processed, "evt-1")
	s.expect("b", dedupe.Processed, "evt-1")
	ms, err := strconv.ParseInt(strings.TrimPrefix(s.value("evt-1"), "done:"), 10, 64)
	if err != nil || ms < before || ms > time.Now().UnixMilli() {
		t.Errorf("processed key holds %q, want done:<unix ms of Done>", s.value("evt-1"))
	}
	if ttl := s.ttl("evt-1"); ttl <= dedupe.DefaultWindow-time.Minute || ttl > dedupe.DefaultWindow {
		t.Errorf("processed key expires in %v, want the default window %v", ttl, dedupe.DefaultWindow)
	}
}

func TestRedisReleaseOnlyOwnersClaim(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	s.expect("a", dedupe.Claimed, "evt-1", "evt-2")
	s.release("b", "evt-1", "evt-2")
	s.expect("b", dedupe.Busy, "evt-1", "evt-2")

	s.release("a", "evt-1", "never-claimed")
	s.expect("b", dedupe.Claimed, "evt-1")
	s.expect("b", dedupe.Busy, "evt-2")

	s.done("evt-2")
	s.release("a", "evt-2") // processed: not a's claim any more
	s.expect("c", dedupe.Processed, "evt-2")
}

func TestRedisLeaseExpires(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	s.claim("a", 50*time.Millisecond, "evt-1")
	testkit.WaitFor(t, 5*time.Second, "a's 50ms claim to expire", func() bool {
		return s.claim("b", time.Minute, "evt-1")[0] == dedupe.Claimed
	})
	if got := s.value("evt-1"); got != "claim:b" {
		t.Fatalf("key holds %q after b claimed it, want claim:b", got)
	}
}

func TestRedisWindowExpires(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{Window: 50 * time.Millisecond})
	s.done("evt-1")
	if ttl := s.ttl("evt-1"); ttl <= 0 || ttl > 50*time.Millisecond {
		t.Errorf("processed key expires in %v, want at most the 50ms window", ttl)
	}
	testkit.WaitFor(t, 5*time.Second, "the 50ms window to pass", func() bool {
		return s.claim("a", time.Minute, "evt-1")[0] == dedupe.Claimed
	})
}

func TestRedisExtend(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	ctx := context.Background()
	s.claim("a", 200*time.Millisecond, "evt-1", "evt-2")
	s.done("evt-2")
	if err := s.Extend(ctx, "b", []string{"evt-1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ttl := s.ttl("evt-1"); ttl > 200*time.Millisecond {
		t.Fatalf("another owner's Extend pushed the lease to %v", ttl)
	}
	if err := s.Extend(ctx, "a", []string{"evt-1", "evt-2", "never-claimed"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ttl := s.ttl("evt-1"); ttl <= time.Hour-time.Minute {
		t.Fatalf("claim expires in %v after Extend by its owner, want about 1h", ttl)
	}
	if ttl := s.ttl("evt-2"); ttl <= dedupe.DefaultWindow-time.Minute {
		t.Errorf("Extend changed a processed id's expiry to %v", ttl)
	}
	if got := s.value("never-claimed"); got != "" {
		t.Errorf("Extend created a key holding %q", got)
	}
	s.expect("b", dedupe.Busy, "evt-1")
}

// TestRedisBatchInOrder claims 1,000 ids in every state at once, and the
// same id twice in one batch.
func TestRedisBatchInOrder(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	ids := make([]string, 1000)
	want := make([]dedupe.Status, len(ids))
	var done, mine, others []string
	for i := range ids {
		ids[i] = fmt.Sprintf("evt-%d", i)
		switch i % 4 {
		case 0:
			done = append(done, ids[i])
			want[i] = dedupe.Processed
		case 1:
			others = append(others, ids[i])
			want[i] = dedupe.Busy
		case 2:
			mine = append(mine, ids[i])
			want[i] = dedupe.Busy
		case 3:
			want[i] = dedupe.Claimed
		}
	}
	s.done(done...)
	s.claim("other", time.Minute, others...)
	s.claim("me", time.Minute, mine...)
	got := s.claim("me", time.Minute, ids...)
	for i := range ids {
		if got[i] != want[i] {
			t.Errorf("status %d (%s) = %v, want %v", i, ids[i], got[i], want[i])
		}
	}

	twice := s.claim("me", time.Minute, "dup", "dup")
	if twice[0] != dedupe.Claimed || twice[1] != dedupe.Busy {
		t.Errorf("the same id twice in a batch: %v, want [claimed busy]", twice)
	}
	if got := s.claim("me", time.Minute); len(got) != 0 {
		t.Errorf("Claim of no ids = %v, want none", got)
	}
}

func TestRedisConcurrentClaimersClaimEachIDOnce(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt-%d", i)
	}
	const claimers = 8
	results := make([][]dedupe.Status, claimers)
	errs := make([]error, claimers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for c := range claimers {
		wg.Go(func() {
			<-start
			results[c], errs[c] = s.Claim(context.Background(), fmt.Sprintf("owner-%d", c), ids, time.Minute)
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		var claimed []int
		for c := range claimers {
			switch results[c][i] {
			case dedupe.Claimed:
				claimed = append(claimed, c)
			case dedupe.Busy:
			default:
				t.Errorf("%s: claimer %d got %v, want claimed or busy", id, c, results[c][i])
			}
		}
		if len(claimed) != 1 {
			t.Errorf("%s claimed by %v, want exactly one claimer", id, claimed)
			continue
		}
		if got, want := s.value(id), fmt.Sprintf("claim:owner-%d", claimed[0]); got != want {
			t.Errorf("%s holds %q, want %q", id, got, want)
		}
	}
}

// pipelineHook runs before before each pipeline whose first command is
// named name, with the pipeline's keys.
type pipelineHook struct {
	name   string
	before func(keys []string)
}

func (h pipelineHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() == h.name {
			var keys []string
			for _, c := range cmds {
				keys = append(keys, *c.Args()[1].(*string))
			}
			h.before(keys)
		}
		return next(ctx, cmds)
	}
}

// TestRedisClaimsAKeyThatExpiredMeanwhile makes a taken key vanish between
// Claim's SET NX and its GET, as an expiring lease would: Claim tries the
// SET NX again and wins.
func TestRedisClaimsAKeyThatExpiredMeanwhile(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	s.claim("other", time.Minute, "evt-1")
	var gets atomic.Int32
	store := s.withHook(pipelineHook{name: "get", before: func(keys []string) {
		gets.Add(1)
		s.client.Del(context.Background(), keys...)
	}})
	got, err := store.Claim(context.Background(), "me", []string{"evt-0", "evt-1"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != dedupe.Claimed || got[1] != dedupe.Claimed || gets.Load() != 1 {
		t.Fatalf("Claim = %v after %d reads, want [claimed claimed] after 1", got, gets.Load())
	}
	if v := s.value("evt-1"); v != "claim:me" {
		t.Fatalf("evt-1 holds %q, want claim:me", v)
	}
}

// TestRedisClaimGivesUpOnAFlappingKey makes a key vanish before every read
// and come back before every SET NX: after three rounds Claim reports it
// Busy rather than loop.
func TestRedisClaimGivesUpOnAFlappingKey(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	var gets atomic.Int32
	flapping := s.withHook(hooks{
		pipelineHook{name: "get", before: func(keys []string) {
			gets.Add(1)
			s.client.Del(context.Background(), keys...)
		}},
		pipelineHook{name: "set", before: func(keys []string) {
			s.client.Set(context.Background(), s.Key("evt-1"), "claim:other", time.Minute)
		}},
	})
	got, err := flapping.Claim(context.Background(), "me", []string{"evt-1"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != dedupe.Busy || gets.Load() != 3 {
		t.Fatalf("Claim = %v after %d reads, want [busy] after 3", got, gets.Load())
	}
}

// hooks chains several hooks in one.
type hooks []pipelineHook

func (h hooks) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h hooks) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h hooks) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	for _, hook := range h {
		next = hook.ProcessPipelineHook(next)
	}
	return next
}

// TestRedisFailedClaimReleasesItsClaims fails Claim's second round trip: the
// ids its first one claimed are free again, and the error says what failed.
func TestRedisFailedClaimReleasesItsClaims(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	s.claim("other", time.Minute, "evt-1")
	s.claim("me", time.Minute, "held-before")
	boom := errors.New("boom")
	failing := s.withHook(failingGets{boom})
	_, err := failing.Claim(context.Background(), "me", []string{"evt-0", "evt-1", "evt-2", "held-before"}, time.Minute)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "payouts") {
		t.Fatalf("Claim = %v, want the GET's error in context", err)
	}
	for id, want := range map[string]string{"evt-0": "", "evt-2": "", "evt-1": "claim:other", "held-before": "claim:me"} {
		if got := s.value(id); got != want {
			t.Errorf("after the failed Claim %s holds %q, want %q", id, got, want)
		}
	}
}

// failingGets fails every GET pipeline with err.
type failingGets struct{ err error }

func (h failingGets) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h failingGets) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h failingGets) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "get" {
			for _, c := range cmds {
				c.SetErr(h.err)
			}
			return h.err
		}
		return next(ctx, cmds)
	}
}

// TestRedisScriptsSurviveAScriptFlush empties Redis's script cache, as a
// restart does: Release and Extend load their scripts again.
func TestRedisScriptsSurviveAScriptFlush(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	ctx := context.Background()
	s.claim("a", time.Minute, "evt-1", "evt-2")
	for _, call := range []func() error{
		func() error { return s.Extend(ctx, "a", []string{"evt-2"}, time.Hour) },
		func() error { return s.Release(ctx, "a", []string{"evt-1"}) },
	} {
		if err := s.client.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if err := call(); err != nil {
			t.Fatalf("after SCRIPT FLUSH: %v", err)
		}
	}
	if s.value("evt-1") != "" || s.ttl("evt-2") < time.Hour-time.Minute {
		t.Fatalf("after SCRIPT FLUSH Release or Extend had no effect: evt-1 %q, evt-2 expires in %v", s.value("evt-1"), s.ttl("evt-2"))
	}
}

func TestRedisUnreachableSaysHowToStartIt(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	defer client.Close()
	store, err := dedupe.NewRedis(client, dedupe.RedisConfig{Scope: testScope})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"Claim":   func() error { _, err := store.Claim(ctx, "a", []string{"evt-1"}, time.Minute); return err },
		"Done":    func() error { return store.Done(ctx, []string{"evt-1"}) },
		"Release": func() error { return store.Release(ctx, "a", []string{"evt-1"}) },
		"Extend":  func() error { return store.Extend(ctx, "a", []string{"evt-1"}, time.Minute) },
	} {
		err := call()
		if _, isNet := errors.AsType[*net.OpError](err); !isNet || !strings.Contains(err.Error(), "make services") {
			t.Errorf("%s against a closed port = %v, want a *net.OpError and a hint to run make services", name, err)
		}
	}
	// No ids: no round trip, so no error.
	if got, err := store.Claim(ctx, "a", nil, time.Minute); err != nil || len(got) != 0 {
		t.Errorf("Claim of no ids = %v, %v; want nothing, without a round trip", got, err)
	}
	for name, err := range map[string]error{
		"Done":    store.Done(ctx, nil),
		"Release": store.Release(ctx, "a", nil),
		"Extend":  store.Extend(ctx, "a", nil, time.Minute),
	} {
		if err != nil {
			t.Errorf("%s of no ids = %v, want nil without a round trip", name, err)
		}
	}
}

func TestRedisHonorsContext(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Claim(ctx, "a", []string{"evt-1"}, time.Minute); !errors.Is(err, context.Canceled) {
		t.Fatalf("Claim with a canceled context = %v, want context.Canceled", err)
	}
	if err := s.Done(ctx, []string{"evt-1"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Done with a canceled context = %v, want context.Canceled", err)
	}
	s.expect("a", dedupe.Claimed, "evt-1")
}

func TestRedisRejectsLeasesBelowAMillisecond(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	ctx := context.Background()
	if _, err := s.Claim(ctx, "a", []string{"evt-1"}, time.Microsecond); !errors.Is(err, dedupe.ErrInvalidArgument) {
		t.Errorf("Claim with a 1µs lease = %v, want ErrInvalidArgument", err)
	}
	if err := s.Extend(ctx, "a", []string{"evt-1"}, 0); !errors.Is(err, dedupe.ErrInvalidArgument) {
		t.Errorf("Extend with no lease = %v, want ErrInvalidArgument", err)
	}
}

func TestNewRedisRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	newRedis := func(c redis.UniversalClient, cfg dedupe.RedisConfig) error { return errOf(dedupe.NewRedis(c, cfg)) }
	expectInvalidConfig(t, []invalidConfig{
		{newRedis(nil, dedupe.RedisConfig{Scope: "payouts"}), "client is nil"},
		{newRedis(client, dedupe.RedisConfig{}), "set Scope, usually the consumer group"},
		{newRedis(client, dedupe.RedisConfig{Scope: "shop:payouts"}), `Scope "shop:payouts" contains ':'`},
		{newRedis(client, dedupe.RedisConfig{Scope: "payouts", Window: -time.Second}), "Window is -1s; use a positive duration"},
		{newRedis(client, dedupe.RedisConfig{Scope: "payouts", Window: time.Microsecond}), "use at least 1ms"},
	})
	s, err := dedupe.NewRedis(client, dedupe.RedisConfig{Scope: "payouts"})
	if err != nil || s.Key("evt-1") != "courier:dedupe:payouts:evt-1" {
		t.Fatalf("defaults: %v, key %q; want courier:dedupe:payouts:evt-1", err, s.Key("evt-1"))
	}
}

// BenchmarkRedisClaimDone measures what deduplication costs the consumer per
// message on the Redis store: a batch of 256 new ids claimed and then
// marked processed (two round trips), against go-redis pipelining the same
// SET NX and SET commands by hand.
func BenchmarkRedisClaimDone(b *testing.B) {
	const batch = 256
	s := newRedisStore(b, dedupe.RedisConfig{Window: 2 * time.Second}) // keys go away on their own
	ctx := context.Background()
	var seq atomic.Int64
	nextBatch := func() []string {
		ids := make([]string, batch)
		for i := range ids {
			ids[i] = "evt-" + strconv.FormatInt(seq.Add(1), 10)
		}
		return ids
	}
	// pipelined is the baseline: one pipeline of cmd per id.
	pipelined := func(ids []string, cmd func(p redis.Pipeliner, key string)) error {
		_, err := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, id := range ids {
				cmd(p, s.Key(id))
			}
			return nil
		})
		return err
	}
	for _, run := range []struct {
		name      string
		claimDone func(ids []string) error
	}{
		{"store", func(ids []string) error {
			statuses, err := s.Claim(ctx, "bench", ids, time.Second)
			if err == nil && statuses[batch-1] != dedupe.Claimed {
				err = fmt.Errorf("a new id is %v", statuses[batch-1])
			}
			return errors.Join(err, s.Done(ctx, ids))
		}},
		{"go-redis", func(ids []string) error {
			return errors.Join(
				pipelined(ids, func(p redis.Pipeliner, key string) { p.SetNX(ctx, key, "claim:bench", time.Second) }),
				pipelined(ids, func(p redis.Pipeliner, key string) { p.Set(ctx, key, "done:1", 2*time.Second) }),
			)
		}},
	} {
		b.Run(run.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				ids := nextBatch()
				b.StartTimer()
				if err := run.claimDone(ids); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/id")
		})
	}
}
