package ax_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/metrics"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// TestConstructorsAcceptNilConfig builds every part of the default
// deployment from a nil config (a worker needs its handlers: refused
// with a reason).
func TestConstructorsAcceptNilConfig(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	client, err := ax.NewClient(ctx, js, nil)
	require.NoError(t, err)
	defer func() { _ = client.Close() }()
	_, err = admin.New(ctx, js, nil)
	require.NoError(t, err)
	_, err = scheduler.NewElector(ctx, js, nil)
	require.NoError(t, err)
	_, err = scheduler.New(ctx, js, nil)
	require.NoError(t, err)
	_, err = worker.New(ctx, js, nil)
	require.ErrorContains(t, err, "a Registry is required", "refused with a reason, not a panic")
	require.NotNil(t, metrics.New(nil))
	info, err := client.Submit(ctx, ax.TaskSpec{Type: "email"})
	require.NoError(t, err)
	require.Equal(t, "AX_P2", info.Stream, "a task that names no priority is DefaultPriority (P2)")
}

// Two contenders of one process get distinct default ids: a shared id would
// let one renew the other's leader lease.
func TestDefaultElectorIDsDiffer(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, nil)
	ctx := context.Background()
	seen := map[string]bool{}
	for range 100 {
		e, err := scheduler.NewElector(ctx, js, nil)
		require.NoError(t, err)
		require.False(t, seen[e.ID()], "id %s given twice", e.ID())
		seen[e.ID()] = true
	}
}
