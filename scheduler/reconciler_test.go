package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reconcileCfg makes the reconciler judge quickly: a record is judged after
// 300ms without a move.
var reconcileCfg = scheduler.Config{AckWait: time.Second, SweepInterval: 50 * time.Millisecond, ReconcileGrace: 300 * time.Millisecond,
	ReconcileRecheck: time.Second}

// repairBound is how long a lost task may stay unrepaired in these tests:
// the grace, a few passes, and room for a slow machine.
const repairBound = 15 * time.Second

type reconcileBundle struct{ *axtest.Bundle }

func setupReconcile(t *testing.T) *reconcileBundle {
	t.Helper()
	b := &reconcileBundle{axtest.Setup(t, axtest.Options{})}
	waitLeader(t, startContender(t, b.Bundle, reconcileCfg))
	return b
}

// deleteMsg deletes a stored message by hand, as an operator or a lost
// race would.
func (b *reconcileBundle) deleteMsg(t *testing.T, stream string, seq uint64) {
	t.Helper()
	s, err := b.JS.Stream(context.Background(), stream)
	require.NoError(t, err)
	require.NoError(t, s.DeleteMsg(context.Background(), seq))
}

// waitRepaired waits for the reconciler to move a task to state and returns
// its record.
func (b *reconcileBundle) waitRepaired(t *testing.T, id string, state kv.State) *kv.Record {
	t.Helper()
	return axtest.WaitRecord(t, axtest.StoreRead(b.Store), id, repairBound, fmt.Sprintf("moved to %s by the reconciler", state),
		func(r *kv.Record) bool { return r.State == state && r.LastMove().Action == "reconcile" })
}

// A READY task whose message was deleted from its bucket, with no payload
// left anywhere, ends DEAD with the reason; a healthy READY task next to
// it is never touched.
func TestReconcilerBuriesLostReadyTask(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	lost, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "lost", Type: "x", Priority: ax.P2})
	require.NoError(t, err)
	healthy, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "healthy", Type: "x", Priority: ax.P2})
	require.NoError(t, err)
	_, healthyRev, err := b.Store.Get(ctx, kv.Ref{Tenant: healthy.Tenant, ID: healthy.ID})
	require.NoError(t, err)
	b.deleteMsg(t, "AX_P2", lost.Sequence)

	rec := b.waitRepaired(t, "lost", kv.StateDead)
	require.Contains(t, rec.LastError, "message lost: its message AX_P2 #")
	require.Contains(t, rec.LastError, "no longer stored")
	require.NotNil(t, rec.FinishedAt)

	time.Sleep(time.Second) // several more passes past the grace
	rec, rev, err := b.Store.Get(ctx, kv.Ref{Tenant: healthy.Tenant, ID: healthy.ID})
	require.NoError(t, err)
	require.Equal(t, healthyRev, rev, "a healthy READY task is never touched")
	require.Equal(t, kv.StateReady, rec.State)

	// The report counts it, and ax stats (the dashboard's source) shows it.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r := reconcilerReport(c, b.JS)
		assert.True(c, r != nil && r.Dead[kv.StateReady] == 1 && r.Repairs() == 1 && r.Checked > 0)
	}, repairBound, 20*time.Millisecond)
	var stats admin.StatsReply
	require.NoError(t, b.StartAdmin(t, nil).Call(ctx, admin.VerbStats, admin.StatsRequest{}, &stats))
	require.NotNil(t, stats.Reconciler)
	require.Equal(t, uint64(1), stats.Reconciler.Dead[kv.StateReady])
	require.Len(t, stats.Reconciler.Recent, 1)
	require.Equal(t, "lost", stats.Reconciler.Recent[0].TaskID)
}

func reconcilerReport(t natstest.TB, js jetstream.JetStream) *control.ReconcilerReport {
	t.Helper()
	board, err := js.KeyValue(context.Background(), "AX_CONTROL")
	require.NoError(t, err)
	entry, err := board.Get(context.Background(), control.ReconcilerKey)
	if err != nil {
		return nil
	}
	var r control.ReconcilerReport
	require.NoError(t, json.Unmarshal(entry.Value(), &r))
	return &r
}

// A PENDING task whose schedule was purged from AX_DELAYED ends DEAD.
func TestReconcilerBuriesPendingWithoutSchedule(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	_, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "later", Type: "x", Delay: time.Hour})
	require.NoError(t, err)
	delayed, err := b.JS.Stream(ctx, "AX_DELAYED")
	require.NoError(t, err)
	require.NoError(t, delayed.Purge(ctx, jetstream.WithPurgeSubject("ax.delayed.default.later")))

	rec := b.waitRepaired(t, "later", kv.StateDead)
	require.Contains(t, rec.LastError, "message lost: PENDING with no schedule in AX_DELAYED")
}

