package producer

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/courierkit/courier/internal/pgname"
	"github.com/courierkit/courier/internal/testkit"
)

// TestVacuumCleansTheQueueWhenDeadRowsPileUp: the relay vacuums the queue
// once the dead rows published events leave there outnumber the live ones
// and vacuumMinDead, whether or not PostgreSQL's autovacuum runs; a queue
// with fewer is left alone. The test counts PostgreSQL's vacuums of the
// table rather than its dead rows: a transaction of another test that is
// still open may keep some of them from being removed yet.
func TestVacuumCleansTheQueueWhenDeadRowsPileUp(t *testing.T) {
	t.Parallel()
	pg := testkit.Postgres(t)
	pg.Migrate(t)
	ctx := context.Background()
	table, err := pgname.NewTable(pg.Schema, "")
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(table, false, false)
	fill := func(n int) {
		t.Helper()
		_, err := pg.Pool.Exec(ctx, `INSERT INTO courier_outbox (id, topic, event_type, payload, content_type)
			SELECT gen_random_uuid(), 'orders', 'OrderCreated', '{}', 'application/json' FROM generate_series(1, $1)`, n)
		if err == nil {
			_, err = pg.Pool.Exec(ctx, "DELETE FROM courier_outbox")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	dead := func() (n int64) {
		t.Helper()
		// The statistics reach pg_stat_user_tables when this session's
		// pending counts are flushed: ask for it.
		if err := pg.Pool.QueryRow(ctx, "SELECT pg_stat_force_next_flush(), n_dead_tup FROM pg_stat_user_tables WHERE relid = 'courier_outbox'::regclass").Scan(nil, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	vacuums := func() (n int64) {
		t.Helper()
		if err := pg.Pool.QueryRow(ctx, "SELECT vacuum_count FROM pg_stat_user_tables WHERE relid = 'courier_outbox'::regclass").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	fill(vacuumMinDead / 2)
	testkit.WaitFor(t, 10*time.Second, "the dead rows counted", func() bool { return dead() >= vacuumMinDead/2 })
	if done, err := s.vacuum(ctx, pg.Pool); err != nil || len(done) != 0 {
		t.Fatalf("vacuum with %d dead rows = %v, %v; want nothing done", dead(), done, err)
	}
	fill(vacuumMinDead)
	testkit.WaitFor(t, 10*time.Second, "the dead rows counted", func() bool { return dead() >= vacuumMinDead })
	before := vacuums()
	done, err := s.vacuum(ctx, pg.Pool)
	if err != nil || !slices.ContainsFunc(done, func(name string) bool { return name == table.String() || name == "courier_outbox" }) {
		t.Fatalf("vacuum with %d dead rows = %v, %v; want the queue vacuumed", dead(), done, err)
	}
	if after := vacuums(); after != before+1 {
		t.Fatalf("PostgreSQL counted %d vacuums of the queue, want %d", after, before+1)
	}
}
