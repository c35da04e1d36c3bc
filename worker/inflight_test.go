package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// The membership record's in-flight count follows the running handlers
// (issue 17.5: it was refreshed only when shards moved, showing 0 with 5
// tasks running and 17 when idle).
func TestMemberInFlightFollowsHandlers(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	release := make(chan struct{})
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("hold", func(ctx context.Context, _ *worker.Task) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{ID: "counted", Registry: reg, Concurrency: 4, MemberTTL: 4 * time.Second})
	inFlight := func() int {
		members, err := kv.ListMembers(ctx, b.JS, streams.Names{})
		if err != nil || len(members) != 1 {
			return -1
		}
		return members[0].InFlight
	}
	for range 3 {
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "hold"})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return inFlight() == 3 }, 15*time.Second, 50*time.Millisecond, "in flight: %d", inFlight())
	close(release)
	require.Eventually(t, func() bool { return inFlight() == 0 }, 15*time.Second, 50*time.Millisecond, "in flight: %d", inFlight())
}
