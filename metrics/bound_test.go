package metrics_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/metrics"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// labelValues returns the distinct values of label in the series of the
// metric families named in the exposition text.
func labelValues(text, family, label string) map[string]bool {
	out := map[string]bool{}
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, family) {
			continue
		}
		_, rest, ok := strings.Cut(line, label+`="`)
		if !ok {
			continue
		}
		value, _, _ := strings.Cut(rest, `"`)
		out[value] = true
	}
	return out
}

// scrape returns the exposition text of m.
func scrape(t testing.TB, m *metrics.Metrics) string {
	t.Helper()
	return axtest.ScrapeHandler(t, m.Handler())
}

// The task types and tenants of the task metrics keep at most
// MaxLabelValues values of their own; the others are counted under
// "_other", and a type busier than the least busy kept one takes its place
// (its series gone).
func TestLabelValuesBounded(t *testing.T) {
	t.Parallel()
	m := metrics.New(&metrics.Config{MaxLabelValues: 10})
	for i := range 2000 {
		m.TaskFinished(fmt.Sprintf("type%d", i), fmt.Sprintf("tenant%d", i), 3, worker.OutcomeDead, time.Millisecond)
	}
	text := scrape(t, m)
	types := labelValues(text, "ax_tasks_total{", "type")
	require.Len(t, types, 11, "10 types and _other: %v", types)
	require.True(t, types[metrics.OtherLabel])
	require.Len(t, labelValues(text, "ax_tasks_total{", "tenant"), 11)
	require.Len(t, labelValues(text, "ax_task_run_seconds_count{", "type"), 11)
	require.True(t, strings.Contains(text, `ax_tasks_total{outcome="dead",priority="p3",tenant="_other",type="_other"} 1990`+"\n"))

	for range 5 {
		m.TaskFinished("email", "acme", 3, worker.OutcomeSucceeded, time.Millisecond)
	}
	text = scrape(t, m)
	// Its third event makes "email" (and "acme") busier than twice the
	// least busy kept value (one event): it takes that one's place.
	require.True(t, strings.Contains(text, `ax_tasks_total{outcome="succeeded",priority="p3",tenant="acme",type="email"} 3`+"\n"), "email not kept")
	require.True(t, strings.Contains(text, `ax_tasks_total{outcome="succeeded",priority="p3",tenant="_other",type="_other"} 2`+"\n"))
	types = labelValues(text, "ax_tasks_total{", "type")
	require.Len(t, types, 11, "still 10 types and _other: %v", types)
	require.True(t, types["email"])

	unbounded := metrics.New(&metrics.Config{MaxLabelValues: -1})
	for i := range 300 {
		unbounded.TaskFinished(fmt.Sprintf("type%d", i), "acme", 3, worker.OutcomeDead, time.Millisecond)
	}
	require.Len(t, labelValues(scrape(t, unbounded), "ax_tasks_total{", "type"), 300)
}

// A producer publishing thousands of tasks of distinct types and tenants
// to a worker: the worker's /metrics stays bounded. The worker has a
// handler for one of the types ("echo"), under 1,500 tenants; 1,500 other
// types have no handler. Before the bound, each type and each tenant made
// its own series (the unknown types were dead-lettered: 1,500 x 18 series).
func TestWorkerMetricsStayBounded(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{NoClient: true})
	js := b.JS
	m := metrics.New(&metrics.Config{JetStream: js})
	before := len(scrape(t, m))
	reg := axtest.Registry(t, "echo", func(context.Context, *worker.Task) error { return nil })
	w, _ := b.StartWorker(t, worker.Config{Registry: reg, Observer: m, MaxTimeout: time.Hour})

	const n = 1500
	ctx := context.Background()
	for i := range n {
		for _, subject := range []string{
			fmt.Sprintf("ax.submit.p2.tenant%d.echo.k%d", i, i),
			fmt.Sprintf("ax.submit.p2.acme.type%d.k%d", i, i),
		} {
			msg := nats.NewMsg(subject)
			msg.Header.Set(streams.HeaderMsgID, fmt.Sprintf("t%d-%s", i, strings.Split(subject, ".")[4]))
			_, err := js.PublishMsgAsync(msg)
			require.NoError(t, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		t.Fatal("publishes not acknowledged")
	}
	var records int
	start := time.Now()
	require.Eventually(t, func() bool {
		keys, err := kv.ListKeys(ctx, js, streams.DefaultNames().TasksBucket(), "")
		records = len(keys)
		if time.Since(start) > 10*time.Second && int(time.Since(start)/time.Second)%10 == 0 {
			t.Logf("%v: %d records, %+v", time.Since(start), records, w.Stats())
		}
		return err == nil && records == 2*n && w.Stats().Succeeded == n
	}, 2*time.Minute, 100*time.Millisecond, "every task seen, every echo run")
	t.Logf("every task seen and every echo run after %v: %d records, %+v", time.Since(start), records, w.Stats())
	text := scrape(t, m)
	series := 0
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "ax_") {
			series++
		}
	}
	t.Logf("/metrics: %d bytes before, %d after; %d ax_ series", before, len(text), series)
	require.LessOrEqual(t, len(labelValues(text, "ax_tasks_total{", "tenant")), metrics.DefaultMaxLabelValues+1)
	require.LessOrEqual(t, len(labelValues(text, "ax_tasks_total{", "type")), metrics.DefaultMaxLabelValues+1)
	require.Less(t, series, 2000, "series stay bounded")
	require.Less(t, len(text), 256<<10, "/metrics stays small")
}
