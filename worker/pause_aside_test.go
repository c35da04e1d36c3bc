package worker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// pauseBacklog pauses type "report", then submits n tasks of it on one
// partition key (every second one a raw publish), and returns their ids.
func pauseBacklog(t *testing.T, b *testBundle, n int) []string {
	t.Helper()
	ctx := context.Background()
	setLimits(t, b.JS, kv.Limits{Paused: map[string]kv.Pause{"report": {At: time.Now()}}})
	time.Sleep(200 * time.Millisecond) // the watch delivers the change
	var ids []string
	for i := range n {
		id := fmt.Sprintf("report-%d", i)
		ids = append(ids, id)
		if i%2 == 0 {
			msg := nats.NewMsg("ax.submit.p2.default.report.k")
			msg.Header.Set("Nats-Msg-Id", id)
			_, err := b.JS.PublishMsg(ctx, msg)
			require.NoError(t, err)
			continue
		}
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "report", Key: "k", ID: id, Priority: ax.P2})
		require.NoError(t, err)
	}
	return ids
}

// pausedAside reports whether rec's trail shows it moved aside for a pause.
func pausedAside(rec *kv.Record) bool {
	return slices.ContainsFunc(rec.Trail, func(m kv.Move) bool { return m.Action == worker.ActionPausedAside })
}

// A paused type's backlog larger than its shard consumer's MaxAckPending
// does not hold back the other tasks of its shard: its tasks step aside
// into AX_DELAYED while the pause lasts, and run once, soon after the
// resume (the leader releases them; their own wait is a minute or more).
// Without the step aside, the paused tasks' naked messages fill the
// consumer's ack pending and the other type's tasks are never delivered.
func TestPausedBacklogLeavesItsShardFree(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var reports, emails gauge
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(0), nil))
	require.NoError(t, reg.Handle("email", emails.handler(0), nil))
	holds := &holdCounter{}
	w, _ := b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8, Observer: holds})

	ids := pauseBacklog(t, b, 60)
	for i := range 10 {
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "email", Key: "k", ID: fmt.Sprintf("email-%d", i), Priority: ax.P2})
		require.NoError(t, err)
	}
	for i := range 10 {
		b.WaitState(t, fmt.Sprintf("email-%d", i), kv.StateSucceeded)
	}
	require.Zero(t, reports.executions.Load(), "a paused task ran")
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if rec, err := axtest.Record(ctx, b.Store, id); err != nil || !rec.WaitsSteppedAside() || !rec.WaitsPausedAside() {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the paused backlog did not all step aside")
	require.Zero(t, reports.executions.Load(), "a paused task ran")
	require.Positive(t, w.Stats().SteppedAside)
	require.Zero(t, holds.count(worker.HeldSteppedAside), "a pause is not a limit")

	resumed := time.Now()
	setLimits(t, b.JS, kv.Limits{})
	for _, id := range ids {
		rec := b.WaitState(t, id, kv.StateSucceeded)
		require.Equal(t, 1, rec.Attempt)
		require.True(t, pausedAside(rec))
	}
	took := time.Since(resumed)
	require.Equal(t, int64(60), reports.executions.Load())
	require.Less(t, took, 20*time.Second, "the paused tasks waited out their own time, not the resume")
	t.Logf("60 paused tasks ran %s after the resume", took.Round(time.Millisecond))
}

// A pause that ends while no leader runs: the next leader releases what
// was paused aside at its election, not at the tasks' own time.
func TestPausedAsideReleasedByTheNextLeader(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	leader := b.StartLeader(t, scheduler.Config{})
	var reports gauge
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(0), nil))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})

	ids := pauseBacklog(t, b, 30)
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if rec, err := axtest.Record(context.Background(), b.Store, id); err != nil || !rec.WaitsPausedAside() {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the paused backlog did not all step aside")
	leader.StopRun()
	setLimits(t, b.JS, kv.Limits{})
	time.Sleep(3 * time.Second) // past the settle a running leader would have waited
	require.Zero(t, reports.executions.Load(), "released with no leader")

	resumed := time.Now()
	b.StartLeader(t, scheduler.Config{})
	for _, id := range ids {
		require.Equal(t, 1, b.WaitState(t, id, kv.StateSucceeded).Attempt)
	}
	require.Equal(t, int64(30), reports.executions.Load())
	require.Less(t, time.Since(resumed), 20*time.Second)
}

// A task paused aside keeps its place among the operator's verbs: cancel
// ends it, and a task-level pause and resume leave it waiting for its
// type's resume.
func TestOperatorVerbsOnPausedAsideTasks(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	var reports gauge
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("report", reports.handler(0), nil))
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8})
	ids := pauseBacklog(t, b, 24)
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if rec, err := axtest.Record(context.Background(), b.Store, id); err != nil || !rec.WaitsPausedAside() {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond)
	ctx := context.Background()
	api := b.StartAdmin(t, nil)
	cancelled := ids[0]
	_, err := api.Cancel(ctx, admin.TaskRequest{ID: cancelled})
	require.NoError(t, err)
	held := ids[1]
	_, err = api.Pause(ctx, admin.TaskRequest{ID: held})
	require.NoError(t, err)
	_, err = api.Resume(ctx, admin.TaskRequest{ID: held})
	require.NoError(t, err)
	rec, err := axtest.Record(context.Background(), b.Store, held)
	require.NoError(t, err)
	require.True(t, rec.WaitsPausedAside(), "a task's own pause and resume ended its type's: %+v", rec.Trail)

	setLimits(t, b.JS, kv.Limits{})
	for _, id := range ids[1:] {
		require.Equal(t, 1, b.WaitState(t, id, kv.StateSucceeded).Attempt)
	}
	require.Equal(t, kv.StateCancelled, b.WaitState(t, cancelled, kv.StateCancelled).State)
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, int64(len(ids)-1), reports.executions.Load())
}
