package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/ax-mesh/ax/internal/axtest"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// One producer cannot exhaust the operators' tools, as deployed: 10,000 raw
// submits, each of its own task type and tenant, whose deadline has passed
// (so that the worker dead-letters every one at once, whatever its type).
// The worker's /metrics stays small (the types and tenants beyond the 100
// busiest are counted under "_other"); ax stats answers, cut below the
// server's max_payload and saying so; ax dlq ls at its documented maximum
// answers with a page and the next one's start.
//
// Before: /metrics grew to 180,000 series, the stats reply exceeded
// max_payload (ax stats waited 60 s, "context deadline exceeded"), and
// dlq.list at its maximum got no reply.
func TestOneProducerCannotExhaustOperatorTools(t *testing.T) {
	t.Parallel()
	dev := startDev(t, "--workers", "0")
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	startAx(t, "worker", "--server", dev.url, "--metrics-addr", metricsAddr)
	require.Eventually(t, func() bool { return strings.Contains(scrapeOrEmpty(metricsAddr), "# HELP") },
		30*time.Second, 100*time.Millisecond)
	before := len(scrape(t, metricsAddr))

	const n = 10_000
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	for i := range n {
		msg := newMsg(fmt.Sprintf("ax.submit.p2.tenant%d.type%d.k", i, i), "{}",
			map[string]string{"Nats-Msg-Id": fmt.Sprintf("x%d", i), "Ax-Deadline": past})
		_, err := dev.js.PublishMsgAsync(msg)
		for errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			// 4,000 acks outstanding and none for 200 ms (a loaded
			// machine): let them land, then publish again.
			select {
			case <-dev.js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				t.Fatal("publishes not acknowledged")
			}
			_, err = dev.js.PublishMsgAsync(msg)
		}
		require.NoError(t, err)
	}
	select {
	case <-dev.js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		t.Fatal("publishes not acknowledged")
	}
	dlq, err := dev.js.Stream(context.Background(), "AX_DLQ")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := dlq.Info(context.Background())
		return err == nil && info.State.Msgs == n
	}, 3*time.Minute, 250*time.Millisecond, "every task dead-lettered")

	text := scrape(t, metricsAddr)
	series := 0
	types := map[string]bool{}
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "ax_") {
			series++
		}
		if _, rest, ok := strings.Cut(line, `type="`); ok && strings.HasPrefix(line, "ax_tasks_total") {
			value, _, _ := strings.Cut(rest, `"`)
			types[value] = true
		}
	}
	t.Logf("/metrics: %d bytes before, %d after %d types; %d ax_ series", before, len(text), n, series)
	require.LessOrEqual(t, len(types), 101, "at most 100 types and _other")
	require.True(t, types["_other"])
	require.Less(t, len(text), 200<<10)

	start := time.Now()
	out, err := axOutput("stats", "--json", "--server", dev.url)
	require.NoError(t, err)
	took := time.Since(start)
	var stats admin.StatsReply
	require.NoError(t, json.Unmarshal([]byte(out), &stats))
	t.Logf("ax stats --json: %d bytes in %s, %d types listed, %d omitted", len(out), took.Round(time.Millisecond), len(stats.Types), stats.TypesOmitted)
	require.True(t, stats.Truncated)
	require.Equal(t, n, len(stats.Types)+stats.TypesOmitted)
	require.Contains(t, runAx(t, "stats", "--server", dev.url), "the reply was cut to fit the server's max_payload")

	out, err = axOutput("dlq", "ls", "--limit", fmt.Sprint(admin.MaxDLQLimit), "--json", "--server", dev.url)
	require.NoError(t, err)
	var page admin.DLQListReply
	require.NoError(t, json.Unmarshal([]byte(out), &page))
	t.Logf("ax dlq ls --limit %d: %d letters in %d bytes, next after #%d", admin.MaxDLQLimit, len(page.Letters), len(out), page.Next)
	require.EqualValues(t, n, page.Total)
	require.True(t, page.Truncated)
	require.NotZero(t, page.Next)
	require.NotEmpty(t, page.Letters)
	human := runAx(t, "dlq", "ls", "--limit", fmt.Sprint(admin.MaxDLQLimit), "--after", fmt.Sprint(page.Next), "--server", dev.url)
	require.Contains(t, human, "more follow: ax dlq ls --after")
}

// scrapeOrEmpty returns the metrics text at addr, or "" while it cannot.
func scrapeOrEmpty(addr string) string {
	text, _ := axtest.Scraped("http://" + addr + "/metrics")
	return text
}
