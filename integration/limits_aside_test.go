package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Stepping aside as deployed: each role a process (or a plain client) with
// the shipped permissions on a server of its own. The service submits a
// limited backlog larger than its shard consumer's parking room (half of
// its MaxAckPending of 20), half with the publish-only Go client and half as
// raw publishes, then unlimited tasks on the same key; the operator limits
// the type with ax limit set. The worker steps the backlog aside into
// AX_DELAYED (its schedules and record moves allowed to it), the scheduler
// releases it, and every task runs exactly once (one attempt, one claim in
// its trail), the limited ones one at a time; the unlimited ones are not
// held behind the backlog; the operator reads stepped_aside in a trail; no
// process meets a permission error and the server reports no violation.
//
// ax provision has no flag for the consumers' MaxAckPending (2,000 by
// default, a parking room of 1,000 per consumer): the deployment is
// provisioned with the Go API as the scheduler role instead.
func TestDeployedStepAside(t *testing.T) {
	t.Parallel()
	srv, sched, w, store := startSmallPendingDeployment(t)
	url := srv.ClientURL()
	ctx := context.Background()
	mustAxAs(t, url, "operator", "limit", "set", "sleep", "--concurrency", "1")
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "limits_changed") }, 30*time.Second, 50*time.Millisecond)

	serviceConn := connectRole(t, srv, "service")
	service, err := ax.NewClient(ctx, jsOf(t, serviceConn), &ax.Config{PublishOnly: true})
	require.NoError(t, err)
	serviceJS := jsOf(t, serviceConn)
	const limited = 60
	var limitedIDs, goSpecs []ax.TaskSpec
	for i := range limited {
		spec := ax.TaskSpec{Type: "sleep", Key: "k", ID: fmt.Sprintf("aside-%d", i), Priority: ax.P2, Payload: []byte(`{"ms":50}`)}
		limitedIDs = append(limitedIDs, spec)
		if i%2 == 1 {
			goSpecs = append(goSpecs, spec)
			continue
		}
		msg := nats.NewMsg(streams.Names{}.SubmitSubject(2, ax.DefaultTenant, "sleep", "k"))
		msg.Data = spec.Payload
		msg.Header.Set(streams.HeaderMsgID, spec.ID)
		_, err := serviceJS.PublishMsg(ctx, msg)
		require.NoError(t, err)
	}
	_, err = service.SubmitBatch(ctx, goSpecs)
	require.NoError(t, err)
	var free []ax.TaskSpec
	for i := range 10 {
		free = append(free, ax.TaskSpec{Type: "echo", Key: "k", ID: fmt.Sprintf("free-%d", i), Priority: ax.P2})
	}
	_, err = service.SubmitBatch(ctx, free)
	require.NoError(t, err)

	succeeded := func(id string) *kv.Record {
		t.Helper()
		var rec *kv.Record
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			r, _, err := store.Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
			if assert.NoError(c, err) {
				rec = r
				assert.Equal(c, kv.StateSucceeded, r.State)
			}
		}, 90*time.Second, 100*time.Millisecond, "task %s did not succeed (last: %+v)", id, rec)
		return rec
	}
	for _, s := range free {
		succeeded(s.ID)
	}
	ranBefore := 0
	for _, s := range limitedIDs {
		if rec, _, err := store.Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: s.ID}); err == nil && rec.State == kv.StateSucceeded {
			ranBefore++
		}
	}
	require.LessOrEqual(t, ranBefore, 20, "the unlimited tasks waited behind the limited backlog")

	var starts []time.Time
	var aside []string
	asideBy := map[bool]int{} // by the publish-only Go client; raw
	for i, s := range limitedIDs {
		rec := succeeded(s.ID)
		claims := 0
		for _, m := range rec.Trail {
			if m.To == kv.StateRunning {
				claims++
			}
		}
		require.Equal(t, 1, rec.Attempt, "task %s", s.ID)
		require.Zero(t, rec.Lost, "task %s", s.ID)
		require.Equal(t, 1, claims, "task %s was claimed more than once", s.ID)
		starts = append(starts, *rec.StartedAt)
		if slices.ContainsFunc(rec.Trail, func(m kv.Move) bool { return m.Action == worker.ActionSteppedAside }) {
			aside = append(aside, s.ID)
			asideBy[i%2 == 1]++
		}
	}
	t.Logf("limited tasks run before the last unlimited one ended: %d of %d; stepped aside: %d", ranBefore, limited, len(aside))
	// One at a time: a task is claimed (StartedAt) once the slot is
	// passed on, after the handler before it slept its 50 ms (its outcome
	// is written after: FinishedAt may follow the next claim).
	slices.SortFunc(starts, time.Time.Compare)
	for i := 1; i < len(starts); i++ {
		require.GreaterOrEqual(t, starts[i].Sub(starts[i-1]), 50*time.Millisecond, "two limited tasks ran at once")
	}
	require.Positive(t, asideBy[true], "no task of the publish-only client stepped aside")
	require.Positive(t, asideBy[false], "no raw publish stepped aside")
	require.Contains(t, mustAxAs(t, url, "operator", "task", "trail", aside[0]), worker.ActionSteppedAside)

	stopCleanly(t, srv, map[string]*process{"worker": w, "scheduler": sched})
}

// startSmallPendingDeployment starts a server with the shipped
// permissions, provisioned (as the scheduler role, with the Go API) with
// shard consumers of MaxAckPending 20, and ax scheduler and one ax worker
// of 8 slots as processes of their roles; it returns them once the
// scheduler campaigns and the worker joined, with a store of the records
// read as the scheduler.
func startSmallPendingDeployment(t *testing.T) (*roleServer, *process, *process, *kv.Store) {
	t.Helper()
	srv := startRoleServer(t, permissionsFile)
	url := srv.ClientURL()
	schedJS := jsOf(t, connectRole(t, srv, "scheduler"))
	natstest.Provision(t, schedJS, &streams.Config{MaxAckPending: 20})
	store, err := kv.NewStore(context.Background(), schedJS, nil)
	require.NoError(t, err)
	sched := startAxAs(t, url, "scheduler", "scheduler")
	w := startAxAs(t, url, "worker-1", "worker", "--id", "worker-1", "--concurrency", "8")
	require.Eventually(t, func() bool { return strings.Contains(sched.output(), "campaigning") || sched.exited() },
		30*time.Second, 50*time.Millisecond, "ax scheduler did not start:\n%s", sched.output())
	require.False(t, sched.exited(), "ax scheduler exited:\n%s", sched.output())
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "joining the mesh") || w.exited() },
		30*time.Second, 50*time.Millisecond, "ax worker did not join:\n%s", w.output())
	require.False(t, w.exited(), "ax worker exited:\n%s", w.output())
	return srv, sched, w, store
}
