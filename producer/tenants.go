package producer

import (
	"context"
	"fmt"
)

// TenantCount is what one tenant (Event.TenantID) has in the outbox
// table, or, in TenantCounts.Others, what the tenants past the top ones
// have together.
type TenantCount struct {
	// TenantID is the tenant; "" for the events without one (and in
	// Others).
	TenantID string
	// Pending, Failed and DeadLettered count the tenant's events of
	// each status. Waiting is Pending plus Failed.
	Pending, Failed, DeadLettered int64
}

// Waiting is how many of the tenant's events wait to be published:
// Pending plus Failed.
func (c TenantCount) Waiting() int64 { return c.Pending + c.Failed }

// TenantCounts are the events still in the outbox table per tenant: the
// published history is not counted (see Admin.CountByTenant).
type TenantCounts struct {
	// Top are the tenants with the most events waiting (pending and
	// failed), then the most dead-lettered, at most the number asked
	// for. The events without a tenant are one of them, TenantID "".
	Top []TenantCount
	// Others sums the events of the tenants past Top; OtherTenants is how
	// many they are (0, and Others zero, when Top holds every tenant).
	Others       TenantCount
	OtherTenants int64
}

// MaxTopTenants bounds the top of Admin.CountByTenant.
const MaxTopTenants = 1000

// CountByTenant counts the pending, failed and dead-lettered events per
// tenant and returns the top tenants by events waiting, then by dead
// letters, with the rest summed in Others: whatever the number of tenants,
// the answer holds at most top+1 rows. top is 1 to MaxTopTenants; another
// value is an error matching ErrInvalidFilter.
//
// It reads the tables of the events still in the outbox (the queue, the
// waiting and the dead-lettered events) once each, as Stats counts them,
// and groups them by tenant in memory (no index holds the tenant there, as
// one would slow Enqueue): its cost grows with the backlog and the number
// of tenants, not with the published history, which it leaves out.
func (a *Admin) CountByTenant(ctx context.Context, top int) (TenantCounts, error) {
	var out TenantCounts
	if top < 1 || top > MaxTopTenants {
		return out, fmt.Errorf("%w: top %d: count 1 to %d tenants", ErrInvalidFilter, top, MaxTopTenants)
	}
	rows, err := a.db.Query(ctx, a.store.names.render(countByTenantSQL, false), top)
	if err != nil {
		return out, a.wrap("count events by tenant", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			c       TenantCount
			tenant  *string
			others  bool
			tenants int64
			rank    int64
		)
		if err := rows.Scan(&others, &tenant, &c.Pending, &c.Failed, &c.DeadLettered, &tenants, &rank); err != nil {
			return TenantCounts{}, a.wrap("count events by tenant", err)
		}
		if others {
			out.Others, out.OtherTenants = c, tenants
			continue
		}
		if tenant != nil {
			c.TenantID = *tenant
		}
		out.Top = append(out.Top, c)
	}
	if err := rows.Err(); err != nil {
		return TenantCounts{}, a.wrap("count events by tenant", err)
	}
	return out, nil
}

// countByTenantSQL counts the events of the queue, the waiting and the
// dead-lettered tables per tenant (NULL for none; Enqueue stores "" as
// NULL, and the "" of a row that other SQL wrote counts as NULL too, so
// the events without a tenant are one row), ranks the tenants by events waiting, then by dead letters, then
// by name, and returns the first $1 and one row summing the others (when
// there are others), in rank order.
const countByTenantSQL = `
WITH per AS (
    SELECT tenant_id, count(*) AS pending, 0::bigint AS failed, 0::bigint AS dead FROM {queue} GROUP BY tenant_id
    UNION ALL
    SELECT tenant_id, count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'failed'), 0
    FROM {waiting} GROUP BY tenant_id
    UNION ALL
    SELECT tenant_id, 0, 0, count(*) FROM {dead} GROUP BY tenant_id
), tenants AS (
    SELECT NULLIF(tenant_id, '') AS tenant_id, sum(pending)::bigint AS pending, sum(failed)::bigint AS failed, sum(dead)::bigint AS dead
    FROM per GROUP BY 1
), ranked AS (
    SELECT *, row_number() OVER (ORDER BY pending + failed DESC, dead DESC, tenant_id NULLS FIRST) AS rank FROM tenants
)
SELECT false, tenant_id, pending, failed, dead, 1::bigint, rank FROM ranked WHERE rank <= $1
UNION ALL
SELECT true, NULL, sum(pending)::bigint, sum(failed)::bigint, sum(dead)::bigint, count(*), $1 + 1 FROM ranked WHERE rank > $1
HAVING count(*) > 0
ORDER BY 7`
