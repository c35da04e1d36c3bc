package metrics

import (
	"context"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// unservedCollector reads, at scrape time, the task types of a pools
// deployment that wait with no live worker serving them
// ([kv.UnservedTypes]); on a deployment without pools it reports nothing.
type unservedCollector struct {
	js      jetstream.JetStream
	names   streams.Names
	timeout time.Duration
	tasks   *prometheus.Desc
	age     *prometheus.Desc
}

func newUnservedCollector(js jetstream.JetStream, names streams.Names, timeout time.Duration) *unservedCollector {
	return &unservedCollector{js: js, names: names, timeout: timeout,
		tasks: prometheus.NewDesc("ax_unserved_tasks", "Tasks of a type waiting in the buckets with no live worker serving the type (pools deployments).",
			[]string{"type"}, nil),
		age: prometheus.NewDesc("ax_unserved_oldest_seconds", "Age of the oldest waiting task of a type no live worker serves (pools deployments).",
			[]string{"type"}, nil),
	}
}

// Describe implements [prometheus.Collector].
func (c *unservedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.tasks
	ch <- c.age
}

// Collect implements [prometheus.Collector]. A failed read reports nothing
// (ax_jetstream_up says whether the streams could be read).
func (c *unservedCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	unserved, err := kv.UnservedTypes(ctx, c.js, c.names)
	if err != nil {
		return
	}
	now := time.Now()
	for _, u := range unserved {
		ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, float64(u.Depth), u.Type)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, now.Sub(u.Oldest).Seconds(), u.Type)
	}
}
