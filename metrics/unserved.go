package metrics

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// unservedCollector reads, at scrape time, the task types that wait with no
// live worker serving them ([kv.UnservedTypes]).
type unservedCollector struct {
	js      jetstream.JetStream
	names   streams.Names
	timeout time.Duration
	// maxTypes bounds the type label: the deepest types keep their own,
	// the others are summed under [OtherLabel] (-1: no bound).
	maxTypes int
	tasks    *prometheus.Desc
	age      *prometheus.Desc
}

func newUnservedCollector(js jetstream.JetStream, names streams.Names, timeout time.Duration, maxTypes int) *unservedCollector {
	return &unservedCollector{js: js, names: names, timeout: timeout, maxTypes: maxTypes,
		tasks: prometheus.NewDesc("ax_unserved_tasks", "Tasks of a type waiting in the buckets with no live worker serving the type (the deepest types; the others summed under type=\"_other\").",
			[]string{"type"}, nil),
		age: prometheus.NewDesc("ax_unserved_oldest_seconds", "Age of the oldest waiting task of a type no live worker serves.",
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
	for _, u := range boundUnserved(unserved, c.maxTypes) {
		ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, float64(u.Depth), u.Type)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, now.Sub(u.Oldest).Seconds(), u.Type)
	}
}

// boundUnserved keeps the max deepest types of unserved (max < 0: all) and
// merges the others into one [OtherLabel] entry: their depth summed, their
// oldest message the oldest of all.
func boundUnserved(unserved []kv.Unserved, max int) []kv.Unserved {
	if max < 0 || len(unserved) <= max {
		return unserved
	}
	sorted := slices.Clone(unserved)
	slices.SortFunc(sorted, func(a, b kv.Unserved) int {
		return cmp.Or(cmp.Compare(b.Depth, a.Depth), strings.Compare(a.Type, b.Type))
	})
	other := kv.Unserved{Type: OtherLabel}
	for _, u := range sorted[max:] {
		other.Depth += u.Depth
		if other.Oldest.IsZero() || u.Oldest.Before(other.Oldest) {
			other.Oldest = u.Oldest
		}
	}
	return append(sorted[:max], other)
}
