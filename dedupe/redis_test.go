package dedupe_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
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

func (s *redisStore) done(owner string, ids ...string) {
	s.t.Helper()
	if err := s.Done(context.Background(), owner, ids); err != nil {
		s.t.Fatalf("Done(%s, %v): %v", owner, ids, err)
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
	return s.pttl(s.Key(id))
}

// pttl is how long key lives on, as Redis says: -2ns when it is gone,
// -1ns when it does not expire.
func (s *redisStore) pttl(key string) time.Duration {
	s.t.Helper()
	d, err := s.client.PTTL(context.Background(), key).Result()
	if err != nil {
		s.t.Fatal(err)
	}
	return d
}

// claimAtOnce has n owners (owner-0, owner-1, …) claim ids at the same
// time, and returns each one's statuses.
func (s *redisStore) claimAtOnce(n int, ids []string) [][]dedupe.Status {
	s.t.Helper()
	results := make([][]dedupe.Status, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for c := range n {
		wg.Go(func() {
			<-start
			results[c], errs[c] = s.Claim(context.Background(), fmt.Sprintf("owner-%d", c), ids, time.Minute)
		})
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		s.t.Fatal(err)
	}
	return results
}

// expectOneClaimerEach checks that each id was claimed by exactly one of
// the owners of claimAtOnce, Busy for the others, and holds its claim.
func (s *redisStore) expectOneClaimerEach(ids []string, results [][]dedupe.Status) {
	s.t.Helper()
	for i, id := range ids {
		var claimed []int
		for c := range results {
			switch results[c][i] {
			case dedupe.Claimed:
				claimed = append(claimed, c)
			case dedupe.Busy:
			default:
				s.t.Errorf("%s: claimer %d got %v, want claimed or busy", id, c, results[c][i])
			}
		}
		if len(claimed) != 1 {
			s.t.Errorf("%s claimed by %v, want exactly one claimer", id, claimed)
			continue
		}
		if got, want := s.value(id), claimValue(fmt.Sprintf("owner-%d", claimed[0])); got != want {
			s.t.Errorf("%s holds %q, want %q", id, got, want)
		}
	}
}

// claimValue is what the key of an id owner claimed holds.
func claimValue(owner string) string { return "claim:" + dedupe.Token(owner) }

func TestRedisClaimDoneClaim(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	ctx := context.Background()
	s.expect("a", dedupe.Claimed, "evt-1")
	if got, want := s.value("evt-1"), claimValue("a"); got != want {
		t.Errorf("claimed key holds %q, want %q", got, want)
	}
	if key, want := s.Key("evt-1"), strings.TrimSuffix(s.Key(""), "payouts:")+"payouts:evt-1"; key != want {
		t.Errorf("Key = %q, want %q", key, want)
	}
	if ttl, want := s.ttl("evt-1"), dedupe.DefaultWindow+time.Minute; ttl <= want-time.Minute || ttl > want {
		t.Errorf("claimed key expires in %v, want the default window and the 1m lease, %v", ttl, want)
	}
	lease := s.LeaseKey("a")
	if got, err := s.client.Get(ctx, lease).Result(); err != nil || got != "a" {
		t.Errorf("lease key %s holds %q, %v; want the owner a", lease, got, err)
	}
	if ttl := s.pttl(lease); ttl <= 0 || ttl > time.Minute {
		t.Errorf("lease key expires in %v, want within the 1m lease", ttl)
	}
	s.expect("b", dedupe.Busy, "evt-1")
	s.expect("a", dedupe.Busy, "evt-1") // owner's own claim: the same id again waits
	if got, want := s.value("evt-1"), claimValue("a"); got != want {
		t.Errorf("claims of a held id changed its key to %q", got)
	}

	s.done("a", "evt-1")
	s.expect("a", dedupe.Processed, "evt-1")
	s.expect("b", dedupe.Processed, "evt-1")
	if member, err := s.client.SIsMember(ctx, s.DoneKey("a"), "evt-1").Result(); err != nil || !member {
		t.Errorf("SISMEMBER %s evt-1 = %v, %v; want the id in a's done set", s.DoneKey("a"), member, err)
	}
	if ttl := s.pttl(s.DoneKey("a")); ttl <= dedupe.DefaultWindow-time.Minute || ttl > dedupe.DefaultWindow {
		t.Errorf("done set expires in %v, want the default window %v", ttl, dedupe.DefaultWindow)
	}
	if got, want := s.value("evt-1"), claimValue("a"); got != want {
		t.Errorf("Done rewrote the id's key to %q; it stays %q", got, want)
	}
}

// TestRedisOwnersKeysNeverMeetIDsKeys: an owner's lease and done set live
// under a prefix no id's key can have, whatever the id.
func TestRedisOwnersKeysNeverMeetIDsKeys(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	idPrefix := s.Key("")
	for _, owner := range []string{"a", "", "lease:x", "payouts:done:y"} {
		for _, key := range []string{s.LeaseKey(owner), s.DoneKey(owner)} {
			if strings.HasPrefix(key, idPrefix) {
				t.Errorf("owner %q's key %q starts like the ids' keys (%q)", owner, key, idPrefix)
			}
		}
	}
	if s.LeaseKey("a") == s.DoneKey("a") || s.DoneKey("a") == s.DoneKey("b") {
		t.Errorf("owners' keys collide: %q %q %q", s.LeaseKey("a"), s.DoneKey("a"), s.DoneKey("b"))
	}
	if tok := dedupe.Token(strings.Repeat("x", 10_000)); len(tok) != 16 {
		t.Errorf("Token of a long owner = %q, want 16 characters", tok)
	}
}

// TestRedisTakesOverTheClaimsOfAnOwnerThatDied: once an owner's lease ran
// out, what it marked stays processed and what it did not is claimed by
// the next owner: nothing is skipped that was not done.
func TestRedisTakesOverTheClaimsOfAnOwnerThatDied(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	s.claim("a", 50*time.Millisecond, "evt-1", "evt-2")
	s.done("a", "evt-2")
	testkit.WaitFor(t, 5*time.Second, "a's 50ms lease to run out", func() bool { return s.pttl(s.LeaseKey("a")) < 0 })
	got := s.claim("b", time.Minute, "evt-1", "evt-2")
	if got[0] != dedupe.Claimed || got[1] != dedupe.Processed {
		t.Fatalf("after a's lease ran out: %v, want [claimed processed]", got)
	}
	if got, want := s.value("evt-1"), claimValue("b"); got != want {
		t.Errorf("evt-1 holds %q, want %q", got, want)
	}
	// a wakes up and marks evt-1: b holds it now, and b's mark decides.
	s.done("a", "evt-1")
	s.expect("c", dedupe.Busy, "evt-1")
	s.done("b", "evt-1")
	s.expect("c", dedupe.Processed, "evt-1")
}

// TestRedisReadsOtherValues: a key holding done:<unix ms> (a mark of an
// earlier layout) is processed, and a claim of an earlier layout (its
// owner itself, not a token) is Busy until it expires. A value courier
// does not write, an empty one too, or a key of another type, fails the
// call with ErrInvalidID, naming the key quoted whole (control characters
// escaped), so that the consumer dead-letters the message rather than
// wait on a key that may never expire; the ids the call claimed are
// released, and the key is left alone.
func TestRedisReadsOtherValues(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	ctx := context.Background()
	const oldClaim = "claim:orders/0/9b2f4c1e-aaaa-bbbb-cccc-000000000001/7"
	s.client.Set(ctx, s.Key("old-mark"), "done:1795500029261", time.Minute)
	s.client.Set(ctx, s.Key("old-claim"), oldClaim, time.Minute)
	got := s.claim("a", time.Minute, "old-mark", "old-claim")
	if got[0] != dedupe.Processed || got[1] != dedupe.Busy {
		t.Fatalf("Claim = %v, want [processed busy]", got)
	}
	for _, tc := range []struct {
		id    string
		write func(key string) error
	}{
		{"foreign", func(key string) error { return s.client.Set(ctx, key, "something\x1b[31m else", 0).Err() }}, // no expiry: it would wait forever
		{"empty", func(key string) error { return s.client.Set(ctx, key, "", 0).Err() }},
		{"a hash", func(key string) error { return s.client.HSet(ctx, key, "f", "v").Err() }},
		{"evt\x1b[31m\nFAKE LOG LINE", func(key string) error { return s.client.Set(ctx, key, "x", 0).Err() }},
	} {
		if err := tc.write(s.Key(tc.id)); err != nil {
			t.Fatal(err)
		}
		_, err := s.Claim(ctx, "b/"+tc.id, []string{"fresh-" + tc.id, tc.id}, time.Minute)
		if !errors.Is(err, dedupe.ErrInvalidID) || !strings.Contains(err.Error(), strconv.Quote(s.Key(tc.id))) || strings.ContainsAny(err.Error(), "\x1b\n") {
			t.Errorf("Claim of %q = %v; want ErrInvalidID naming its key, quoted, without raw control characters", tc.id, err)
		}
		if v := s.value("fresh-" + tc.id); v != "" {
			t.Errorf("the failed Claim left fresh-%q claimed (%q)", tc.id, v)
		}
		if typ := s.client.Type(ctx, s.Key(tc.id)).Val(); typ == "none" {
			t.Errorf("Claim deleted the key of %q", tc.id)
		}
	}
	if v := s.value("old-claim"); v != oldClaim {
		t.Errorf("Claim changed a claim of an earlier layout to %q", v)
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

	s.done("a", "evt-2")
	s.release("b", "evt-2") // not b's to release
	s.release("a", "evt-2") // processed: a's mark stays
	s.expect("c", dedupe.Processed, "evt-2")
}

func TestRedisLeaseExpires(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	s.claim("a", 50*time.Millisecond, "evt-1")
	testkit.WaitFor(t, 5*time.Second, "a's 50ms claim to expire", func() bool {
		return s.claim("b", time.Minute, "evt-1")[0] == dedupe.Claimed
	})
	if got, want := s.value("evt-1"), claimValue("b"); got != want {
		t.Fatalf("key holds %q after b claimed it, want %q", got, want)
	}
}

func TestRedisWindowExpires(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{Window: 50 * time.Millisecond})
	s.claim("a", 20*time.Millisecond, "evt-1")
	s.done("a", "evt-1")
	if ttl := s.ttl("evt-1"); ttl <= 0 || ttl > 70*time.Millisecond {
		t.Errorf("processed key expires in %v, want at most the 50ms window and the 20ms lease", ttl)
	}
	if ttl := s.pttl(s.DoneKey("a")); ttl <= 0 || ttl > 50*time.Millisecond {
		t.Errorf("done set expires in %v, want at most the 50ms window", ttl)
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
	s.done("a", "evt-2")
	if err := s.Extend(ctx, "b", []string{"evt-1"}, time.Hour); !errors.Is(err, dedupe.ErrLeaseLost) {
		t.Fatalf("Extend by an owner without a lease = %v, want ErrLeaseLost", err)
	}
	if ttl := s.pttl(s.LeaseKey("a")); ttl > 200*time.Millisecond {
		t.Fatalf("another owner's Extend pushed a's lease to %v", ttl)
	}
	if ttl := s.pttl(s.LeaseKey("b")); ttl != -2*time.Nanosecond {
		t.Fatalf("Extend started a lease for b, which claimed nothing (PTTL %v)", ttl)
	}
	if err := s.Extend(ctx, "a", []string{"evt-1", "evt-2", "never-claimed"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ttl := s.pttl(s.LeaseKey("a")); ttl <= time.Hour-time.Minute {
		t.Fatalf("lease expires in %v after Extend by its owner, want about 1h", ttl)
	}
	if ttl := s.ttl("evt-2"); ttl <= dedupe.DefaultWindow-time.Minute {
		t.Errorf("Extend changed a processed id's expiry to %v", ttl)
	}
	if got := s.value("never-claimed"); got != "" {
		t.Errorf("Extend created a key holding %q", got)
	}
	s.expect("b", dedupe.Busy, "evt-1")

	// A lease that ran out is not started again: its ids may be another's.
	s.claim("c", 50*time.Millisecond, "evt-3")
	testkit.WaitFor(t, 5*time.Second, "c's 50ms lease to run out", func() bool { return s.pttl(s.LeaseKey("c")) < 0 })
	if err := s.Extend(ctx, "c", []string{"evt-3"}, time.Hour); !errors.Is(err, dedupe.ErrLeaseLost) {
		t.Fatalf("Extend of a lease that ran out = %v, want ErrLeaseLost", err)
	}
	s.expect("d", dedupe.Claimed, "evt-3")
}

// TestRedisExtendKeepsKeysPastTheLease: with a window shorter than the
// lease, Extend pushes the ids' keys too, so that none runs out while its
// claim is held.
func TestRedisExtendKeepsKeysPastTheLease(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{Window: time.Second})
	s.claim("a", 2*time.Second, "evt-1")
	if ttl := s.ttl("evt-1"); ttl <= 2*time.Second || ttl > 3*time.Second {
		t.Fatalf("key expires in %v, want the 1s window and the 2s lease", ttl)
	}
	if err := s.Extend(context.Background(), "a", []string{"evt-1"}, time.Hour); err != nil {
		t.Fatal(err)
	}
	if ttl := s.ttl("evt-1"); ttl <= time.Hour {
		t.Fatalf("key expires in %v after Extend, want the 1h lease and the 1s window", ttl)
	}
}

// TestRedisWindowCountsFromTheMark: an id marked processed late in its
// claim's lease stays processed for the window from its mark, not from
// its claim.
func TestRedisWindowCountsFromTheMark(t *testing.T) {
	t.Parallel()
	const window, lease = time.Second, time.Second
	s := newRedisStore(t, dedupe.RedisConfig{Window: window})
	s.claim("a", lease, "evt-1")
	testkit.WaitFor(t, 5*time.Second, "most of the lease to pass", func() bool { return s.pttl(s.LeaseKey("a")) < 200*time.Millisecond })
	s.done("a", "evt-1")
	// 300ms after the mark, over a second after the claim: more than the
	// window since the claim, less since the mark.
	testkit.WaitFor(t, 5*time.Second, "300ms to pass since the mark", func() bool { return s.pttl(s.DoneKey("a")) < window-300*time.Millisecond })
	s.expect("b", dedupe.Processed, "evt-1")
	testkit.WaitFor(t, 5*time.Second, "the window to pass since the mark", func() bool {
		return s.claim("b", time.Minute, "evt-1")[0] == dedupe.Claimed
	})
}

// TestRedisConcurrentTakeoversClaimOnce: the ids of an owner whose lease
// ran out, claimed by eight owners at once, are each taken over by one.
func TestRedisConcurrentTakeoversClaimOnce(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	ids := make([]string, 200)
	for i := range ids {
		ids[i] = fmt.Sprintf("evt-%d", i)
	}
	s.claim("dead", time.Millisecond, ids...)
	testkit.WaitFor(t, 5*time.Second, "dead's lease to run out", func() bool { return s.pttl(s.LeaseKey("dead")) < 0 })
	s.expectOneClaimerEach(ids, s.claimAtOnce(8, ids))
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
	s.claim("doer", time.Minute, done...)
	s.done("doer", done...)
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
	s.expectOneClaimerEach(ids, s.claimAtOnce(8, ids))
}

// pipelineHook runs before before each pipeline holding a command named
// name, with the keys of those commands.
type pipelineHook struct {
	name   string
	before func(keys []string)
}

func (h pipelineHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var keys []string
		for _, c := range cmds {
			if c.Name() == h.name {
				keys = append(keys, keyOf(c))
			}
		}
		if len(keys) > 0 {
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
	if got, want := s.value("evt-1"), claimValue("me"); got != want {
		t.Fatalf("evt-1 holds %q, want %q", got, want)
	}
}

// TestRedisClaimGivesUpOnAFlappingKey makes a key vanish before every read
// and come back before every takeover: after three rounds Claim reports it
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
			s.client.Set(context.Background(), s.Key("evt-1"), claimValue("other"), time.Minute)
		}},
		pipelineHook{name: "evalsha", before: func(keys []string) {
			s.client.Set(context.Background(), s.Key("evt-1"), claimValue("other"), time.Minute)
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

// keyOf returns the key of a command of the store: the one after the
// script of EVAL and EVALSHA, else the first argument.
func keyOf(c redis.Cmder) string {
	at := 1
	if c.Name() == "eval" || c.Name() == "evalsha" {
		at = 3
	}
	switch k := c.Args()[at].(type) {
	case *string:
		return *k
	case string:
		return k
	}
	return fmt.Sprint(c.Args()[at])
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
	for id, want := range map[string]string{"evt-0": "", "evt-2": "", "evt-1": claimValue("other"), "held-before": claimValue("me")} {
		if got := s.value(id); got != want {
			t.Errorf("after the failed Claim %s holds %q, want %q", id, got, want)
		}
	}
}

// TestRedisClaimWhoseLeaseFailsReleasesItsClaims fails the SET of the
// owner's lease: Claim fails, and the ids it claimed beside it are free
// again, since no lease covers them.
func TestRedisClaimWhoseLeaseFailsReleasesItsClaims(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{})
	boom := errors.New("boom")
	failing := s.withHook(failingLease{boom})
	_, err := failing.Claim(context.Background(), "me", []string{"evt-0", "evt-1"}, time.Minute)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "lease") {
		t.Fatalf("Claim = %v, want the lease's error", err)
	}
	for _, id := range []string{"evt-0", "evt-1"} {
		if got := s.value(id); got != "" {
			t.Errorf("after the failed Claim %s holds %q, want it free", id, got)
		}
	}
}

// failingLease fails the SET of a lease key in a pipeline with err.
type failingLease struct{ err error }

func (h failingLease) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h failingLease) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h failingLease) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Name() == "set" && strings.Contains(keyOf(c), ":lease:") {
				c.SetErr(h.err)
			}
		}
		return err
	}
}

