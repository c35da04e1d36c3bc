package metrics

import (
	"context"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// limitsCollector reads, at scrape time, the mesh's limits and pauses
// (AX_CONTROL's limits key) and the use of each limit (AX_LIMITS). The
// operator sets the limits, so their count is bounded by the operator, not
// by producers.
type limitsCollector struct {
	js      jetstream.JetStream
	names   streams.Names
	timeout time.Duration
	slots   *prometheus.Desc
	inUse   *prometheus.Desc
	rate    *prometheus.Desc
	tokens  *prometheus.Desc
	weight  *prometheus.Desc
	paused  *prometheus.Desc
}

func newLimitsCollector(js jetstream.JetStream, names streams.Names, timeout time.Duration) *limitsCollector {
	target := []string{"target"}
	return &limitsCollector{js: js, names: names, timeout: timeout,
		slots:  prometheus.NewDesc("ax_limit_concurrency", "The concurrency limit of a target (a task type, tenant:NAME or key:PATTERN), mesh-wide.", target, nil),
		inUse:  prometheus.NewDesc("ax_limit_in_use", "Slots of a target's concurrency limit held now, mesh-wide.", target, nil),
		rate:   prometheus.NewDesc("ax_limit_rate", "The rate limit of a target: starts per second, mesh-wide.", target, nil),
		tokens: prometheus.NewDesc("ax_limit_tokens", "Starts a target's rate limit has to give now.", target, nil),
		weight: prometheus.NewDesc("ax_limit_weight", "The weight of a tenant (tenant:NAME) or a task type: its share of its priority's starts where the tenants or the types take turns.", target, nil),
		paused: prometheus.NewDesc("ax_paused", "1 for each paused task type or tenant (tenant:NAME).", target, nil),
	}
}

// Describe implements [prometheus.Collector].
func (c *limitsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.slots, c.inUse, c.rate, c.tokens, c.weight, c.paused} {
		ch <- d
	}
}

// Collect implements [prometheus.Collector]. A failed read reports nothing.
func (c *limitsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	board, err := control.Open(ctx, c.js, c.names)
	if err != nil {
		return
	}
	limits, _, err := kv.ReadLimits(ctx, board)
	if err != nil {
		return
	}
	for target := range limits.Paused {
		ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, 1, target)
	}
	if len(limits.Limits) == 0 {
		return
	}
	use, err := kv.NewLimitUse(ctx, c.js, c.names)
	if err != nil {
		return
	}
	for _, target := range limits.Targets() {
		l := limits.Limits[target]
		if l.Weight > 0 {
			ch <- prometheus.MustNewConstMetric(c.weight, prometheus.GaugeValue, float64(l.Weight), target)
		}
		if l.Concurrency > 0 {
			ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(l.Concurrency), target)
			if n, err := use.InUse(ctx, target); err == nil {
				ch <- prometheus.MustNewConstMetric(c.inUse, prometheus.GaugeValue, float64(n), target)
			}
		}
		if l.Rate > 0 {
			ch <- prometheus.MustNewConstMetric(c.rate, prometheus.GaugeValue, l.Rate, target)
			if tokens, err := use.Tokens(ctx, target, l.Rate, l.Burst); err == nil {
				ch <- prometheus.MustNewConstMetric(c.tokens, prometheus.GaugeValue, tokens, target)
			}
		}
	}
}
