package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/streams"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// A new tenant whose first task is delayed: its submit goes to AX_DELAYED,
// not to a bucket, so the leader does not hear it; the mover releases it
// into its bucket later, and the tenant must get its consumers then (not at
// the next election).
func TestDelayedFirstTaskOfATenantRuns(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, &streams.Config{Fair: true}, scheduler.Config{Logger: zaptest.NewLogger(t)})
	s := newStarts()
	startFairWorker(t, b, 2, s.handler(0))
	info, err := b.client.Submit(context.Background(), ax.TaskSpec{Type: "job", Tenant: "later", Priority: ax.P2, Delay: 500 * time.Millisecond})
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, ok := s.startedAt("later", info.ID); return ok }, 15*time.Second, 20*time.Millisecond,
		"the delayed first task of a new tenant waits in its bucket for good")
}