// TestRedisRingSetsTheLeaseBeforeTheClaims: a ring (as a cluster) sends
// the parts of a pipeline to its shards at once, so Claim sets the lease
// in a round trip of its own before any claim is sent; otherwise a claim
// could be seen without its lease and taken over as abandoned.
func TestRedisRingSetsTheLeaseBeforeTheClaims(t *testing.T) {
	t.Parallel()
	r := testkit.NewRedis(t)
	opts := r.Client.Options()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": opts.Addr, "b": opts.Addr}, DB: opts.DB})
	t.Cleanup(func() { ring.Close() })
	var mu sync.Mutex
	var order []string
	ring.AddHook(orderHook{record: func(what string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, what)
	}})
	store, err := dedupe.NewRedis(ring, dedupe.RedisConfig{Scope: testScope, Prefix: r.Prefix})
	if err != nil {
		t.Fatal(err)
	}
	got, err := store.Claim(context.Background(), "me", []string{"evt-1", "evt-2"}, time.Minute)
	if err != nil || got[0] != dedupe.Claimed || got[1] != dedupe.Claimed {
		t.Fatalf("Claim = %v, %v; want both claimed", got, err)
	}
	if len(order) < 2 || order[0] != "lease set" || order[1] != "claims sent" {
		t.Fatalf("order of events %v, want the lease set before the claims are sent", order)
	}
}

