package producer_test

// Fault tests for the relay: relay processes killed with SIGKILL in the
// middle of their batches, and a relay whose PostgreSQL backends are
// terminated under it. They check the guarantees (docs/guarantees.md) of at-least-once
// delivery (nothing lost, nothing stuck, duplicates keep their ce_id) and of
// per-key order on what actually arrives on Kafka.

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	mathrand "math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/courierkit/courier/internal/testkit"
	"github.com/courierkit/courier/producer"
)

// The environment of TestRelayChildProcess. The database URL also tells it
// that it is a child: without it the test does nothing.
const (
	faultChildDatabaseURL = "COURIER_RELAY_CHILD_DATABASE_URL"
	faultChildSchema      = "COURIER_RELAY_CHILD_SCHEMA"
	faultChildBrokers     = "COURIER_RELAY_CHILD_BROKERS"
	faultChildAppName     = "COURIER_RELAY_CHILD_APP_NAME"
	faultChildBatchSize   = "COURIER_RELAY_CHILD_BATCH_SIZE"
)

// TestRelayKilledMidBatchLosesNothing runs the relay in a child process,
// SIGKILLs it several times while batches are in flight and restarts it.
// Nothing may be lost or left stuck, no session of a dead relay may keep
// holding locks, and per key the first copies of the records on Kafka
// arrive in enqueue order. (A kill between publish and settle makes the
// next relay publish the batch again: duplicates that replay events Kafka
// already had, with the same ce_id.)
func TestRelayKilledMidBatchLosesNothing(t *testing.T) {
	t.Parallel()
	const (
		total     = 3000
		keys      = 50
		chunk     = 100 // events per EnqueueBatch
		batchSize = keys
		kills     = 5
		perKill   = total / (kills + 2) // published events between kills
	)
	pg, out := setup(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 3)
	kafka := consume(t, k, topic)
	ctx := context.Background()

	events, want := faultEvents(topic, total, keys)
	for i := 0; i < total; i += chunk {
		if _, err := out.EnqueueBatch(ctx, pg.Pool, events[i:min(i+chunk, total)]); err != nil {
			t.Fatal(err)
		}
	}

	app := faultAppName("courier-relay-child")
	env := []string{
		faultChildDatabaseURL + "=" + pg.URL,
		faultChildSchema + "=" + pg.Schema,
		faultChildBrokers + "=" + strings.Join(k.Brokers, ","),
		faultChildAppName + "=" + app,
		faultChildBatchSize + "=" + strconv.Itoa(batchSize),
	}
	published := func() int { return countRows(t, pg.Pool, "status = 'published'") }

	var children []*testkit.Child
	frozen := 0
	for i := range kills {
		child := testkit.StartChild(t, "TestRelayChildProcess", env)
		children = append(children, child)
		target := min(published()+perKill, total)
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("child %d to publish up to %d events", i+1, target), func() bool {
			return published() >= target
		})
		// Every other kill lands at a chosen point: the batch is on Kafka
		// and its settle waits, so it must come again. The others land
		// wherever the child happens to be.
		mode := "wherever the child was"
		if i%2 == 1 {
			faultKillInSettle(t, pg.Pool, app, func() { child.Kill(t) })
			mode = "after the batch was on Kafka, before its settle"
			frozen++
		} else {
			child.Kill(t)
		}
		at := published()
		left := faultSessions(t, pg.Pool, app, "true")
		// The kernel closed the dead child's sockets; its backends must see
		// that and end, rolling back the claim they held.
		testkit.WaitFor(t, 15*time.Second, fmt.Sprintf("the sessions of killed child %d (%s) to end", i+1, app), func() bool {
			return faultSessions(t, pg.Pool, app, "true") == 0
		})
		t.Logf("kill %d: SIGKILL %s at %d/%d published; %d of its sessions still open right after", i+1, mode, at, total, left)
		if at == total {
			t.Logf("kill %d came after everything was published: it tested an idle relay", i+1)
		}
	}

	final := testkit.StartChild(t, "TestRelayChildProcess", env)
	children = append(children, final)
	testkit.WaitFor(t, 30*time.Second, "the last child to publish every event", func() bool {
		return countRows(t, pg.Pool, "status IN ('pending', 'failed')") == 0
	})
	final.Stop(t)
	testkit.WaitFor(t, 15*time.Second, "the sessions of the stopped child to end", func() bool {
		return faultSessions(t, pg.Pool, app, "true") == 0
	})

	if n := countRows(t, pg.Pool, "status IN ('pending', 'failed')"); n != 0 {
		t.Errorf("%d events stuck in pending or failed", n)
	}
	if n := countRows(t, pg.Pool, "status = 'dead_lettered'"); n != 0 {
		t.Errorf("%d events dead-lettered, want none", n)
	}
	if n := published(); n != total {
		t.Errorf("%d events published, want %d", n, total)
	}
	msgs := waitFaultRecords(t, k, kafka, topic, total)
	dups := checkFaultDelivery(t, msgs, want)
	t.Logf("%d records on Kafka for %d events: %d duplicates from %d kills", len(msgs), total, dups, kills)
	if dups < frozen {
		t.Errorf("%d duplicates, want at least %d: each kill between publish and settle must publish its batch again", dups, frozen)
	}
	for _, c := range children {
		c.CheckOutput(t)
	}
}

