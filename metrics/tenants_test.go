package metrics_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/metrics"
	"github.com/stretchr/testify/require"
)

// On a fair deployment each tenant's queue per bucket shows in the
// metrics, the deepest on their own and the rest summed under "_other".
func TestTenantQueueMetrics(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, &streams.Config{Layout: streams.LayoutFair, Tenants: []string{"acme", "globex", "initech"}})
	ctx := context.Background()
	for tenant, n := range map[string]int{"acme": 3, "globex": 5, "initech": 1} {
		for range n {
			_, err := js.Publish(ctx, "ax.submit.p2."+tenant+".job.k", nil)
			require.NoError(t, err)
		}
	}
	text := scrape(t, metrics.New(&metrics.Config{JetStream: js}))
	for _, want := range []string{
		`ax_tenant_waiting_tasks{priority="2",tenant="acme"} 3`,
		`ax_tenant_waiting_tasks{priority="2",tenant="globex"} 5`,
		`ax_tenant_waiting_tasks{priority="2",tenant="initech"} 1`,
		`ax_tenant_in_flight_tasks{priority="2",tenant="acme"} 0`,
	} {
		require.True(t, strings.Contains(text, want+"\n"), "missing %q in:\n%s", want, text)
	}
	text = scrape(t, metrics.New(&metrics.Config{JetStream: js, MaxLabelValues: 1}))
	for _, want := range []string{
		`ax_tenant_waiting_tasks{priority="2",tenant="globex"} 5`,
		`ax_tenant_waiting_tasks{priority="2",tenant="_other"} 4`,
	} {
		require.True(t, strings.Contains(text, want+"\n"), "missing %q in:\n%s", want, text)
	}
}