// orderHook records when a lone SET of a lease key returns, and when a
// pipeline of SET commands starts.
type orderHook struct{ record func(string) }

func (h orderHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h orderHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "set" && strings.Contains(keyOf(cmd), ":lease:") {
			h.record("lease set")
		}
		return err
	}
}
func (h orderHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[len(cmds)-1].Name() == "set" {
			h.record("claims sent")
		}
		return next(ctx, cmds)
	}
}

// failingGets fails every GET pipeline with err.
type failingGets struct{ err error }

func (h failingGets) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h failingGets) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h failingGets) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "get" }) {
			for _, c := range cmds {
				c.SetErr(h.err)
			}
			return h.err
		}
		return next(ctx, cmds)
	}
}

// TestRedisScriptsSurviveAScriptFlush empties Redis's script cache, as a
// restart does: Release, Extend and a takeover load their scripts again.
func TestRedisScriptsSurviveAScriptFlush(t *testing.T) {
	t.Parallel()
	s := newRedisStore(t, dedupe.RedisConfig{Window: time.Minute}) // Extend to 1h raises the keys
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
	s.claim("dead", time.Millisecond, "evt-3", "evt-4")
	testkit.WaitFor(t, 5*time.Second, "dead's lease to run out", func() bool { return s.pttl(s.LeaseKey("dead")) < 0 })
	if err := s.client.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	s.expect("b", dedupe.Claimed, "evt-3", "evt-4")
	for _, id := range []string{"evt-3", "evt-4"} {
		if got, want := s.value(id), claimValue("b"); got != want {
			t.Errorf("after SCRIPT FLUSH the takeover left %s holding %q, want %q", id, got, want)
		}
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
		"Done":    func() error { return store.Done(ctx, "a", []string{"evt-1"}) },
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
		"Done":    store.Done(ctx, "a", nil),
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
	if err := s.Done(ctx, "a", []string{"evt-1"}); !errors.Is(err, context.Canceled) {
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
// commands by hand: SET of the lease and SET NX per id, then SADD and
// PEXPIRE of the done set.
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
	for _, run := range []struct {
		name      string
		claimDone func(ids []string) error
	}{
		{"store", func(ids []string) error {
			owner := "bench/" + ids[0]
			statuses, err := s.Claim(ctx, owner, ids, time.Second)
			if err == nil && statuses[batch-1] != dedupe.Claimed {
				err = fmt.Errorf("a new id is %v", statuses[batch-1])
			}
			return errors.Join(err, s.Done(ctx, owner, ids))
		}},
		{"go-redis", func(ids []string) error {
			owner := "bench/" + ids[0]
			_, claimErr := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Set(ctx, s.LeaseKey(owner), owner, time.Second)
				for _, id := range ids {
					p.SetNX(ctx, s.Key(id), "claim:"+dedupe.Token(owner), 2*time.Second)
				}
				return nil
			})
			_, doneErr := s.client.Pipelined(ctx, func(p redis.Pipeliner) error {
				members := make([]any, len(ids))
				for i, id := range ids {
					members[i] = id
				}
				p.SAdd(ctx, s.DoneKey(owner), members...)
				p.PExpire(ctx, s.DoneKey(owner), 2*time.Second)
				return nil
			})
			return errors.Join(claimErr, doneErr)
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
