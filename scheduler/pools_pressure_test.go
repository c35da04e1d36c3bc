package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// On a pools deployment the pause level pauses the type consumers of the
// buckets below the full one, as it pauses the shard consumers otherwise.
func TestBackpressurePausesTypeConsumers(t *testing.T) {
	t.Parallel()
	lb := setupLoops(t, 1, &streams.Config{Capacity: 20, Layout: streams.LayoutPools, Types: []string{"x", "y"}},
		scheduler.Config{PressureInterval: 20 * time.Millisecond})
	js, client, ctx := lb.JS, lb.Client, context.Background()
	for range 19 { // P3 at 95%
		_, err := client.Submit(ctx, ax.TaskSpec{Type: "x", Priority: ax.P3, Core: true})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return consumerPaused(t, js, "AX_P4", "p4-s00-t-x") && consumerPaused(t, js, "AX_P4", "p4-s31-t-y")
	}, 10*time.Second, 10*time.Millisecond, "a full P3 pauses the type consumers of P4")
	require.False(t, consumerPaused(t, js, "AX_P3", "p3-s00-t-x"), "the full bucket keeps draining")
	stream, err := js.Stream(ctx, "AX_P3")
	require.NoError(t, err)
	require.NoError(t, stream.Purge(ctx))
	require.Eventually(t, func() bool {
		return !consumerPaused(t, js, "AX_P4", "p4-s00-t-x") && !consumerPaused(t, js, "AX_P4", "p4-s31-t-y")
	}, 10*time.Second, 10*time.Millisecond, "P4 resumes")
}

// On a pools deployment aging leaves the tasks of a type no live worker
// serves in their bucket: they would age without end and, lifted, take the
// room of the buckets above up to P0 from tasks that can run. A served
// type's waiting tasks are lifted as before.
func TestAgingLeavesUnservedTypesWhereTheyAre(t *testing.T) {
	t.Parallel()
	lb := setupLoops(t, 1, &streams.Config{Layout: streams.LayoutPools, Types: []string{"x", "report"}},
		scheduler.Config{AgingThreshold: 300 * time.Millisecond})
	client, ctx := lb.Client, context.Background()
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("x", func(ctx context.Context, _ *worker.Task) error {
		<-ctx.Done() // holds the only slot: the other x tasks wait and age
		return ctx.Err()
	}, nil))
	lb.StartWorker(t, worker.Config{Registry: reg, Concurrency: 1, PrefetchPerShard: 1})
	blocker, err := client.Submit(ctx, ax.TaskSpec{Type: "x", Priority: ax.P0, Key: "blocker"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		rec, _, err := client.Store().Get(ctx, kv.Ref{Tenant: blocker.Tenant, ID: blocker.ID})
		return err == nil && rec.State == kv.StateRunning
	}, 10*time.Second, 10*time.Millisecond)

	var unserved, served []string
	for range 4 {
		info, err := client.Submit(ctx, ax.TaskSpec{Type: "report", Priority: ax.P4, Key: "k"})
		require.NoError(t, err)
		unserved = append(unserved, info.ID)
	}
	for range 4 {
		info, err := client.Submit(ctx, ax.TaskSpec{Type: "x", Priority: ax.P4, Key: "k"})
		require.NoError(t, err)
		served = append(served, info.ID)
	}
	priority := func(id string) int {
		rec, _, err := client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
		require.NoError(t, err)
		return rec.Priority
	}
	require.Eventually(t, func() bool {
		lifted := 0
		for _, id := range served {
			if priority(id) <= 2 {
				lifted++
			}
		}
		return lifted >= 2 // two levels: two thresholds and more waited
	}, 20*time.Second, 20*time.Millisecond, "the served type's waiting tasks are lifted")
	for _, id := range unserved {
		require.Equal(t, 4, priority(id), "task %s of the unserved type was lifted", id)
	}
}

// The consumers of a type created while backpressure pauses a bucket (a
// worker of a new type starts) start paused as long as the bucket's
// others, instead of delivering until the leader's next pause (30 s later).
func TestTypeJoiningDuringPauseStartsPaused(t *testing.T) {
	t.Parallel()
	cfg := &streams.Config{Capacity: 20, Layout: streams.LayoutPools, Types: []string{"x"}}
	lb := setupLoops(t, 1, cfg, scheduler.Config{PressureInterval: 20 * time.Millisecond})
	js, client, ctx := lb.JS, lb.Client, context.Background()
	for range 19 { // P3 at 95%
		_, err := client.Submit(ctx, ax.TaskSpec{Type: "x", Priority: ax.P3, Core: true})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return consumerPaused(t, js, "AX_P4", "p4-s00-t-x") },
		10*time.Second, 10*time.Millisecond, "a full P3 pauses the type consumers of P4")

	// A worker serving a new type starts: it creates the type's consumers
	// as bindShards does.
	stream, err := js.Stream(ctx, "AX_P0")
	require.NoError(t, err)
	poolsCfg, err := streams.RoutedConfig(streams.Names{}, stream.CachedInfo().Config)
	require.NoError(t, err)
	_, err = streams.EnsureTypeConsumers(ctx, js, poolsCfg, "z")
	require.NoError(t, err)
	require.True(t, consumerPaused(t, js, "AX_P4", "p4-s00-t-z"), "the new type's P4 consumers start paused")
	require.True(t, consumerPaused(t, js, "AX_P4", "p4-s31-t-z"))
	require.False(t, consumerPaused(t, js, "AX_P3", "p3-s00-t-z"), "the full bucket's keep draining")
}

// consumerPaused reports whether consumer name of stream is paused.
func consumerPaused(t *testing.T, js jetstream.JetStream, stream, name string) bool {
	t.Helper()
	cons, err := js.Consumer(context.Background(), stream, name)
	require.NoError(t, err)
	return cons.CachedInfo().Paused
}

// On a fair deployment the leader pauses every tenant's consumers of the
// buckets below a full one, and the consumers it creates for a tenant it
// first hears while the pause holds start paused as the others.
func TestTenantJoiningDuringPauseStartsPaused(t *testing.T) {
	t.Parallel()
	cfg := &streams.Config{Capacity: 20, Layout: streams.LayoutFair, Tenants: []string{"acme"}}
	lb := setupLoops(t, 1, cfg, scheduler.Config{PressureInterval: 20 * time.Millisecond})
	js, client, ctx := lb.JS, lb.Client, context.Background()
	for range 19 { // P3 at 95%
		_, err := client.Submit(ctx, ax.TaskSpec{Type: "x", Tenant: "acme", Priority: ax.P3, Core: true})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool { return consumerPaused(t, js, "AX_P4", "p4-s00-n-acme") },
		10*time.Second, 10*time.Millisecond, "a full P3 pauses acme's consumers of P4")
	_, err := client.Submit(ctx, ax.TaskSpec{Type: "x", Tenant: "globex", Priority: ax.P4})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := js.Consumer(ctx, "AX_P4", "p4-s31-n-globex")
		return err == nil
	}, 30*time.Second, 20*time.Millisecond, "the leader makes the new tenant's consumers")
	require.True(t, consumerPaused(t, js, "AX_P4", "p4-s00-n-globex"), "the new tenant's P4 consumers start paused")
	require.True(t, consumerPaused(t, js, "AX_P4", "p4-s31-n-globex"))
	require.False(t, consumerPaused(t, js, "AX_P3", "p3-s00-n-globex"), "the full bucket's keep draining")
}
