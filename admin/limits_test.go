package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// Limits and pauses set through the management API land in AX_CONTROL's
// limits key, where workers read them; limit.ls and stats show them with
// their use; limit.rm and resume take them away.
func TestAdminLimitsAndPauses(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx := context.Background()
	_, err := b.api.SetLimit(ctx, "email", kv.Limit{Concurrency: 10})
	require.NoError(t, err)
	_, err = b.api.SetLimit(ctx, "tenant:acme", kv.Limit{Rate: 100, Burst: 20})
	require.NoError(t, err)
	_, err = b.api.SetLimit(ctx, "key:order-*", kv.Limit{Concurrency: 2, Rate: 5})
	require.NoError(t, err)
	_, err = b.api.SetLimit(ctx, "a.b", kv.Limit{Concurrency: 1})
	requireCode(t, err, admin.CodeBadRequest, "bad limit target")
	_, err = b.api.SetLimit(ctx, "key:order-*", kv.Limit{Concurrency: 1, Weight: 2})
	requireCode(t, err, admin.CodeBadRequest, "not of a key pattern")
	_, err = b.api.SetLimit(ctx, "tenant:acme", kv.Limit{Weight: kv.MaxWeight + 1})
	requireCode(t, err, admin.CodeBadRequest, "weight 1001")
	_, err = b.api.SetLimit(ctx, "tenant:initech", kv.Limit{Weight: 3})
	require.NoError(t, err)
	_, err = b.api.PauseTasksOf(ctx, admin.PauseRequest{Type: "report"})
	require.NoError(t, err)
	reply, err := b.api.PauseTasksOf(ctx, admin.PauseRequest{Tenant: "globex"})
	require.NoError(t, err)
	require.Len(t, reply.Limits, 4)
	require.Equal(t, []string{"report", "tenant:globex"}, []string{reply.Paused[0].Target, reply.Paused[1].Target})

	use, err := kv.NewLimitUse(ctx, b.JS, streams.Names{})
	require.NoError(t, err)
	ok, err := use.Acquire(ctx, "email", 10, "w/1", 60e9)
	require.NoError(t, err)
	require.True(t, ok)
	control, err := b.JS.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)
	stored, _, err := kv.ReadLimits(ctx, control)
	require.NoError(t, err)
	require.Equal(t, kv.Limit{Concurrency: 10}, stored.Limits["email"])
	require.Equal(t, kv.Limit{Rate: 100, Burst: 20}, stored.Limits["tenant:acme"])
	require.Equal(t, kv.Limit{Weight: 3}, stored.Limits["tenant:initech"])
	require.Contains(t, stored.Paused, "report")

	list, err := b.api.Limits(ctx)
	require.NoError(t, err)
	require.Equal(t, "email", list.Limits[0].Target)
	require.Equal(t, 1, list.Limits[0].InUse)
	require.Equal(t, "key:order-*", list.Limits[1].Target)
	require.Equal(t, "tenant:acme", list.Limits[2].Target)
	require.InDelta(t, 20, list.Limits[2].Tokens, 0.001)
	require.Equal(t, "tenant:initech", list.Limits[3].Target)
	require.Equal(t, 3, list.Limits[3].Weight)
	require.Nil(t, list.Limits[0].Waiting, "limit.ls does not scan the records")
	b.Submit(t, ax.TaskSpec{Type: "email", Tenant: "acme", Key: "order-1"})
	b.Submit(t, ax.TaskSpec{Type: "report", Tenant: "initech", Key: "r"})
	// A task a worker stepped aside for a limit waits for it, PENDING; a
	// delayed one waits for its own time.
	aside := b.Submit(t, ax.TaskSpec{Type: "email", Tenant: "umbrella", Key: "x"})
	store := b.Client.Store()
	rec, rev, err := store.Get(ctx, kv.Ref{Tenant: "umbrella", ID: aside})
	require.NoError(t, err)
	_, _, err = store.Apply(ctx, rec, rev, kv.StatePending, kv.Actor{Worker: "w", Action: kv.ActionSteppedAside}, func(r *kv.Record) error {
		at := time.Now().Add(time.Minute)
		r.RunAt = &at
		return nil
	})
	require.NoError(t, err)
	b.Submit(t, ax.TaskSpec{Type: "email", Tenant: "umbrella", Key: "y", Delay: time.Hour})
	var stats admin.StatsReply
	require.NoError(t, b.call(t, admin.VerbStats, admin.StatsRequest{}, &stats))
	require.NotNil(t, stats.Limits)
	require.Len(t, stats.Limits.Limits, 4)
	require.Len(t, stats.Limits.Paused, 2)
	waiting := map[string]int{}
	for _, l := range stats.Limits.Limits {
		waiting[l.Target] = *l.Waiting
	}
	for _, p := range stats.Limits.Paused {
		waiting[p.Target] = *p.Waiting
	}
	require.Equal(t, map[string]int{"email": 2, "key:order-*": 1, "tenant:acme": 1, "tenant:initech": 1, "report": 1, "tenant:globex": 0}, waiting)

	_, err = b.api.RemoveLimit(ctx, "email")
	require.NoError(t, err)
	reply, err = b.api.ResumeTasksOf(ctx, admin.PauseRequest{Type: "report"})
	require.NoError(t, err)
	require.Len(t, reply.Limits, 3)
	require.Len(t, reply.Paused, 1)
}
