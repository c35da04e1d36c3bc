package admin_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// On a fair deployment stats lists each tenant's queue of each bucket with
// tasks, the most waiting first; elsewhere it lists none.
func TestStatsListTenantQueues(t *testing.T) {
	t.Parallel()
	fair := setupAdminWith(t, axtest.Options{Streams: &streams.Config{Layout: streams.LayoutFair, Tenants: []string{"acme", "globex", "idle"}}})
	ctx, client := context.Background(), fair.Client
	submit := func(tenant string, p ax.Priority, n int) {
		specs := make([]ax.TaskSpec, n)
		for i := range specs {
			specs[i] = ax.TaskSpec{Type: "job", Tenant: tenant, Priority: p}
		}
		_, err := client.SubmitBatch(ctx, specs)
		require.NoError(t, err)
	}
	submit("acme", ax.P2, 3)
	submit("globex", ax.P2, 7)
	submit("acme", ax.P0, 1)
	var reply admin.StatsReply
	require.NoError(t, fair.call(t, "stats", admin.StatsRequest{}, &reply))
	require.Equal(t, []admin.TenantQueue{
		{Tenant: "acme", Priority: 0, Waiting: 1},
		{Tenant: "globex", Priority: 2, Waiting: 7},
		{Tenant: "acme", Priority: 2, Waiting: 3},
	}, reply.Tenants)

	b := setupAdmin(t) // not fair
	b.Submit(t, ax.TaskSpec{Type: "job", Tenant: "acme"})
	reply = admin.StatsReply{}
	require.NoError(t, b.call(t, "stats", admin.StatsRequest{}, &reply))
	require.Nil(t, reply.Tenants)
}
