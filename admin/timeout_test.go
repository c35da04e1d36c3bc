package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// A move written before moves recorded timeouts as data carries only the
// error text of worker.ErrTimeout: stats still count it as timed out.
func TestAdminStatsCountLegacyTimeouts(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx := context.Background()
	store := b.client.Store()
	id := b.submit(t, ax.TaskSpec{Type: "legacy"})
	rec, rev, err := store.Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
	require.NoError(t, err)
	started := time.Now()
	rec, rev, err = store.Apply(ctx, rec, rev, kv.StateRunning, kv.Actor{Worker: "w", Action: "claim"}, func(r *kv.Record) error {
		r.Attempt, r.StartedAt = 1, &started
		return nil
	})
	require.NoError(t, err)
	old := kv.Actor{Worker: "w", Action: "dead", Error: worker.ErrTimeout.Error() + " after 10s: context deadline exceeded"}
	_, _, err = store.Apply(ctx, rec, rev, kv.StateDead, old, func(r *kv.Record) error {
		finished := started.Add(time.Second)
		r.FinishedAt = &finished
		return nil
	})
	require.NoError(t, err)

	stats, err := b.api.Stats(ctx, admin.StatsRequest{Window: "1m"})
	require.NoError(t, err)
	require.Len(t, stats.Types, 1)
	require.Equal(t, 1, stats.Types[0].TimedOut)
}