// A READY task whose message is gone but whose dead letter still holds
// its payload is re-published: a new message with the next generation, a
// Nats-Msg-Id of its own, and the record pointing at it.
func TestReconcilerRepublishesFromDeadLetter(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	letter := nats.NewMsg("ax.dlq.t.x")
	letter.Data = []byte("payload")
	letter.Header.Set(streams.HeaderTaskID, "replayed")
	letter.Header.Set(streams.HeaderError, "boom")
	dl, err := b.JS.PublishMsg(ctx, letter)
	require.NoError(t, err)
	_, _, err = b.Store.Create(ctx, bound(&kv.Record{ID: "replayed", Type: "x", Tenant: "t", Key: "replayed", Priority: 1, State: kv.StateReady,
		DLQSeq: dl.Sequence}, 3, "AX_P1", 999), kv.Actor{Action: "replay"})
	require.NoError(t, err)

	rec := b.waitRepaired(t, "replayed", kv.StateReady)
	require.Equal(t, uint64(4), rec.Gen)
	require.Equal(t, "AX_P1", rec.Stream)
	require.Contains(t, rec.LastMove().Error, "message lost: its message AX_P1 #999 is no longer stored; re-published from its dead letter AX_DLQ #")
	msg := natstest.GetMsg(t, b.JS, "AX_P1", rec.StreamSeq)
	require.Equal(t, "payload", string(msg.Data))
	require.Equal(t, "replayed", msg.Header.Get(streams.HeaderTaskID))
	require.Equal(t, "4", msg.Header.Get(streams.HeaderGen))
	require.Regexp(t, `^replayed:g4:.+`, msg.Header.Get(streams.HeaderMsgID), "a fresh Nats-Msg-Id, never an earlier copy's")
	require.Empty(t, msg.Header.Get(streams.HeaderError), "dead-letter headers are not carried")
}

// A RETRYING task whose message was deleted while an older copy of it
// still waits in a bucket is re-published from that copy (READY).
func TestReconcilerRepublishesRetryFromStaleCopy(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	info, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "retry", Type: "x", Priority: ax.P3, Payload: []byte("p")})
	require.NoError(t, err)
	_, _, err = b.Store.Transition(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: "retry"}, kv.StateReady, kv.StateRunning, kv.Actor{Worker: "w"}, func(r *kv.Record) error {
		r.Worker = "w"
		r.Bind(2, r.Stream, info.Sequence+50) // its generation-2 message, since deleted
		return nil
	})
	require.NoError(t, err)
	_, _, err = b.Store.Transition(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: "retry"}, kv.StateRunning, kv.StateRetrying, kv.Actor{Worker: "w", Error: "failed"}, nil)
	require.NoError(t, err)

	rec := b.waitRepaired(t, "retry", kv.StateReady)
	require.Equal(t, uint64(3), rec.Gen)
	require.Contains(t, rec.LastMove().Error, "re-published from its stale copy AX_P3 #")
	require.Equal(t, "p", string(natstest.GetMsg(t, b.JS, rec.Stream, rec.StreamSeq).Data))
}

// A RUNNING task whose worker is gone and whose message left its bucket
// ends DEAD (outcome unknown); one whose message is still there, and one
// updated recently, are left alone.
func TestReconcilerBuriesStuckRunningTask(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	running := func(id string, seq uint64) {
		_, _, err := b.Store.Create(ctx, bound(&kv.Record{ID: id, Type: "x", Tenant: "t", Key: id, State: kv.StateRunning, Worker: "w-gone"}, 1, "", seq), kv.Actor{Worker: "w-gone"})
		require.NoError(t, err)
	}
	ack, err := b.JS.Publish(ctx, "ax.submit.p0.t.x.kept", nil)
	require.NoError(t, err)
	running("gone", ack.Sequence+100) // its message was acked and is gone
	running("kept", ack.Sequence)     // its message will be redelivered
	rec := b.waitRepaired(t, "gone", kv.StateDead)
	require.Contains(t, rec.LastError, "message lost: worker w-gone gone since")
	running("fresh", ack.Sequence+200) // not yet past the ack wait
	time.Sleep(500 * time.Millisecond) // several passes
	for _, id := range []string{"kept", "fresh"} {
		rec, _, err := b.Store.Get(ctx, kv.Ref{Tenant: "t", ID: id})
		require.NoError(t, err)
		require.Equal(t, kv.StateRunning, rec.State, id)
	}
}

