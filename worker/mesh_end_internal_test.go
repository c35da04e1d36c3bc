package worker

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// A lost lease ends the guarded context and, through it, closes the mesh's
// watchers: whichever the loop sees first, serveMesh reports the loss
// (which cancels the running handlers), not the closed watcher.
func TestMeshEndReportsTheLostLease(t *testing.T) {
	closed := errors.New("watch shard table: closed")
	lost := fmt.Errorf("%w: no renewal of AX_WORKERS/A within its TTL", kv.ErrLeaseLost)

	ctx := context.Background()
	guarded, cancel := context.WithCancelCause(ctx)
	require.Equal(t, closed, meshEnd(ctx, guarded, closed), "a failure while the lease holds is itself")
	cancel(lost)
	require.ErrorIs(t, meshEnd(ctx, guarded, closed), kv.ErrLeaseLost, "the lease lost, not the closed watcher")
	require.NoError(t, meshEnd(ctx, guarded, nil))

	stopped, stop := context.WithCancel(ctx)
	guarded, cancel = context.WithCancelCause(stopped)
	defer cancel(nil)
	stop()
	require.NoError(t, meshEnd(stopped, guarded, closed), "the worker stopping is no failure")
}
