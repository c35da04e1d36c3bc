package metrics_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/metrics"
	"github.com/stretchr/testify/require"
)

// BenchmarkWorkflowsScrape measures a scrape of ax_workflows with 1,000
// workflows kept, each a chain of 10 tasks: "waiting", no task released
// (no leader: each root is read again at each scrape, its descendants
// not, since their parents have not ended), and "ended", every task
// CANCELLED (read once, then never again). The first scrape, which reads
// every document, is logged apart; "none" is a scrape of every gauge
// with no workflow, for comparison.
//
//	nice -n 19 go test -run '^$' -bench BenchmarkWorkflowsScrape -benchtime 20x ./metrics/
func BenchmarkWorkflowsScrape(b *testing.B) {
	const workflows, tasks = 1000, 10
	for _, name := range []string{"none", "waiting", "ended"} {
		ended, count := name == "ended", workflows
		if name == "none" {
			count = 0
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			dep := axtest.Setup(b, axtest.Options{})
			for i := range count {
				wf := ax.NewWorkflow(fmt.Sprintf("wf-%d", i))
				for j := range tasks { // a chain: j after j-1
					var after []string
					if j > 0 {
						after = []string{fmt.Sprint(j - 1)}
					}
					wf.Add(fmt.Sprint(j), ax.TaskSpec{Type: "x"}, after...)
				}
				_, err := dep.Client.SubmitWorkflow(ctx, wf)
				require.NoError(b, err)
				if ended {
					for j := range tasks {
						_, _, err := dep.Store.Create(ctx, &kv.Record{ID: wf.TaskID(fmt.Sprint(j)), Tenant: ax.DefaultTenant, Type: "x",
							State: kv.StateCancelled}, kv.Actor{Action: "bench"})
						require.NoError(b, err)
					}
				}
			}
			m := metrics.New(&metrics.Config{JetStream: dep.JS, ScrapeTimeout: time.Minute})
			start := time.Now()
			text := scrape(b, m)
			b.Logf("%s: first scrape %v", name, time.Since(start))
			want := map[string]string{"none": `ax_workflows{state="running"} 0`, "waiting": `ax_workflows{state="running"} 1000`,
				"ended": `ax_workflows{state="cancelled"} 1000`}[name]
			require.Contains(b, text, want+"\n")
			b.ResetTimer()
			for range b.N {
				scrape(b, m)
			}
		})
	}
}
