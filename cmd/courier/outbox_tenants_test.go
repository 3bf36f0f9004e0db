package main

import (
	"strings"
	"testing"

	"github.com/courierkit/courier/producer"
)

// TestOutboxStatsCountsByTenant: stats shows the tenants with the most
// events waiting, then dead-lettered, the events without a tenant as a
// row of their own, the rest summed; a tenant's control characters are
// escaped; --tenants 0 leaves the section out; a --tenants out of range is
// a usage error.
func TestOutboxStatsCountsByTenant(t *testing.T) {
	t.Parallel()
	o := newOutboxDB(t)
	ev := func(tenant string) producer.Event {
		e := event("orders", "k", "OrderCreated")
		e.TenantID = tenant
		return e
	}
	ids := o.enqueue(t, ev("acme"), ev("acme"), ev("acme"), ev("globex"), ev("globex"), ev(""), ev("evil\x1b[2J"), ev("initech"), ev("acme"))
	o.fail(t, ids[1], "not enough replicas")
	o.deadLetter(t, ids[2], "too large")
	o.deadLetter(t, ids[4], "too large")
	o.publish(t, ids[8], 0) // the history is not counted per tenant

	code, out, errOut := o.cli(t, "stats", "--tenants", "3")
	if code != exitOK {
		t.Fatalf("stats: exit %d\n%s%s", code, out, errOut)
	}
	_, table, _ := strings.Cut(out, "TENANT")
	want := []string{
		"TENANT             WAITING  PENDING  FAILED  DEAD_LETTERED",
		"acme               2        1        1       1",
		"globex             1        1        0       1",
		"(no tenant)        1        1        0       0",
		"(2 other tenants)  2        2        0       0",
	}
	if got := strings.Split(strings.TrimRight("TENANT"+table, "\n"), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("stats --tenants 3 shows\n%s\nwant\n%s", table, strings.Join(want, "\n"))
	}

	code, out, errOut = o.cli(t, "stats", "--tenants", "10")
	if code != exitOK || !strings.Contains(out, `evil\x1b[2J`) || strings.Contains(out, "\x1b") {
		t.Errorf("stats --tenants 10: exit %d, want the tenant's escape sequence escaped\n%q%s", code, out, errOut)
	}

	var stats statsJSON
	code, out, errOut = o.cli(t, "stats", "--tenants", "1", "--output", "json")
	decode(t, code, out, errOut, &stats)
	if tt := stats.Tenants; tt == nil || len(tt.Top) != 1 || tt.Top[0].TenantID == nil || *tt.Top[0].TenantID != "acme" || tt.Top[0].Waiting != 2 ||
		tt.Others == nil || tt.Others.Tenants != 4 || tt.Others.Waiting != 4 || tt.Others.DeadLettered != 1 || strings.Contains(out, `"tenant_id": null`) {
		t.Errorf("stats --tenants 1 --output json: %s", out)
	}
	code, out, errOut = o.cli(t, "stats", "--tenants", "0", "--output", "json")
	decode(t, code, out, errOut, &stats)
	if strings.Contains(out, `"tenants"`) {
		t.Errorf("stats --tenants 0 counted tenants: %s", out)
	}
	for _, n := range []string{"-1", "1001"} {
		if code, _, errOut := o.cli(t, "stats", "--tenants", n); code != exitUsage || !strings.Contains(errOut, "--tenants "+n) {
			t.Errorf("stats --tenants %s: exit %d, want a usage error naming the flag\n%s", n, code, errOut)
		}
	}
}
