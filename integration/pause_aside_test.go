package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A paused type's backlog as deployed: each role a process (or a plain
// client) with the shipped permissions on a server of its own. The
// operator pauses type sleep with ax pause; the service submits a backlog
// of it larger than its shard consumer's MaxAckPending of 20 (half with the
// publish-only Go client, half as raw publishes), then echo tasks on the
// same key. The echo tasks run while the pause lasts (the paused tasks
// step aside into AX_DELAYED rather than fill the consumer's ack pending);
// after ax resume the scheduler releases the backlog at once, not at the
// tasks' own wait of a minute, and each runs once; no process meets a
// permission error and the server reports no violation.
func TestDeployedPauseAside(t *testing.T) {
	t.Parallel()
	srv, sched, w, store := startSmallPendingDeployment(t)
	url := srv.ClientURL()
	ctx := context.Background()
	mustAxAs(t, url, "operator", "pause", "sleep")
	require.Eventually(t, func() bool { return strings.Contains(w.output(), "limits_changed") }, 30*time.Second, 50*time.Millisecond)

	serviceConn := connectRole(t, srv, "service")
	service, err := ax.NewClient(ctx, jsOf(t, serviceConn), &ax.Config{PublishOnly: true})
	require.NoError(t, err)
	serviceJS := jsOf(t, serviceConn)
	const paused = 40
	var ids []string
	var goSpecs []ax.TaskSpec
	for i := range paused {
		spec := ax.TaskSpec{Type: "sleep", Key: "k", ID: fmt.Sprintf("held-%d", i), Priority: ax.P2, Payload: []byte(`{"ms":1}`)}
		ids = append(ids, spec.ID)
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

	waitFor := func(id string, ok func(*kv.Record) bool, what string) *kv.Record {
		t.Helper()
		var rec *kv.Record
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			r, _, err := store.Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
			if assert.NoError(c, err) {
				rec = r
				assert.True(c, ok(r))
			}
		}, 60*time.Second, 100*time.Millisecond, "task %s is not %s (last: %+v)", id, what, rec)
		return rec
	}
	succeeded := func(r *kv.Record) bool { return r.State == kv.StateSucceeded }
	for _, s := range free {
		waitFor(s.ID, succeeded, "SUCCEEDED")
	}
	for _, id := range ids {
		waitFor(id, (*kv.Record).WaitsPausedAside, "paused aside")
	}
	require.Contains(t, mustAxAs(t, url, "operator", "task", "trail", ids[0]), worker.ActionPausedAside)
	// ax task get says why a PENDING task waits and what brings it back.
	require.Regexp(t, `State\s+PENDING\nWaiting\s+aside in AX_DELAYED: a READY task whose type or tenant is paused; READY again once the pause ends`,
		mustAxAs(t, url, "operator", "task", "get", ids[0]))

	resumed := time.Now()
	mustAxAs(t, url, "operator", "resume", "sleep")
	for _, id := range ids {
		rec := waitFor(id, succeeded, "SUCCEEDED")
		require.Equal(t, 1, rec.Attempt, "task %s", id)
		require.Zero(t, rec.Lost, "task %s", id)
	}
	took := time.Since(resumed)
	require.Less(t, took, 30*time.Second, "the backlog waited out its own time, not the resume")
	t.Logf("%d paused tasks ran %s after ax resume", paused, took.Round(time.Millisecond))

	stopCleanly(t, srv, map[string]*process{"worker": w, "scheduler": sched})
}
