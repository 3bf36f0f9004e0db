package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/courierkit/courier/producer"
)

// defaultStatsTenants is how many tenants outbox stats shows by default.
const defaultStatsTenants = 10

// countsJSON are the counts of a producer.TenantCount as --output json
// prints them.
type countsJSON struct {
	Waiting      int64 `json:"waiting"`
	Pending      int64 `json:"pending"`
	Failed       int64 `json:"failed"`
	DeadLettered int64 `json:"dead_lettered"`
}

func newCountsJSON(c producer.TenantCount) countsJSON {
	return countsJSON{Waiting: c.Waiting(), Pending: c.Pending, Failed: c.Failed, DeadLettered: c.DeadLettered}
}

// tenantCountJSON is one tenant's counts: tenant_id null for the events
// without a tenant.
type tenantCountJSON struct {
	TenantID *string `json:"tenant_id"`
	countsJSON
}

// otherTenantsJSON sums the tenants past the top ones.
type otherTenantsJSON struct {
	Tenants int64 `json:"tenants"`
	countsJSON
}

// tenantStatsJSON is producer.TenantCounts as --output json prints it.
type tenantStatsJSON struct {
	Top    []tenantCountJSON `json:"top"`
	Others *otherTenantsJSON `json:"others"`
}

func newTenantStatsJSON(c producer.TenantCounts) *tenantStatsJSON {
	j := &tenantStatsJSON{Top: make([]tenantCountJSON, 0, len(c.Top))}
	for _, t := range c.Top {
		row := tenantCountJSON{countsJSON: newCountsJSON(t)}
		if t.TenantID != "" {
			row.TenantID = &t.TenantID
		}
		j.Top = append(j.Top, row)
	}
	if c.OtherTenants > 0 {
		j.Others = &otherTenantsJSON{Tenants: c.OtherTenants, countsJSON: newCountsJSON(c.Others)}
	}
	return j
}

// printTenantCounts prints the tenants' counts as a table, the tenants
// escaped, the events without one as "(no tenant)", the others summed on
// the last line.
func printTenantCounts(w io.Writer, c producer.TenantCounts) error {
	if len(c.Top) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tWAITING\tPENDING\tFAILED\tDEAD_LETTERED")
	row := func(name string, t producer.TenantCount) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", name, t.Waiting(), t.Pending, t.Failed, t.DeadLettered)
	}
	for _, t := range c.Top {
		name := "(no tenant)"
		if t.TenantID != "" {
			name = cell(&t.TenantID, 60)
		}
		row(name, t)
	}
	if c.OtherTenants > 0 {
		row(fmt.Sprintf("(%d other tenants)", c.OtherTenants), c.Others)
	}
	return tw.Flush()
}
