package producer

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// ActivityResolution is the finest step of Activity: the relay records
// what it publishes by the minute.
const ActivityResolution = time.Minute

// MaxActivityPoints is the most points Activity returns: a day by the
// minute.
const MaxActivityPoints = 1440

// MaxPage is the most rows DeadLetterGroups and AuditLog return at once.
const MaxPage = 1000

// ActivityPoint is what the relays published in one step of Activity.
type ActivityPoint struct {
	// At is when the step starts, by the database clock.
	At time.Time
	// Published is how many events the relays published in it.
	Published int64
	// MeanLag and MaxLag are how long after their enqueue those events
	// were published, on average and at most; 0 without events.
	MeanLag, MaxLag time.Duration
}

// Activity returns what the relays published over the last window, one
// point per step, oldest first; a step without events has a point of 0.
// Steps are aligned on whole multiples of step since the Unix epoch, and
// the last one holds now. step must be a whole number of minutes
// (ActivityResolution), and window a whole number of steps, at most
// MaxActivityPoints of them; anything else is an error matching
// ErrInvalidFilter.
//
// It reads the relays' own tally (the table <table>_activity, which every
// relay adds to as it moves a batch to the history), not the history: an
// hour costs the same at a hundred events as at a million, and counts the
// events of a relay with DiscardPublished too.
func (a *Admin) Activity(ctx context.Context, window, step time.Duration) ([]ActivityPoint, error) {
	switch {
	case step < ActivityResolution || step%ActivityResolution != 0:
		return nil, fmt.Errorf("%w: step %v: use a whole number of minutes, at least 1m (the relays tally by the minute)", ErrInvalidFilter, step)
	case window < step || window%step != 0:
		return nil, fmt.Errorf("%w: window %v: use a whole number of steps of %v", ErrInvalidFilter, window, step)
	case window/step > MaxActivityPoints:
		return nil, fmt.Errorf("%w: window %v in steps of %v is %d points; at most %d: take a longer step", ErrInvalidFilter,
			window, step, window/step, MaxActivityPoints)
	}
	rows, err := a.db.Query(ctx, a.store.names.render(activitySQL, false), step.Microseconds(), int(window/step))
	if err != nil {
		return nil, a.wrap("read the activity", err)
	}
	points, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (ActivityPoint, error) {
		var p ActivityPoint
		var lagSum, lagMax float64
		if err := row.Scan(&p.At, &p.Published, &lagSum, &lagMax); err != nil {
			return p, err
		}
		if p.Published > 0 {
			p.MeanLag = seconds(lagSum / float64(p.Published))
		}
		p.MaxLag = seconds(lagMax)
		return p, nil
	})
	if err != nil {
		return nil, a.wrap("read the activity", err)
	}
	return points, nil
}

// seconds converts s seconds to a Duration, within its range.
func seconds(s float64) time.Duration {
	switch {
	case s <= 0 || math.IsNaN(s):
		return 0
	case s >= float64(math.MaxInt64)/float64(time.Second):
		return math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}

// DeadLetterGroup is the dead-lettered events of one topic that failed
// with the same error.
type DeadLetterGroup struct {
	// Topic and Error are the events' topic and last error ("" for none).
	Topic, Error string
	// Count is how many events the group holds.
	Count int64
	// Oldest and Newest are when its first and its last event were
	// dead-lettered.
	Oldest, Newest time.Time
}

// DeadLetterGroups groups the dead-lettered events by topic and last
// error, the largest groups first (ties by topic and error), at most limit
// of them: from 1 to MaxPage, else an error matching ErrInvalidFilter.
func (a *Admin) DeadLetterGroups(ctx context.Context, limit int) ([]DeadLetterGroup, error) {
	return groupRows[DeadLetterGroup](ctx, a, "group dead letters", deadLetterGroupsSQL, limit)
}

// HeldGroup is a group of events that Kafka's condition holds (see
// RelayConfig.MaxAttempts): waiting, with no attempt counted, since Kafka
// refused their partition for a reason of its own or could not be reached.
// Only the first waiting event of a key meets it; the later ones of its
// key wait behind that one, and are not counted.
type HeldGroup struct {
	// Topic and Error are the events' topic and last error, which names
	// the partition ("orders/3: ...").
	Topic, Error string
	// Count is how many events the group holds.
	Count int64
	// Oldest is when its oldest event was enqueued; Next when the first
	// of them is tried again.
	Oldest, Next time.Time
}

// MaxHeldScan is the most held events HeldGroups reads: beyond it, its
// counts are those of the MaxHeldScan tried again soonest.
const MaxHeldScan = 100_000

// HeldGroups groups the events Kafka's condition holds by topic and last
// error, the largest groups first (ties by topic and error), at most limit
// of them: from 1 to MaxPage, else an error matching ErrInvalidFilter. It
// counts the pending events that wait with an error and are not due: a
// held event that had counted an attempt before (a refused record, then
// held) stays failed and is counted with the failed ones instead.
func (a *Admin) HeldGroups(ctx context.Context, limit int) ([]HeldGroup, error) {
	return groupRows[HeldGroup](ctx, a, "group held events", heldGroupsSQL, limit)
}

// groupRows runs one of the grouping queries, sql, for at most limit rows
// of T.
func groupRows[T any](ctx context.Context, a *Admin, what, sql string, limit int) ([]T, error) {
	if limit < 1 || limit > MaxPage {
		return nil, fmt.Errorf("%w: limit %d: use 1 to %d", ErrInvalidFilter, limit, MaxPage)
	}
	rows, err := a.db.Query(ctx, a.store.names.render(sql, false), limit)
	if err != nil {
		return nil, a.wrap(what, err)
	}
	groups, err := pgx.CollectRows(rows, pgx.RowToStructByPos[T])
	if err != nil {
		return nil, a.wrap(what, err)
	}
	return groups, nil
}
