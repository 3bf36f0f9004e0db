package prom

import (
	"fmt"
	"unicode/utf8"

	"github.com/courierkit/courier/consumer"
	"github.com/courierkit/courier/producer"
)

// The metrics hear the tenant's variants of the hooks, and through them
// the tenant of each event and message.
var (
	_ producer.TenantPublishedHook     = (*RelayMetrics)(nil)
	_ producer.TenantPublishFailedHook = (*RelayMetrics)(nil)
	_ producer.TenantDeadLetteredHook  = (*RelayMetrics)(nil)
	_ consumer.TenantMessageHook       = (*ConsumerMetrics)(nil)
)

// LabelTenant is the label that Config.Tenants and ConsumerConfig.Tenants
// add to the counters of messages and events.
const LabelTenant = "tenant"

// TenantOther is the tenant label's value of every tenant not listed in
// Config.Tenants (or ConsumerConfig.Tenants), and of the events and
// messages without a tenant.
const TenantOther = "other"

// MaxTenants bounds Config.Tenants and ConsumerConfig.Tenants.
const MaxTenants = 1000

// tenantLabel maps tenants to the values of the tenant label: a listed
// tenant is its own value, any other is TenantOther, so a counter has at
// most len(listed)+1 series per topic (and outcome or reason). A nil
// tenantLabel is off: no tenant label at all.
type tenantLabel struct {
	listed map[string]struct{}
}

// newTenantLabel checks field, a list of tenants, and returns its label,
// nil when the list is empty.
func newTenantLabel(field string, tenants []string) (*tenantLabel, error) {
	if len(tenants) == 0 {
		return nil, nil
	}
	if len(tenants) > MaxTenants {
		return nil, fmt.Errorf("%w: %s lists %d tenants; list at most %d, those worth a series of their own (the others count as %q)",
			ErrInvalidConfig, field, len(tenants), MaxTenants, TenantOther)
	}
	t := &tenantLabel{listed: make(map[string]struct{}, len(tenants))}
	for i, tenant := range tenants {
		switch _, dup := t.listed[tenant]; {
		case tenant == "":
			return nil, fmt.Errorf("%w: %s[%d] is empty; events and messages without a tenant count as %q", ErrInvalidConfig, field, i, TenantOther)
		case tenant == TenantOther:
			return nil, fmt.Errorf("%w: %s[%d] is %q, the value of every tenant not listed; rename the tenant or leave it out", ErrInvalidConfig, field, i, TenantOther)
		case !utf8.ValidString(tenant):
			return nil, fmt.Errorf("%w: %s[%d] %q is not valid UTF-8; Prometheus label values must be UTF-8", ErrInvalidConfig, field, i, tenant)
		case dup:
			return nil, fmt.Errorf("%w: %s[%d] %q is listed twice", ErrInvalidConfig, field, i, tenant)
		}
		t.listed[tenant] = struct{}{}
	}
	return t, nil
}

// names returns the label names of a counter: labels, and tenant when on.
func (t *tenantLabel) names(labels ...string) []string {
	if t == nil {
		return labels
	}
	return append(labels, LabelTenant)
}

// help returns the help of a counter, saying what the tenant label holds
// when on. It is the same for every list: Prometheus refuses a second
// metric of one name whose help differs, so two metrics sets on one
// registry with different lists (two consumer groups, say) would collide.
func (t *tenantLabel) help(help string) string {
	if t == nil {
		return help
	}
	return help + " The tenant label holds the tenants listed in the config; any other, and none, is \"" + TenantOther + "\"."
}

// values returns the label values of a counter: values, and the value of
// tenant when on.
func (t *tenantLabel) values(tenant string, values ...string) []string {
	if t == nil {
		return values
	}
	if _, ok := t.listed[tenant]; !ok {
		tenant = TenantOther
	}
	return append(values, tenant)
}
