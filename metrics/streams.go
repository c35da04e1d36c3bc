package metrics

import (
	"context"
	"strconv"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// streamCollector reads bucket depth, in-flight messages and the dead-letter
// count from JetStream at scrape time, so the gauges are never stale and no
// loop runs between scrapes.
type streamCollector struct {
	js       jetstream.JetStream
	names    streams.Names
	timeout  time.Duration
	depth    *prometheus.Desc
	capacity *prometheus.Desc
	inFlight *prometheus.Desc
	dlq      *prometheus.Desc
	up       *prometheus.Desc
}

func newStreamCollector(js jetstream.JetStream, names streams.Names, timeout time.Duration) *streamCollector {
	return &streamCollector{
		js: js, names: names, timeout: timeout,
		depth: prometheus.NewDesc("ax_bucket_depth", "Messages stored in a priority bucket (waiting and in flight).",
			[]string{"priority"}, nil),
		capacity: prometheus.NewDesc("ax_bucket_capacity", "Capacity (MaxMsgs) of a priority bucket.", []string{"priority"}, nil),
		inFlight: prometheus.NewDesc("ax_bucket_in_flight", "Messages of a priority bucket delivered and not yet acknowledged.",
			[]string{"priority"}, nil),
		dlq: prometheus.NewDesc("ax_dlq_messages", "Dead letters stored in the dead-letter stream.", nil, nil),
		up:  prometheus.NewDesc("ax_jetstream_up", "1 if the last scrape could read the streams, else 0.", nil, nil),
	}
}

// Describe implements [prometheus.Collector].
func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.depth, c.capacity, c.inFlight, c.dlq, c.up} {
		ch <- d
	}
}

// Collect implements [prometheus.Collector].
func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	up := 1.0
	for p := range streams.Priorities {
		stream, err := c.js.Stream(ctx, c.names.PriorityStream(p))
		if err != nil {
			up = 0
			continue
		}
		label := "p" + strconv.Itoa(p)
		info := stream.CachedInfo()
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(info.State.Msgs), label)
		ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, float64(info.Config.MaxMsgs), label)
		inFlight := 0
		list := stream.ListConsumers(ctx)
		for ci := range list.Info() {
			inFlight += ci.NumAckPending
		}
		if list.Err() != nil {
			up = 0
		}
		ch <- prometheus.MustNewConstMetric(c.inFlight, prometheus.GaugeValue, float64(inFlight), label)
	}
	if dlq, err := c.js.Stream(ctx, c.names.DLQStream()); err == nil {
		ch <- prometheus.MustNewConstMetric(c.dlq, prometheus.GaugeValue, float64(dlq.CachedInfo().State.Msgs))
	} else {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, up)
}
