package prom_test

import (
	"fmt"
	"log"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/courierkit/courier/prom"
)

// List the tenants worth a series of their own: the relay counts every
// other tenant, however many there are, as "other".
func ExampleConfig_tenants() {
	reg := prometheus.NewRegistry()
	metrics, err := prom.NewRelayMetrics(reg, prom.Config{Tenants: []string{"acme", "globex"}})
	if err != nil {
		log.Fatal(err)
	}
	// What the relay reports of the events of many tenants:
	for i := range 1000 {
		metrics.TenantPublished("orders", fmt.Sprintf("tenant-%d", i), 40*time.Millisecond)
	}
	metrics.TenantPublished("orders", "acme", 40*time.Millisecond)

	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != prom.NamePublished {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == prom.LabelTenant {
					fmt.Printf("tenant=%s %v\n", l.GetValue(), m.GetCounter().GetValue())
				}
			}
		}
	}
	// Output:
	// tenant=acme 1
	// tenant=other 1000
}
