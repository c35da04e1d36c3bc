package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// TestAdminClientTypedMethods drives every typed method of the admin client
// against a real management API: each reaches its verb and decodes its reply.
func TestAdminClientTypedMethods(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := b.Submit(t, ax.TaskSpec{Type: "email", Tenant: "acme", Priority: ax.P3})

	got, err := b.api.Get(ctx, admin.TaskRequest{ID: id})
	require.NoError(t, err)
	require.Equal(t, kv.StateReady, got.Task.State)
	require.Equal(t, "acme", got.Task.Tenant)

	trail, err := b.api.Trail(ctx, admin.TaskRequest{ID: id, Tenant: "acme"})
	require.NoError(t, err)
	require.Equal(t, id, trail.ID)
	require.Equal(t, "acme", trail.Tenant)
	require.Len(t, trail.Trail, 1)

	moved, err := b.api.Reprioritize(ctx, admin.ReprioritizeRequest{ID: id, Priority: 1})
	require.NoError(t, err)
	require.Equal(t, 1, moved.Task.Priority)

	paused, err := b.api.Pause(ctx, admin.TaskRequest{ID: id})
	require.NoError(t, err)
	require.Equal(t, kv.StatePaused, paused.Task.State)
	resumed, err := b.api.Resume(ctx, admin.TaskRequest{ID: id})
	require.NoError(t, err)
	require.Equal(t, kv.StateReady, resumed.Task.State)
	require.True(t, resumed.Redispatched)

	list, err := b.api.List(ctx, admin.TasksListRequest{Filter: admin.Filter{Tenant: "acme"}})
	require.NoError(t, err)
	require.Equal(t, 1, list.Matched)
	require.Equal(t, id, list.Tasks[0].ID)

	dry, err := b.api.CancelMatching(ctx, admin.BatchCancelRequest{Filter: admin.Filter{Type: "email"}, DryRun: true})
	require.NoError(t, err)
	require.True(t, dry.DryRun)
	require.Equal(t, []kv.Ref{{Tenant: "acme", ID: id}}, dry.Tasks)

	cancelled, err := b.api.Cancel(ctx, admin.TaskRequest{ID: id})
	require.NoError(t, err)
	require.Equal(t, kv.StateCancelled, cancelled.Task.State)

	unseen, err := b.api.Pause(ctx, admin.TaskRequest{ID: "raw-typed", Tenant: "acme", Unseen: true})
	require.NoError(t, err)
	require.True(t, unseen.Created)

	letters, err := b.api.ListDLQ(ctx, admin.DLQListRequest{})
	require.NoError(t, err)
	require.Empty(t, letters.Letters)
	replay, err := b.api.Replay(ctx, admin.DLQReplayRequest{Filter: admin.Filter{Type: "email"}, DryRun: true})
	require.NoError(t, err)
	require.True(t, replay.DryRun)
	require.Empty(t, replay.Replayed)

	stats, err := b.api.Stats(ctx, admin.StatsRequest{Window: "1m"})
	require.NoError(t, err)
	require.Len(t, stats.Buckets, 5)
	require.Equal(t, 1, stats.States[kv.StateCancelled])

	workers, err := b.api.Workers(ctx)
	require.NoError(t, err)
	require.Empty(t, workers.Workers)

	control, err := b.api.Control(ctx)
	require.NoError(t, err)
	require.NotNil(t, control)

	_, err = b.api.Get(ctx, admin.TaskRequest{ID: "ghost"})
	requireCode(t, err, admin.CodeNotFound, "unknown task")
	_, err = b.api.Resume(ctx, admin.TaskRequest{ID: id})
	requireCode(t, err, admin.CodeConflict, "resume applies only to")
}
