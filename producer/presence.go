package producer

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// maxSlots bounds the slots of a table: how many workers, over every relay,
// can share its keys. Beyond shareCount workers, the ranks past it get no
// share and idle.
const maxSlots = 1024

// presenceRefresh is how often a relay reads which slots are held: a relay
// that dies (its session ends, and its slot locks with it) leaves its
// shares unclaimed for at most about this long.
const presenceRefresh = time.Second

// presenceSettle is how soon a relay reads the held slots again after it
// took its own or saw them change: relays that start together see each
// other within milliseconds, not a second later, and the reads slow down,
// doubling, to presenceRefresh while the slots stay as they are.
const presenceSettle = 10 * time.Millisecond

// presence divides the shares of a table among every worker of every relay
// that runs against it, so that each claims its own part of the keys instead
// of all of them trying for the same. Each worker holds a slot: a
// session-level advisory lock (key presenceLockKey, slot number) on a
// connection the relay keeps for as long as it runs. The held slots, read
// from pg_locks, are the workers alive; the worker of the k-th slot of n
// claims the shares s with s mod n = k. A relay that dies loses its
// session, so its slots free at once and the others take its shares at
// their next refresh. The share locks of each claim keep every key with
// one claimer whatever the division, so a division in flux (a relay
// joining, a refresh late) costs only throughput.
//
// Without the connection (before it is made, after it broke, or with
// PollOnly, where PgBouncer in transaction mode would hand session locks
// around) the relay's workers divide the shares among themselves alone.
type presence struct {
	r *Relay

	mu    sync.Mutex
	conn  *pgx.Conn // nil while there is none
	slots []int32   // this relay's, one per worker
	held  []int32   // every relay's, sorted, at the last refresh
}

// shares are the shares worker index claims from: its part of every
// relay's held slots, or, without them, its part of this relay's workers.
func (p *presence) shares(index int) []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil && index < len(p.slots) {
		if rank := slices.Index(p.held, p.slots[index]); rank >= 0 {
			return homeShares(rank, len(p.held))
		}
	}
	return homeShares(index, p.r.cfg.Workers)
}

// run keeps the connection and the slots, and refreshes the division,
// until ctx ends; a broken connection is made again after a backoff.
func (p *presence) run(ctx context.Context) {
	delay := time.Duration(0)
	for ctx.Err() == nil {
		err := p.hold(ctx)
		if ctx.Err() != nil {
			return
		}
		delay = min(max(2*delay, 100*time.Millisecond), 5*time.Second)
		p.r.log.Warn("relay presence lost; its workers divide the keys among themselves until it is back",
			"error", err, "retry_in", delay)
		sleep(ctx, delay, nil)
	}
}

// hold connects, takes a slot per worker and refreshes the division every
// presenceRefresh until the connection fails or ctx ends.
func (p *presence) hold(ctx context.Context) error {
	cfg := p.r.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = presenceAppName(cfg.RuntimeParams["application_name"])
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		p.mu.Lock()
		p.conn, p.slots, p.held = nil, nil, nil
		p.mu.Unlock()
		_ = conn.Close(context.WithoutCancel(ctx)) // ends the session: the slots free
	}()
	rows, err := conn.Query(ctx, takeSlotsSQL(p.r.table.String()), p.r.cfg.Workers)
	if err != nil {
		return err
	}
	slots, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return err
	}
	if len(slots) < p.r.cfg.Workers {
		return fmt.Errorf("producer: %d of the %d relay slots of %s are taken; more workers than that cannot share its keys", maxSlots-len(slots), maxSlots, p.r.table)
	}
	refresh := heldSlotsSQL(p.r.table.String())
	wait := presenceSettle
	for {
		rows, err := conn.Query(ctx, refresh)
		if err != nil {
			return err
		}
		held, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		p.mu.Lock()
		if slices.Equal(held, p.held) {
			wait = min(2*wait, presenceRefresh)
		} else {
			wait = presenceSettle
		}
		p.conn, p.slots, p.held = conn, slots, held
		p.mu.Unlock()
		sleep(ctx, wait, nil)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func presenceAppName(base string) string {
	if base == "" {
		return "courier-relay-presence"
	}
	return base + "-presence"
}
