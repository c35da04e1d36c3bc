package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/stretchr/testify/require"
)

// A RUNNING task whose worker is gone and whose message left its bucket is
// repaired (DEAD, with the reason); one whose message is still there, and
// one updated recently, are left alone.
func TestSweeperRepairsStuckTasks(t *testing.T) {
	t.Parallel()
	srv := newServer(t, nil)
	_, js := srv.Connect()
	ctx := context.Background()
	store, err := kv.NewStore(ctx, js, nil)
	require.NoError(t, err)
	running := func(id string, seq uint64) {
		_, _, err := store.Create(ctx, &kv.Record{ID: id, Type: "x", Tenant: "t", Key: id, State: kv.StateRunning, Worker: "w-gone", StreamSeq: seq, Gen: 1}, kv.Actor{Worker: "w-gone"})
		require.NoError(t, err)
	}
	ack, err := js.Publish(ctx, "ax.submit.p0.t.x.kept", nil)
	require.NoError(t, err)
	running("lost", ack.Sequence+100) // its message was acked and is gone
	running("kept", ack.Sequence)     // its message will be redelivered
	c := startContender(t, srv, scheduler.LeaderConfig{AckWait: time.Second, SweepInterval: 50 * time.Millisecond})
	waitLeader(t, c)
	require.Eventually(t, func() bool {
		rec, _, err := store.Get(ctx, "lost")
		return err == nil && rec.State == kv.StateDead
	}, 10*time.Second, 20*time.Millisecond)
	rec, _, err := store.Get(ctx, "lost")
	require.NoError(t, err)
	require.Contains(t, rec.LastError, "w-gone")
	require.Equal(t, "sweep", rec.LastMove().Action)
	running("fresh", ack.Sequence+200) // not yet past the ack wait
	time.Sleep(300 * time.Millisecond) // several sweeps
	for _, id := range []string{"kept", "fresh"} {
		rec, _, err := store.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, kv.StateRunning, rec.State, id)
	}
}
