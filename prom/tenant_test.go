package prom_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/prom"
)

// tenantCounters are the counters that get the tenant label.
var tenantCounters = []string{prom.NamePublished, prom.NameFailures, prom.NameDeadLettered, prom.NameConsumerMessages}

// newTenantMetrics registers the relay's and the consumer's metrics with
// tenants on one registry.
func newTenantMetrics(t *testing.T, tenants []string) (*prom.RelayMetrics, *prom.ConsumerMetrics, *prometheus.Registry) {
	t.Helper()
	relay, reg := newMetrics(t, prom.Config{Tenants: tenants})
	cons, err := prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Tenants: tenants})
	if err != nil {
		t.Fatal(err)
	}
	return relay, cons, reg
}

// countTenant feeds every tenant counter once for tenant.
func countTenant(relay *prom.RelayMetrics, cons *prom.ConsumerMetrics, tenant string) {
	relay.TenantPublished("orders", tenant, time.Millisecond)
	relay.TenantPublishFailed("orders", tenant, "retriable")
	relay.TenantDeadLettered("orders", tenant)
	cons.TenantMessage("orders", tenant, consumer.OutcomeHandled)
}

// TestTenantLabelIsBoundedByTheList: with two tenants listed, 5,000
// tenants give each counter 3 series: the two listed, and "other" for the
// rest and for none; each counts what it should.
func TestTenantLabelIsBoundedByTheList(t *testing.T) {
	t.Parallel()
	relay, cons, reg := newTenantMetrics(t, []string{"acme", "globex"})
	for i := range 5000 {
		countTenant(relay, cons, fmt.Sprintf("tenant-%d", i))
	}
	countTenant(relay, cons, "acme")
	countTenant(relay, cons, "acme")
	countTenant(relay, cons, "globex")
	countTenant(relay, cons, "")
	relay.Published("orders", time.Millisecond) // the hook without a tenant
	cons.Message("orders", consumer.OutcomeHandled)
	for _, name := range tenantCounters {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != 3 {
			t.Errorf("%s has %d series (%v), want 3: the 2 tenants listed and other", name, n, err)
		}
	}
	got := series(t, reg)
	for key, want := range map[string]float64{
		`courier_outbox_published_total{tenant="acme",topic="orders"}`:                      2,
		`courier_outbox_published_total{tenant="globex",topic="orders"}`:                    1,
		`courier_outbox_published_total{tenant="other",topic="orders"}`:                     5002,
		`courier_outbox_failures_total{reason="retriable",tenant="other",topic="orders"}`:   5001,
		`courier_outbox_dead_lettered_total{tenant="acme",topic="orders"}`:                  2,
		`courier_consumer_messages_total{outcome="handled",tenant="globex",topic="orders"}`: 1,
		`courier_consumer_messages_total{outcome="handled",tenant="other",topic="orders"}`:  5002,
		`courier_outbox_publish_latency_seconds_count{topic="orders"}`:                      5005,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestNoTenantLabelByDefault: without a list the counters keep their
// labels, and the tenant's variants of the hooks count as the plain ones.
func TestNoTenantLabelByDefault(t *testing.T) {
	t.Parallel()
	relay, cons, reg := newTenantMetrics(t, nil)
	countTenant(relay, cons, "acme")
	countTenant(relay, cons, "globex")
	got := series(t, reg)
	for key, want := range map[string]float64{
		`courier_outbox_published_total{topic="orders"}`:                    2,
		`courier_outbox_failures_total{reason="retriable",topic="orders"}`:  2,
		`courier_outbox_dead_lettered_total{topic="orders"}`:                2,
		`courier_consumer_messages_total{outcome="handled",topic="orders"}`: 2,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	for key := range got {
		if strings.Contains(key, "tenant") {
			t.Errorf("%s has a tenant label without Tenants", key)
		}
	}
}

// TestInvalidTenantsAreRefused: an empty tenant, "other", a value that
// is not UTF-8, a tenant listed twice and too long a list are refused,
// naming the entry, by the constructors and by Config.Validate, and
// nothing is registered.
func TestInvalidTenantsAreRefused(t *testing.T) {
	t.Parallel()
	tooMany := make([]string, prom.MaxTenants+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprint(i)
	}
	for _, tc := range []struct {
		tenants []string
		want    string
	}{
		{[]string{"acme", ""}, "Tenants[1] is empty"},
		{[]string{"other"}, `Tenants[0] is "other"`},
		{[]string{"bad\xff"}, `Tenants[0] "bad\xff" is not valid UTF-8`},
		{[]string{"acme", "globex", "acme"}, `Tenants[2] "acme" is listed twice`},
		{tooMany, "lists 1001 tenants"},
	} {
		reg := prometheus.NewRegistry()
		_, errRelay := prom.NewRelayMetrics(reg, prom.Config{Tenants: tc.tenants})
		_, errConsumer := prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Tenants: tc.tenants})
		for _, err := range []error{errRelay, errConsumer, prom.Config{Tenants: tc.tenants}.Validate()} {
			if !errors.Is(err, prom.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Tenants %.40q: %v, want ErrInvalidConfig saying %q", tc.tenants, err, tc.want)
			}
		}
		if families, _ := reg.Gather(); len(families) != 0 {
			t.Errorf("Tenants %.40q registered %d metrics", tc.tenants, len(families))
		}
	}
}

// TestTenantListsMayDifferOnOneRegistry: two consumer groups on one
// registry, each listing its own tenants, register and count apart; a
// third without tenants differs in label names and is refused with an
// error that names Tenants.
func TestTenantListsMayDifferOnOneRegistry(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	orders, err := prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Group: "orders", Tenants: []string{"acme"}})
	if err != nil {
		t.Fatal(err)
	}
	billing, err := prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Group: "billing", Tenants: []string{"globex", "initech"}})
	if err != nil {
		t.Fatalf("a second group with another tenant list: %v", err)
	}
	orders.TenantMessage("orders", "acme", consumer.OutcomeHandled)
	billing.TenantMessage("orders", "initech", consumer.OutcomeHandled)
	got := series(t, reg)
	for _, key := range []string{
		`courier_consumer_messages_total{group="orders",outcome="handled",tenant="acme",topic="orders"}`,
		`courier_consumer_messages_total{group="billing",outcome="handled",tenant="initech",topic="orders"}`,
	} {
		if got[key] != 1 {
			t.Errorf("%s = %v, want 1", key, got[key])
		}
	}

	_, err = prom.NewConsumerMetrics(reg, prom.ConsumerConfig{Group: "audit"})
	if err == nil || !strings.Contains(err.Error(), "ConsumerConfig.Tenants") || strings.Contains(err.Error(), "another ConsumerMetrics") {
		t.Errorf("a group without tenants next to groups with: %v, want an error naming ConsumerConfig.Tenants", err)
	}
	relayReg := prometheus.NewRegistry()
	if _, err := prom.NewRelayMetrics(relayReg, prom.Config{Table: "a.outbox", Tenants: []string{"acme"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := prom.NewRelayMetrics(relayReg, prom.Config{Table: "b.outbox", Tenants: []string{"globex"}}); err != nil {
		t.Errorf("a second relay table with another tenant list: %v", err)
	}
	_, err = prom.NewRelayMetrics(relayReg, prom.Config{Table: "c.outbox"})
	if err == nil || !strings.Contains(err.Error(), "Config.Tenants") || strings.Contains(err.Error(), "another RelayMetrics") {
		t.Errorf("a relay table without tenants next to tables with: %v, want an error naming Config.Tenants", err)
	}
}
