package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/streams"
	"github.com/stretchr/testify/require"
)

// On a pools deployment the pause level pauses the type consumers of the
// buckets below the full one, as it pauses the shard consumers otherwise.
func TestBackpressurePausesTypeConsumers(t *testing.T) {
	t.Parallel()
	lb := setupLoops(t, 1, &streams.Config{Capacity: 20, Pools: true, Types: []string{"x", "y"}},
		scheduler.LeaderConfig{PressureInterval: 20 * time.Millisecond})
	js, client, ctx := lb.js, lb.client, context.Background()
	consumerPaused := func(stream, name string) bool {
		cons, err := js.Consumer(ctx, stream, name)
		require.NoError(t, err)
		return cons.CachedInfo().Paused
	}
	for range 19 { // P3 at 95%
		_, err := client.Submit(ctx, scheduler.TaskSpec{Type: "x", Priority: scheduler.P3, Core: true})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return consumerPaused("AX_P4", "p4-s00-t-x") && consumerPaused("AX_P4", "p4-s31-t-y")
	}, 10*time.Second, 10*time.Millisecond, "a full P3 pauses the type consumers of P4")
	require.False(t, consumerPaused("AX_P3", "p3-s00-t-x"), "the full bucket keeps draining")
	stream, err := js.Stream(ctx, "AX_P3")
	require.NoError(t, err)
	require.NoError(t, stream.Purge(ctx))
	require.Eventually(t, func() bool {
		return !consumerPaused("AX_P4", "p4-s00-t-x") && !consumerPaused("AX_P4", "p4-s31-t-y")
	}, 10*time.Second, 10*time.Millisecond, "P4 resumes")
}
