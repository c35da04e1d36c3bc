package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/stretchr/testify/require"
)

// A task record that does not decode is reported by every scan of the
// management API (tasks.list, tasks.cancel, stats), not skipped silently.
func TestAdminReportsUnreadableRecords(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	good := b.Submit(t, ax.TaskSpec{ID: "good", Type: "email"}) // recorded at submit
	tasks, err := b.JS.KeyValue(ctx, "AX_TASKS")
	require.NoError(t, err)
	_, err = tasks.Put(ctx, "garbled", []byte("{not json"))
	require.NoError(t, err)

	list, err := b.api.List(ctx, admin.TasksListRequest{})
	require.NoError(t, err)
	require.Equal(t, 1, list.Matched)
	require.Equal(t, good, list.Tasks[0].ID)
	requireUnreadable(t, list.Unreadable)

	dry, err := b.api.CancelMatching(ctx, admin.BatchCancelRequest{Filter: admin.Filter{Type: "email"}, DryRun: true})
	require.NoError(t, err)
	require.Len(t, dry.Tasks, 1)
	require.Equal(t, good, dry.Tasks[0].ID)
	requireUnreadable(t, dry.Unreadable)

	stats, err := b.api.Stats(ctx, admin.StatsRequest{})
	require.NoError(t, err)
	require.Equal(t, 1, stats.Records)
	requireUnreadable(t, stats.Unreadable)

	require.NoError(t, tasks.Purge(ctx, "garbled"))
	list, err = b.api.List(ctx, admin.TasksListRequest{})
	require.NoError(t, err)
	require.Nil(t, list.Unreadable, "none once the record is gone")
}

func requireUnreadable(t *testing.T, u *admin.Unreadable) {
	t.Helper()
	require.NotNil(t, u)
	require.Equal(t, 1, u.Count)
	require.Contains(t, u.Errors["garbled"], "does not decode")
}
