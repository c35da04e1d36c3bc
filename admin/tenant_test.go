package admin_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A task id belongs to its tenant. A verb given the tenant acts on that
// tenant's task only; a verb given only an id that tasks of several
// tenants have does not guess (409 naming the tenants); given an id only
// one tenant has, it acts on that one.
func TestVerbsNameTheTenantOfAnID(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx := context.Background()
	for _, tenant := range []string{"acme", "globex"} {
		b.Submit(t, ax.TaskSpec{ID: "same", Tenant: tenant, Type: "email"})
	}
	b.Submit(t, ax.TaskSpec{ID: "only-acme", Tenant: "acme", Type: "email"})

	for _, verb := range []string{admin.VerbTaskGet, admin.VerbTaskTrail, admin.VerbTaskCancel, admin.VerbTaskPause, admin.VerbTaskResume} {
		var reply map[string]any
		requireCode(t, b.call(t, verb, admin.TaskRequest{ID: "same"}, &reply), admin.CodeConflict, "ambiguous: tasks of 2 tenants have it (acme, globex)")
	}
	var reply map[string]any
	requireCode(t, b.call(t, admin.VerbTaskReprioritize, admin.ReprioritizeRequest{ID: "same", Priority: 0}, &reply),
		admin.CodeConflict, `give its "tenant"`)
	requireCode(t, b.call(t, admin.VerbDLQReplay, admin.DLQReplayRequest{ID: "same"}, &reply), admin.CodeConflict, "ambiguous")

	cancelled, err := b.api.Cancel(ctx, admin.TaskRequest{ID: "same", Tenant: "acme"})
	require.NoError(t, err)
	require.Equal(t, kv.Ref{Tenant: "acme", ID: "same"}, cancelled.Task.Ref())
	got, err := b.api.Get(ctx, admin.TaskRequest{ID: "same", Tenant: "globex"})
	require.NoError(t, err)
	require.Equal(t, kv.StateReady, got.Task.State, "a cancel of acme's task left globex's")
	moved, err := b.api.Reprioritize(ctx, admin.ReprioritizeRequest{ID: "same", Tenant: "globex", Priority: 0})
	require.NoError(t, err)
	require.Equal(t, "globex", moved.Task.Tenant)

	only, err := b.api.Get(ctx, admin.TaskRequest{ID: "only-acme"})
	require.NoError(t, err, "an id one tenant has needs no tenant")
	require.Equal(t, "acme", only.Task.Tenant)
	_, err = b.api.Get(ctx, admin.TaskRequest{ID: "only-acme", Tenant: "globex"})
	requireCode(t, err, admin.CodeNotFound, "unknown task")
}

// tasks.cancel with a tenant filter cancels that tenant's tasks only, those
// with a record and those published raw that no worker has seen, and
// leaves another tenant's task with the same id alone (issue 23.2: the
// unseen task's cancel wrote a record by id alone, which then cancelled
// the other tenant's task).
func TestBatchCancelStaysInItsTenant(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx := context.Background()
	for _, raw := range []struct{ subject, id string }{
		{"ax.submit.p1.acme.email.k", "raw-same"}, {"ax.submit.p2.globex.email.k", "raw-same"},
	} {
		msg := nats.NewMsg(raw.subject)
		msg.Header.Set("Nats-Msg-Id", raw.id)
		_, err := b.JS.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
	b.Submit(t, ax.TaskSpec{ID: "rec-same", Tenant: "acme", Type: "email"})
	b.Submit(t, ax.TaskSpec{ID: "rec-same", Tenant: "globex", Type: "email"})

	done, err := b.api.CancelMatching(ctx, admin.BatchCancelRequest{Filter: admin.Filter{Tenant: "acme"}})
	require.NoError(t, err)
	require.Equal(t, []kv.Ref{{Tenant: "acme", ID: "raw-same"}, {Tenant: "acme", ID: "rec-same"}}, done.Tasks)
	require.Equal(t, 2, done.Cancelled)
	for _, id := range []string{"raw-same", "rec-same"} {
		_, err := b.api.Get(ctx, admin.TaskRequest{ID: id, Tenant: "globex"})
		if id == "raw-same" {
			requireCode(t, err, admin.CodeNotFound, "unknown task") // still unseen: no record was written for it
			continue
		}
		require.NoError(t, err)
	}
	got, err := b.api.Get(ctx, admin.TaskRequest{ID: "rec-same", Tenant: "globex"})
	require.NoError(t, err)
	require.Equal(t, kv.StateReady, got.Task.State)
	require.Equal(t, uint64(2), streamMsgs(t, b, "AX_P2"), "globex's raw message and its recorded one wait")
}

func streamMsgs(t *testing.T, b *adminBundle, name string) uint64 {
	t.Helper()
	s, err := b.JS.Stream(context.Background(), name)
	require.NoError(t, err)
	info, err := s.Info(context.Background())
	require.NoError(t, err)
	return info.State.Msgs
}