// Aged tasks move between buckets (a copy in the next bucket up, the old
// message deleted): the reconciler follows the record and touches none.
// This found an aging defect: a copy kept the Nats-Sequence header of the
// direct get that read its source, so a later read of the copy reported
// the old bucket's sequence and aging deleted another task's message (up
// to 27 of 50 tasks lost per run before the fix).
func TestReconcilerLeavesAgedTasksAlone(t *testing.T) {
	t.Parallel()
	cfg := reconcileCfg
	cfg.AgingThreshold = 200 * time.Millisecond
	lb := setupLoops(t, 1, nil, cfg)
	ctx := context.Background()
	tasks := make([]ax.TaskSpec, 50)
	for i := range tasks {
		tasks[i] = ax.TaskSpec{Type: "x", Priority: ax.P4}
	}
	infos, err := lb.Client.SubmitBatch(ctx, tasks)
	require.NoError(t, err)
	store := lb.Client.Store()
	require.Eventually(t, func() bool {
		for _, info := range infos {
			rec, _, err := store.Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
			if err != nil || rec.Priority != 0 || rec.State != kv.StateReady {
				return false
			}
		}
		return true
	}, repairBound, 50*time.Millisecond, "every task aged to P0, none lost")
	time.Sleep(time.Second) // passes past the grace
	for _, info := range infos {
		rec, _, err := store.Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
		require.NoError(t, err)
		require.Equal(t, kv.StateReady, rec.State, "%s: %s", info.ID, rec.LastMove().Error)
		require.NotEqual(t, "reconcile", rec.LastMove().Action)
		msg := natstest.GetMsg(t, lb.JS, "AX_P0", rec.StreamSeq)
		require.Equal(t, info.ID, msg.Header.Get(streams.HeaderTaskID))
		require.Equal(t, rec.StreamSeq, msg.Sequence, "no stale Nats-Sequence stored with the copy")
	}
}

// Issue 11.1's shape: a READY record with no message in its bucket while
// its payload still waits as a schedule in AX_DELAYED (a resume that
// believed the message was in the bucket). The reconciler re-publishes
// the schedule's payload, released (no deferring again).
func TestReconcilerRepublishesFromSchedule(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	names := streams.DefaultNames()
	submit := nats.NewMsg(names.SubmitSubject(2, "t", "x", "sched"))
	submit.Data = []byte("later")
	streams.Options{ID: "sched", RunAt: time.Now().Add(-time.Second), Gen: 1}.SetHeaders(submit.Header)
	sched, err := b.JS.PublishMsg(ctx, names.DelayedMsg("t", "sched", submit, time.Now().Add(time.Hour)))
	require.NoError(t, err)
	_, _, err = b.Store.Create(ctx, bound(&kv.Record{ID: "sched", Type: "x", Tenant: "t", Key: "sched", Priority: 2, State: kv.StateReady}, 1, "", 0),
		kv.Actor{Action: "resume"})
	require.NoError(t, err)

	rec := b.waitRepaired(t, "sched", kv.StateReady)
	require.Equal(t, uint64(2), rec.Gen)
	require.Contains(t, rec.LastMove().Error, "message lost: no message of the task is stored")
	require.Contains(t, rec.LastMove().Error, fmt.Sprintf("re-published from its schedule AX_DELAYED #%d", sched.Sequence))
	msg := natstest.GetMsg(t, b.JS, "AX_P2", rec.StreamSeq)
	require.Equal(t, "later", string(msg.Data))
	require.NotEmpty(t, msg.Header.Get(streams.HeaderReleasedAt), "released: a worker runs it without deferring")
	require.Empty(t, msg.Header.Get(streams.HeaderSchedule))
}

// The same with a run time still ahead: the task goes back to PENDING, and
// the mover releases it when its schedule fires (it would drop a fired
// schedule whose record is READY, losing the task).
func TestReconcilerReschedulesFutureSchedule(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	names := streams.DefaultNames()
	runAt := time.Now().Add(3 * time.Second)
	submit := nats.NewMsg(names.SubmitSubject(2, "t", "x", "later"))
	submit.Data = []byte("later")
	streams.Options{ID: "later", RunAt: runAt, Gen: 1}.SetHeaders(submit.Header)
	_, err := b.JS.PublishMsg(ctx, names.DelayedMsg("t", "later", submit, runAt.Add(-streams.DefaultScheduleEarly)))
	require.NoError(t, err)
	_, _, err = b.Store.Create(ctx, bound(&kv.Record{ID: "later", Type: "x", Tenant: "t", Key: "later", Priority: 2, State: kv.StateReady}, 1, "", 0),
		kv.Actor{Action: "resume"})
	require.NoError(t, err)

	rec := b.waitRepaired(t, "later", kv.StatePending)
	require.Contains(t, rec.LastMove().Error, "PENDING again")
	require.Eventually(t, func() bool { // released by the mover at its time
		rec, _, err := b.Store.Get(ctx, kv.Ref{Tenant: "t", ID: "later"})
		return err == nil && rec.State == kv.StateReady && rec.StreamSeq != 0
	}, repairBound, 20*time.Millisecond)
	rec, _, err = b.Store.Get(ctx, kv.Ref{Tenant: "t", ID: "later"})
	require.NoError(t, err)
	require.Equal(t, "later", string(natstest.GetMsg(t, b.JS, "AX_P2", rec.StreamSeq).Data))
	require.False(t, time.Now().Before(runAt), "not released before its run time")
}

// bound returns r bound to message seq of stream at generation gen.
func bound(r *kv.Record, gen uint64, stream string, seq uint64) *kv.Record {
	r.Bind(gen, stream, seq)
	return r
}
