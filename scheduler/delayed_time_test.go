package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// pendingUntil requires that task ref stays PENDING until at (less a
// little for clocks), polling its record; it returns at at.
func pendingUntil(t *testing.T, store *kv.Store, ref kv.Ref, at time.Time) {
	t.Helper()
	for time.Now().Before(at.Add(-100 * time.Millisecond)) {
		rec, _, err := store.Get(context.Background(), ref)
		require.NoError(t, err)
		require.Equal(t, kv.StatePending, rec.State, "%s is %s %s before its run time (last move: %+v)",
			ref, rec.State, time.Until(at).Round(time.Millisecond), rec.LastMove())
		time.Sleep(50 * time.Millisecond)
	}
}

// Issue 23.3: a PENDING task whose schedule is not in AX_DELAYED while its
// message still waits in its bucket (a worker's move to AX_DELAYED keeps
// failing) is not released before its run time, however many graces pass;
// then the reconciler re-publishes it. At 9b723bb the reconciler took the
// message for a stale copy and released the task a grace after it was
// judged.
func TestReconcilerNeverReleasesPendingEarly(t *testing.T) {
	t.Parallel()
	b := setupReconcile(t)
	ctx := context.Background()
	runAt := time.Now().Add(3 * time.Second).UTC()
	_, _, err := b.Store.Create(ctx, bound(&kv.Record{ID: "early", Type: "x", Tenant: "acme", Key: "k", Priority: 2,
		State: kv.StatePending, RunAt: &runAt}, 1, "", 0), kv.Actor{Action: "publish"})
	require.NoError(t, err)
	msg := nats.NewMsg(streams.DefaultNames().SubmitSubject(2, "acme", "x", "k"))
	msg.Header.Set(streams.HeaderMsgID, "early")
	msg.Header.Set(streams.HeaderRunAt, runAt.Format(time.RFC3339Nano))
	_, err = b.JS.PublishMsg(ctx, msg)
	require.NoError(t, err)

	pendingUntil(t, b.Store, kv.Ref{Tenant: "acme", ID: "early"}, runAt)
	rec := b.waitRepaired(t, "early", kv.StateReady)
	require.False(t, rec.LastMove().At.Before(runAt), "released at %s, before its run time %s", rec.LastMove().At, runAt)
	require.Contains(t, rec.LastMove().Error, "re-published from its stale copy AX_P2")
}

// Issue 23.3: a release its bucket refuses for what the copy is (here the
// bucket's MaxMsgSize was lowered below the task after it was scheduled)
// ends DEAD with the reason and a dead letter, instead of being retried
// every second forever. At 9b723bb the task stayed PENDING.
func TestMoverBuriesARefusedRelease(t *testing.T) {
	t.Parallel()
	lb := setupLoops(t, 1, nil, reconcileCfg)
	ctx := context.Background()
	info, err := lb.Client.Submit(ctx, ax.TaskSpec{Type: "x", Priority: ax.P2, Delay: 1500 * time.Millisecond, Payload: make([]byte, 16<<10),
		Headers: map[string]string{"Ax-Trace": "t1"}})
	require.NoError(t, err)
	s, err := lb.JS.Stream(ctx, "AX_P2")
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = 8 << 10
	_, err = lb.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	var rec *kv.Record
	require.Eventually(t, func() bool {
		rec, _, err = lb.Client.Store().Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
		return err == nil && rec.State == kv.StateDead
	}, 30*time.Second, 20*time.Millisecond, "the refused release ends DEAD: %+v", rec)
	require.Contains(t, rec.LastError, "release refused: AX_P2 would not take the task's copy")
	require.Contains(t, rec.LastError, "message size exceeds maximum allowed")
	require.Equal(t, "release", rec.LastMove().Action)
	require.NotZero(t, rec.DLQSeq)
	dlq, err := lb.JS.Stream(ctx, "AX_DLQ")
	require.NoError(t, err)
	letter, err := dlq.GetMsg(ctx, rec.DLQSeq)
	require.NoError(t, err)
	require.Len(t, letter.Data, 16<<10)
	require.Equal(t, "t1", letter.Header.Get("Ax-Trace"))
	l := streams.ParseDeadLetter(letter.Subject, letter.Header)
	require.Equal(t, info.ID, l.TaskID)
	require.Equal(t, "ax.submit.p2.default.x."+info.ID, l.Subject)
	require.Eventually(t, func() bool {
		d, err := lb.JS.Stream(ctx, "AX_DELAYED")
		return err == nil && d.CachedInfo().State.Msgs == 0
	}, 10*time.Second, 20*time.Millisecond, "the fired schedule is deleted")
}

// The mover never releases a task before its record's run time, whatever
// its fired schedule says: here the record's run time was moved after the
// schedule was written.
func TestMoverWaitsForTheRecordsRunTime(t *testing.T) {
	t.Parallel()
	lb := setupLoops(t, 1, nil, reconcileCfg)
	ctx := context.Background()
	info, err := lb.Client.Submit(ctx, ax.TaskSpec{Type: "x", Priority: ax.P2, Delay: 1500 * time.Millisecond})
	require.NoError(t, err)
	later := time.Now().Add(4 * time.Second).UTC()
	_, _, err = lb.Client.Store().Transition(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID}, kv.StatePending, kv.StatePending, kv.Actor{Action: "test"}, func(r *kv.Record) error {
		r.RunAt = &later
		return nil
	})
	require.NoError(t, err)

	pendingUntil(t, lb.Client.Store(), kv.Ref{Tenant: info.Tenant, ID: info.ID}, later)
	var rec *kv.Record
	require.Eventually(t, func() bool {
		rec, _, err = lb.Client.Store().Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
		return err == nil && rec.State == kv.StateReady
	}, 30*time.Second, 20*time.Millisecond)
	require.False(t, rec.LastMove().At.Before(later), "released at %s, before the record's run time %s", rec.LastMove().At, later)
}
