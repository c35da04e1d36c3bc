package admin_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// tasks.list filters by type, tenant, state and id prefix, newest first,
// without trails, and counts every match beyond the limit.
func TestTasksList(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	for _, task := range []ax.TaskSpec{
		{ID: "a-1", Type: "email", Tenant: "acme"},
		{ID: "a-2", Type: "email", Tenant: "acme"},
		{ID: "b-1", Type: "email", Tenant: "globex"},
		{ID: "b-2", Type: "report", Tenant: "acme"},
	} {
		b.Submit(t, task)
	}
	var paused admin.TaskReply
	require.NoError(t, b.call(t, admin.VerbTaskPause, admin.TaskRequest{ID: "a-1"}, &paused))

	ids := func(req admin.TasksListRequest) ([]string, int) {
		var reply admin.TasksListReply
		require.NoError(t, b.call(t, admin.VerbTasksList, req, &reply))
		var out []string
		for _, rec := range reply.Tasks {
			require.Nil(t, rec.Trail, "list replies carry no trail")
			out = append(out, rec.ID)
		}
		return out, reply.Matched
	}
	for _, tc := range []struct {
		name    string
		req     admin.TasksListRequest
		want    []string
		matched int
	}{
		{"all, most recently updated first", admin.TasksListRequest{}, []string{"a-1", "b-2", "b-1", "a-2"}, 4},
		{"type and tenant", admin.TasksListRequest{Filter: admin.Filter{Type: "email", Tenant: "acme"}}, []string{"a-1", "a-2"}, 2},
		{"state", admin.TasksListRequest{Filter: admin.Filter{States: []kv.State{kv.StatePaused}}}, []string{"a-1"}, 1},
		{"id prefix", admin.TasksListRequest{IDPrefix: "b-"}, []string{"b-2", "b-1"}, 2},
		{"limit", admin.TasksListRequest{Limit: 1}, []string{"a-1"}, 4},
		{"nothing", admin.TasksListRequest{Filter: admin.Filter{Tenant: "initech"}}, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, matched := ids(tc.req)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.matched, matched)
		})
	}
	var reply admin.TasksListReply
	requireCode(t, b.call(t, admin.VerbTasksList, admin.TasksListRequest{Limit: 5000}, &reply), admin.CodeBadRequest, "limit")
	requireCode(t, b.call(t, admin.VerbTasksList, admin.TasksListRequest{Filter: admin.Filter{States: []kv.State{"NOPE"}}}, &reply),
		admin.CodeBadRequest, "unknown state")
}

// control lists the control bucket's keys with their JSON values as stored.
func TestControl(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx := context.Background()
	bucket, err := b.JS.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)
	_, err = bucket.Put(ctx, "cron.nightly", []byte(`{"name":"nightly","spec":"0 3 * * *"}`))
	require.NoError(t, err)
	_, err = bucket.Put(ctx, "pressure", []byte(`not json`))
	require.NoError(t, err)

	var reply admin.ControlReply
	require.NoError(t, b.call(t, admin.VerbControl, struct{}{}, &reply))
	require.Len(t, reply.Entries, 2)
	require.Equal(t, "cron.nightly", reply.Entries[0].Key)
	var job map[string]string
	require.NoError(t, json.Unmarshal(reply.Entries[0].Value, &job))
	require.Equal(t, "0 3 * * *", job["spec"])
	require.Equal(t, "pressure", reply.Entries[1].Key)
	require.JSONEq(t, `"not json"`, string(reply.Entries[1].Value))
}
