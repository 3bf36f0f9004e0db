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

	printCounter(reg, prom.NamePublished)
	// Output:
	// tenant=acme topic=orders 1
	// tenant=other topic=orders 1000
}

// printCounter prints each series of the counter name in reg: its labels
// and its value.
func printCounter(reg prometheus.Gatherer, name string) {
	families, err := reg.Gather()
	if err != nil {
		log.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				fmt.Printf("%s=%s ", l.GetName(), l.GetValue())
			}
			fmt.Println(m.GetCounter().GetValue())
		}
	}
}