// TestRelayChildProcess is the relay process that
// TestRelayKilledMidBatchLosesNothing starts and kills; run directly, it does
// nothing (the os/exec TestHelperProcess idiom). It runs the relay until it is
// killed or its stdin closes (the parent stopped it, or died).
func TestRelayChildProcess(t *testing.T) {
	dbURL := os.Getenv(faultChildDatabaseURL)
	if dbURL == "" {
		return
	}
	ctx, cancel := testkit.UntilStdinCloses()
	defer cancel()
	batch, err := strconv.Atoi(os.Getenv(faultChildBatchSize))
	if err != nil {
		t.Fatalf("%s: %v", faultChildBatchSize, err)
	}
	schema := os.Getenv(faultChildSchema)
	pool, err := faultPool(ctx, dbURL, schema, os.Getenv(faultChildAppName))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	relay, err := producer.NewRelay(pool, producer.RelayConfig{
		Schema:       schema,
		Brokers:      testkit.ParseBrokers(os.Getenv(faultChildBrokers)),
		BatchSize:    batch,
		PollInterval: 50 * time.Millisecond,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Run(ctx); err != nil {
		t.Fatalf("Run returned %v", err)
	}
}

// TestRelayRecoversFromTerminatedBackends terminates every PostgreSQL backend
// of a running relay several times while events are being enqueued. Run must
// carry on, connect again, and every event must reach Kafka in key order.
func TestRelayRecoversFromTerminatedBackends(t *testing.T) {
	t.Parallel()
	const (
		total = 2000
		keys  = 40
		chunk = 20 // events per EnqueueBatch
		kills = 5
		round = total / (kills + 1) // events enqueued between kills
	)
	pg, out := setup(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 3)
	kafka := consume(t, k, topic)

	app := faultAppName("courier-relay-term")
	pool, err := faultPool(context.Background(), pg.URL, pg.Schema, app)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	relay, err := producer.NewRelay(pool, producer.RelayConfig{
		Schema:       pg.Schema,
		Brokers:      k.Brokers,
		BatchSize:    keys,
		PollInterval: 50 * time.Millisecond,
		Logger:       testkit.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	running := runRelayWatched(t, relay)
	checkRunning := func(when string) {
		t.Helper()
		if returned, err := running(); returned {
			t.Fatalf("Run returned %v %s; it must run until its context ends", err, when)
		}
	}

	// The producer enqueues up to the budget the kill loop grants, keeping a
	// backlog of about one batch, so that it is still enqueueing, and the
	// relay still publishing, at every kill.
	events, want := faultEvents(topic, total, keys)
	budget := make(chan int, kills+1)
	ctx, cancel := context.WithCancel(context.Background())
	produced := make(chan error, 1)
	go func() {
		produced <- func() error {
			limit := round
			for next := 0; next < total; {
				if next >= limit {
					select {
					case limit = <-budget:
					case <-ctx.Done():
						return ctx.Err()
					}
					continue
				}
				if err := faultWaitBacklog(ctx, pg.Pool, keys-chunk); err != nil {
					return err
				}
				end := min(next+chunk, limit, total)
				if _, err := out.EnqueueBatch(ctx, pg.Pool, events[next:end]); err != nil {
					return err
				}
				next = end
			}
			return nil
		}()
	}()
	t.Cleanup(func() {
		cancel()
		<-produced
	})

	published := func() int { return countRows(t, pg.Pool, "status = 'published'") }
	pooled := func() bool { return faultSessions(t, pg.Pool, app, "application_name = $1") > 0 }
	frozen := 0
	for i := range kills {
		target := i*round + round/2
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("kill %d: %d events published, the relay connected", i+1, target), func() bool {
			checkRunning("while waiting for progress")
			return published() >= target && pooled()
		})
		// Every other kill lands while a published batch waits to be
		// settled; the others wherever the relay happens to be.
		var n int
		var killedAt time.Time
		if i%2 == 1 {
			faultKillInSettle(t, pg.Pool, app, func() {
				killedAt = time.Now()
				n = faultTerminate(t, pg.Pool, app)
			})
			frozen++
		} else {
			killedAt = time.Now()
			n = faultTerminate(t, pg.Pool, app)
		}
		at := published()
		if n < 1 {
			t.Errorf("kill %d terminated %d backends, want at least one pool connection", i+1, n)
		}
		testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("the relay to connect again after kill %d", i+1), pooled)
		t.Logf("kill %d: terminated %d backends at %d/%d published; connected again after %v",
			i+1, n, at, total, time.Since(killedAt).Round(time.Millisecond))
		checkRunning(fmt.Sprintf("after kill %d", i+1))
		budget <- min((i+2)*round, total)
	}
	budget <- total

	select {
	case err := <-produced:
		produced <- err // for the cleanup
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the producer did not finish enqueueing within 30s")
	}
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("all %d events published", total), func() bool {
		checkRunning("while waiting for progress")
		return published() == total
	})
	if n := countRows(t, pg.Pool, "status <> 'published'"); n != 0 {
		t.Errorf("%d events not published", n)
	}
	msgs := waitFaultRecords(t, k, kafka, topic, total)
	dups := checkFaultDelivery(t, msgs, want)
	t.Logf("%d records on Kafka for %d events: %d duplicates from %d kills", len(msgs), total, dups, kills)
	if dups < frozen {
		t.Errorf("%d duplicates, want at least %d: each kill between publish and settle must publish its batch again", dups, frozen)
	}
	checkRunning("before the test ended")
}

// faultEvent is the payload of a fault-test event: its key and its position
// among the events of that key.
type faultEvent struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// faultEvents returns total events for topic over keys keys, round-robin
// (event i has key i%keys and counter i/keys), with their ids set, and what
// each id must carry.
func faultEvents(topic string, total, keys int) ([]producer.Event, map[string]faultEvent) {
	events := make([]producer.Event, total)
	want := make(map[string]faultEvent, total)
	for i := range events {
		fe := faultEvent{Key: fmt.Sprintf("key-%02d", i%keys), N: i / keys}
		payload, err := json.Marshal(fe)
		if err != nil {
			panic(err)
		}
		id := uuid.Must(uuid.NewV7())
		events[i] = producer.Event{ID: id, Topic: topic, Key: fe.Key, Type: "CounterIncremented", Payload: payload}
		want[id.String()] = fe
	}
	return events, want
}

// checkFaultDelivery checks the records read from Kafka against the events
// enqueued and returns how many records were duplicates. Every event must
// arrive, intact, at least once; a duplicate is recognised by its ce_id;
// each key stays on one partition; and per key, read in partition order, the
// counters never go back: a repeat of the latest counter is a duplicate and
// allowed, a lower counter after a higher one breaks the key's order.
func checkFaultDelivery(t *testing.T, msgs []*sarama.ConsumerMessage, want map[string]faultEvent) (dups int) {
	t.Helper()
	msgs = slices.Clone(msgs)
	slices.SortStableFunc(msgs, func(a, b *sarama.ConsumerMessage) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	var problems int
	report := func(format string, args ...any) {
		t.Helper()
		if problems++; problems <= 20 {
			t.Errorf(format, args...)
		}
	}
	seen := map[string]bool{}
	partition := map[string]int32{}
	latest := map[string]int{}
	for _, m := range msgs {
		id := headerValue(m, producer.HeaderID)
		w, ok := want[id]
		if !ok {
			report("partition %d offset %d: ce_id %q was never enqueued", m.Partition, m.Offset, id)
			continue
		}
		var got faultEvent
		if err := json.Unmarshal(m.Value, &got); err != nil || got != w || string(m.Key) != w.Key {
			report("partition %d offset %d: event %s has key %q value %s, want %+v", m.Partition, m.Offset, id, m.Key, m.Value, w)
			continue
		}
		if p, ok := partition[w.Key]; ok && p != m.Partition {
			report("key %s on partitions %d and %d", w.Key, p, m.Partition)
		}
		partition[w.Key] = m.Partition
		if seen[id] {
			// A duplicate replays events Kafka already had (…9, 10, 9, 10,
			// 11…); a consumer deduplicating on ce_id sees the first copies.
			dups++
			continue
		}
		seen[id] = true
		if last, ok := latest[w.Key]; ok && w.N < last {
			report("key %s out of order: counter %d at partition %d offset %d after counter %d", w.Key, w.N, m.Partition, m.Offset, last)
		}
		latest[w.Key] = max(latest[w.Key], w.N)
	}
	missing := 0
	for id, w := range want {
		if !seen[id] {
			missing++
			report("event %s (%s #%d) never reached Kafka", id, w.Key, w.N)
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d events never reached Kafka", missing, len(want))
	}
	if problems > 20 {
		t.Errorf("… and %d more problems", problems-20)
	}
	return dups
}

// waitFaultRecords waits until c has read n distinct events (or 15s passed:
// checkFaultDelivery then names the missing ones) and then every record of
// topic up to the high watermarks, so that late duplicates are counted too,
// and returns all records read. Nothing may be publishing any more.
func waitFaultRecords(t *testing.T, k *testkit.Kafka, c *consumer, topic string, n int) []*sarama.ConsumerMessage {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); len(distinctIDs(c.messages())) < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	var msgs []*sarama.ConsumerMessage
	client, err := sarama.NewClient(k.Brokers, k.Config())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	partitions, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	hwm := map[int32]int64{}
	for _, p := range partitions {
		if hwm[p], err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("every record of %s up to the high watermarks %v", topic, hwm), func() bool {
		msgs = c.messages()
		next := map[int32]int64{}
		for _, m := range msgs {
			next[m.Partition] = max(next[m.Partition], m.Offset+1)
		}
		for p, h := range hwm {
			if next[p] < h {
				return false
			}
		}
		return true
	})
	return msgs
}

// faultAppName returns prefix followed by a random suffix, an
// application_name no other test uses.
func faultAppName(prefix string) string {
	return prefix + "-" + strings.ToLower(rand.Text()[:8])
}

// faultPool connects to dbURL with search_path schema and application_name
// app, so that the test can find (and terminate) the relay's backends.
func faultPool(ctx context.Context, dbURL, schema, app string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	return pgxpool.NewWithConfig(ctx, cfg)
}

// faultSessions counts the backends whose application_name starts with app
// and that match where ($1 is app).
func faultSessions(t *testing.T, db producer.DBTX, app, where string) int {
	t.Helper()
	var n int
	err := db.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1 || '%' AND ("+where+")", app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// faultPIDs returns the backends whose application_name starts with app and
// that match where ($1 is app, $2 on are args).
func faultPIDs(t *testing.T, db producer.DBTX, app, where string, args ...any) []int32 {
	t.Helper()
	rows, err := db.Query(context.Background(),
		"SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1 || '%' AND ("+where+")", append([]any{app}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

// faultSettleWaiting matches, for faultSessions, a relay backend whose settle
// (a DELETE from the queue moving its rows to the history) waits for a table
// lock (see faultFreezeSettle).
const faultSettleWaiting = `wait_event_type = 'Lock' AND query LIKE '%DELETE FROM%'`

// faultFreezeSettle takes a SHARE lock on the outbox table until release is
// called (or the test ends). A relay still claims (a read does not conflict
// with it) and publishes, but the DELETE that records its batch waits: the
// batch is on Kafka and not yet settled, the point where a crash must lead
// to the batch being published again. Enqueues wait as well.
func faultFreezeSettle(t *testing.T, pool *pgxpool.Pool) (release func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	release = func() { _ = tx.Rollback(ctx) }
	t.Cleanup(release)
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '15s'"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE courier_outbox IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	return release
}

// faultKillInSettle runs kill while a relay with application_name app has
// published a batch and waits to record it: it freezes the settle (see
// faultFreezeSettle), makes sure there are events to claim (nothing can
// change that while frozen), waits for the relay's settle to queue behind
// the lock, kills, waits for the killed sessions to end, and unfreezes.
func faultKillInSettle(t *testing.T, pool *pgxpool.Pool, app string, kill func()) {
	t.Helper()
	for range 50 {
		release := faultFreezeSettle(t, pool)
		if countRows(t, pool, "status IN ('pending', 'failed')") == 0 {
			release() // the relay caught up: let the producer add more
			testkit.WaitFor(t, 15*time.Second, "events waiting to be published", func() bool {
				return countRows(t, pool, "status IN ('pending', 'failed')") > 0
			})
			continue
		}
		var waiting []int32
		testkit.WaitFor(t, 15*time.Second, "the relay to publish a batch and wait to record it", func() bool {
			waiting = faultPIDs(t, pool, app, faultSettleWaiting)
			return len(waiting) > 0
		})
		kill()
		// The settle and its COMMIT went out in one piece: had the lock
		// gone now, PostgreSQL would run both before noticing the relay
		// died. So the lock stays until the sessions that waited are gone
		// (client_connection_check_interval), which rolls their batches
		// back: on Kafka and not recorded, they must come again.
		testkit.WaitFor(t, 15*time.Second, "the killed settles' sessions to end", func() bool {
			return len(faultPIDs(t, pool, app, "pid = ANY($2)", waiting)) == 0
		})
		release()
		return
	}
	t.Fatal("the relay kept catching up before the outbox could be frozen with events waiting")
}

// faultWaitBacklog waits until at most n events wait to be published.
func faultWaitBacklog(ctx context.Context, db producer.DBTX, n int) error {
	for {
		var waiting int
		err := db.QueryRow(ctx, "SELECT count(*) FROM courier_events WHERE status IN ('pending', 'failed')").Scan(&waiting)
		if err != nil || waiting <= n {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// faultTerminate terminates every backend whose application_name starts with
// app (the relay's pool and its app-listener connection), waits until they
// are gone, and returns how many there were.
func faultTerminate(t *testing.T, db producer.DBTX, app string) int {
	t.Helper()
	var n int
	err := db.QueryRow(context.Background(),
		"SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) FROM pg_stat_activity WHERE application_name LIKE $1 || '%'", app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// runRelayWatched runs r.Run until the test ends and checks that it then
// returns nil, like runRelay; the function it returns tells whether Run has
// returned before that, and with what.
func runRelayWatched(t *testing.T, r *producer.Relay) func() (returned bool, err error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan struct{})
	var runErr error
	go func() {
		defer close(exited)
		runErr = r.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-exited:
			if runErr != nil {
				t.Errorf("Run returned %v", runErr)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("Run did not return within 30s of its context ending")
		}
	})
	return func() (bool, error) {
		select {
		case <-exited:
			return true, runErr
		default:
			return false, nil
		}
	}
}

// TestSeveralRelaysKilledRepeatedlyLoseNothing runs three relay processes
// against one outbox while events keep coming, and SIGKILLs one of them
// and starts another, eight times, each at a point of its own (a random
// relay, wherever it happens to be: claiming, publishing, settling). Every
// event must reach Kafka, per key the first copies in enqueue order, none
// may be left waiting or dead-lettered, and no session of a killed relay
// may outlive it.
func TestSeveralRelaysKilledRepeatedlyLoseNothing(t *testing.T) {
	t.Parallel()
	const (
		total   = 6000
		keys    = 60
		chunk   = 50 // events per EnqueueBatch
		relays  = 3
		kills   = 8
		perKill = total / (kills + 2) // published events between kills
	)
	pg, out := setup(t)
	k := testkit.NewKafka(t)
	topic := k.Topic(t, 6)
	kafka := consume(t, k, topic)
	events, want := faultEvents(topic, total, keys)

	app := faultAppName("courier-relays")
	env := func(i int) []string {
		return []string{
			faultChildDatabaseURL + "=" + pg.URL,
			faultChildSchema + "=" + pg.Schema,
			faultChildBrokers + "=" + strings.Join(k.Brokers, ","),
			faultChildAppName + "=" + fmt.Sprintf("%s-%d", app, i),
			faultChildBatchSize + "=" + strconv.Itoa(keys),
		}
	}
	children := make([]*testkit.Child, relays)
	apps := make([]int, relays) // the number in each running child's application_name
	started := 0
	start := func(slot int) {
		children[slot], apps[slot] = testkit.StartChild(t, "TestRelayChildProcess", env(started)), started
		started++
	}
	for i := range relays {
		start(i)
	}

	// The producer keeps the outbox fed while the relays are killed.
	ctx, cancel := context.WithCancel(context.Background())
	produced := make(chan error, 1)
	go func() {
		produced <- func() error {
			for i := 0; i < total; i += chunk {
				if err := faultWaitBacklog(ctx, pg.Pool, 4*chunk); err != nil {
					return err
				}
				if _, err := out.EnqueueBatch(ctx, pg.Pool, events[i:min(i+chunk, total)]); err != nil {
					return err
				}
			}
			return nil
		}()
	}()
	t.Cleanup(func() {
		cancel()
		<-produced
	})

	published := func() int { return countRows(t, pg.Pool, "status = 'published'") }
	rng := mathrand.New(mathrand.NewPCG(uint64(time.Now().UnixNano()), 1))
	for i := range kills {
		target := min((i+1)*perKill, total)
		testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("kill %d: %d events published", i+1, target), func() bool {
			return published() >= target
		})
		slot := rng.IntN(relays)
		children[slot].Kill(t)
		dead := fmt.Sprintf("%s-%d", app, apps[slot])
		at := published()
		testkit.WaitFor(t, 15*time.Second, fmt.Sprintf("the sessions of killed relay %s to end", dead), func() bool {
			return faultSessions(t, pg.Pool, dead, "true") == 0
		})
		t.Logf("kill %d: SIGKILL relay %d of %d at %d/%d published", i+1, slot, relays, at, total)
		start(slot)
	}
	select {
	case err := <-produced:
		produced <- err // for the cleanup
		if err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the producer did not finish enqueueing within 60s")
	}
	testkit.WaitFor(t, 60*time.Second, fmt.Sprintf("all %d events published", total), func() bool { return published() == total })
	for _, c := range children {
		c.Stop(t)
	}
	if n := countRows(t, pg.Pool, "status <> 'published'"); n != 0 {
		t.Errorf("%d events not published", n)
	}
	msgs := waitFaultRecords(t, k, kafka, topic, total)
	dups := checkFaultDelivery(t, msgs, want)
	t.Logf("%d records on Kafka for %d events: %d duplicates from %d kills of %d relays", len(msgs), total, dups, kills, relays)
	testkit.WaitFor(t, 15*time.Second, "every relay session to end", func() bool { return faultSessions(t, pg.Pool, app, "true") == 0 })
	for _, c := range children {
		c.CheckOutput(t)
	}
}
