package metrics

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// tenantsCollector reads, at scrape time, each tenant's queue of each
// bucket of a fair deployment ([streams.TenantQueues]); on another layout
// it reports nothing.
type tenantsCollector struct {
	js      jetstream.JetStream
	names   streams.Names
	timeout time.Duration
	// maxTenants bounds the tenant label per bucket: the deepest queues
	// keep their own, the others are summed under [OtherLabel] (-1: no
	// bound).
	maxTenants int
	waiting    *prometheus.Desc
	inFlight   *prometheus.Desc
}

func newTenantsCollector(js jetstream.JetStream, names streams.Names, timeout time.Duration, maxTenants int) *tenantsCollector {
	return &tenantsCollector{js: js, names: names, timeout: timeout, maxTenants: maxTenants,
		waiting: prometheus.NewDesc("ax_tenant_waiting_tasks", "On a fair deployment, a tenant's tasks of a bucket not delivered yet (the deepest tenants per bucket; the others summed under tenant=\"_other\").",
			[]string{"tenant", "priority"}, nil),
		inFlight: prometheus.NewDesc("ax_tenant_in_flight_tasks", "On a fair deployment, a tenant's tasks of a bucket delivered and not acknowledged yet.",
			[]string{"tenant", "priority"}, nil),
	}
}

// Describe implements [prometheus.Collector].
func (c *tenantsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.waiting
	ch <- c.inFlight
}

// Collect implements [prometheus.Collector]. A failed read reports nothing
// for its bucket.
func (c *tenantsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	for p := range streams.Priorities {
		stream, err := c.js.Stream(ctx, c.names.PriorityStream(p))
		if err != nil || streams.LayoutOf(stream.CachedInfo().Config) != streams.LayoutFair {
			return
		}
		queues, _, err := streams.TenantQueues(ctx, stream, p)
		if err != nil {
			continue
		}
		prio := strconv.Itoa(p)
		for _, q := range boundTenants(queues, c.maxTenants) {
			ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(q.Waiting), q.Tenant, prio)
			ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(q.InFlight), q.Tenant, prio)
		}
	}
}

// boundTenants keeps the max deepest queues (max < 0: all) and sums the
// others into one [OtherLabel] queue.
func boundTenants(queues []streams.TenantQueue, max int) []streams.TenantQueue {
	if max < 0 || len(queues) <= max {
		return queues
	}
	sorted := slices.Clone(queues)
	slices.SortFunc(sorted, func(a, b streams.TenantQueue) int {
		return cmp.Or(cmp.Compare(b.Waiting, a.Waiting), strings.Compare(a.Tenant, b.Tenant))
	})
	other := streams.TenantQueue{Tenant: OtherLabel, Priority: sorted[0].Priority}
	for _, q := range sorted[max:] {
		other.Waiting += q.Waiting
		other.InFlight += q.InFlight
	}
	return append(sorted[:max], other)
}
