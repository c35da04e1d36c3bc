package scheduler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// A new tenant whose first task is delayed: its submit goes to AX_DELAYED,
// not to a bucket, so the leader does not hear it; the mover releases it
// into its bucket later, and the tenant must get its consumers then (not at
// the next election).
func TestDelayedFirstTaskOfATenantRuns(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, &streams.Config{Layout: streams.LayoutFair}, scheduler.Config{Logger: zaptest.NewLogger(t)})
	s := newStarts()
	b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "job", s.handler(0)), Concurrency: 2})
	info, err := b.Client.Submit(context.Background(), ax.TaskSpec{Type: "job", Tenant: "later", Priority: ax.P2, Delay: 500 * time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := s.startedAt("later", info.ID); return ok }, 15*time.Second, 20*time.Millisecond,
		"the delayed first task of a new tenant waits in its bucket for good")
}

// A flood of submits of distinct tenants that no bucket stores (here the
// bucket is full; a service user may submit as any tenant) does not hold
// back a real new tenant: its first task starts within seconds.
func TestTenantFloodKeepsDiscoveryResponsive(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, &streams.Config{Layout: streams.LayoutFair, Capacity: 2}, scheduler.Config{Logger: zaptest.NewLogger(t)})
	ctx := context.Background()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	s := newStarts()
	b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "job", func(ctx context.Context, task *worker.Task) error {
		if task.Tenant == "filler" {
			select { // holds the P2 bucket full
			case <-release:
			case <-ctx.Done():
			}
		}
		return s.handler(0)(ctx, task)
	}), Concurrency: 3})
	submitJobs(t, b.Client, "filler", 2)
	nc, _ := b.Server.Connect()
	for i := range 20000 {
		require.NoError(t, nc.Publish(fmt.Sprintf("ax.submit.p2.ghost-%05d.job.k", i), nil))
	}
	require.NoError(t, nc.Flush())
	start := time.Now()
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "job", Tenant: "real", Priority: ax.P1})
	require.NoError(t, err)
	// It starts (about 5 s on a quiet machine; 21 s once in the whole
	// suite under the race detector, so the bound is the wait's).
	require.Eventually(t, func() bool { _, ok := s.startedAt("real", info.ID); return ok }, 60*time.Second, 20*time.Millisecond,
		"the ghosts held back the real tenant")
	t.Logf("the real tenant's first task started after %s", time.Since(start))
	for range 3 { // and more ghosts, so that the leader has some to look for when it stops
		for i := range 20000 {
			require.NoError(t, nc.Publish(fmt.Sprintf("ax.submit.p2.more-%05d.job.k", i), nil))
		}
		require.NoError(t, nc.Flush())
		time.Sleep(300 * time.Millisecond)
	}
	start = time.Now()
	b.leader.StopRun()
	t.Logf("the leader stopped in %s", time.Since(start))
	require.Less(t, time.Since(start), 10*time.Second, "the leader's discovery kept looking for the ghosts after it stopped (38 s before the fix)")
}

// Tenants whose consumer names are hashes (a ':' or 'é', or longer than 64)
// get their consumers and their tasks run, as a plain one's.
func TestHashedTenantsRun(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, &streams.Config{Layout: streams.LayoutFair}, scheduler.Config{Logger: zaptest.NewLogger(t)})
	s := newStarts()
	b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "job", s.handler(0)), Concurrency: 4})
	tenants := []string{"acme:eu", "café", strings.Repeat("x", 100)}
	for _, tenant := range tenants {
		ids := submitJobs(t, b.Client, tenant, 3)
		require.Eventually(t, func() bool { return s.count(tenant) == len(ids) }, 30*time.Second, 20*time.Millisecond, tenant)
	}
}
