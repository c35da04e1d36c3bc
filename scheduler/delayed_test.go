package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bucketMsgs returns the messages of a stream with their stored time.
func bucketMsgs(t *testing.T, js jetstream.JetStream, name string) []*jetstream.RawStreamMsg {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, name)
	require.NoError(t, err)
	var out []*jetstream.RawStreamMsg
	for seq := uint64(1); ; {
		msg, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(">"))
		if err != nil {
			return out
		}
		out = append(out, msg)
		seq = msg.Sequence + 1
	}
}

func TestDelayedTaskIsReleasedAtItsTime(t *testing.T) {
	t.Parallel()
	lb := setupLoops(t, 1, nil, scheduler.Config{})
	js, client, ctx := lb.JS, lb.Client, context.Background()

	info, err := client.Submit(ctx, ax.TaskSpec{Type: "email", Priority: ax.P2, Delay: 1500 * time.Millisecond, Payload: []byte("hi"),
		Headers: map[string]string{"Ax-Trace": "t1"}})
	require.NoError(t, err)
	require.False(t, info.RunAt.IsZero())
	rec, _, err := client.Store().Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
	require.NoError(t, err)
	require.Equal(t, kv.StatePending, rec.State)
	require.True(t, info.RunAt.Equal(*rec.RunAt))
	require.Zero(t, natstest.StreamMsgs(t, js, "AX_P2"), "a delayed task waits outside its bucket")

	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.True(c, natstest.StreamMsgs(c, js, "AX_P2") == 1) }, 10*time.Second, 5*time.Millisecond)
	msgs := bucketMsgs(t, js, "AX_P2")
	require.Len(t, msgs, 1)
	msg := msgs[0]
	require.False(t, msg.Time.Before(info.RunAt), "released %s before its time %s", msg.Time, info.RunAt)
	t.Logf("released %s after its run time", msg.Time.Sub(info.RunAt))
	require.Equal(t, info.ID, msg.Header.Get(streams.HeaderTaskID))
	require.Equal(t, "t1", msg.Header.Get("Ax-Trace"))
	require.Equal(t, "hi", string(msg.Data))
	opts, err := streams.ParseCopyHeaders(msg.Header)
	require.NoError(t, err)
	require.Equal(t, info.ID, opts.ID)
	require.EqualValues(t, 2, opts.Gen, "a release is the record's next generation")
	require.Eventually(t, func() bool {
		rec, _, err = client.Store().Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
		return err == nil && rec.State == kv.StateReady
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, msg.Sequence, rec.StreamSeq)
	require.Equal(t, "AX_P2", rec.Stream)
	require.EqualValues(t, 2, rec.Gen)
	require.Equal(t, "due", rec.LastMove().Action)
	// The schedule and its fired copy are gone from AX_DELAYED.
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.True(c, natstest.StreamMsgs(c, js, "AX_DELAYED") == 0) }, 5*time.Second, 10*time.Millisecond)
}

func TestCancelDelayedTask(t *testing.T) {
	t.Parallel()
	lb := setupLoops(t, 1, nil, scheduler.Config{})
	js, client, ctx := lb.JS, lb.Client, context.Background()
	keep, err := client.Submit(ctx, ax.TaskSpec{Type: "x", Delay: 1500 * time.Millisecond})
	require.NoError(t, err)
	drop, err := client.Submit(ctx, ax.TaskSpec{Type: "x", Delay: 1500 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, client.CancelDelayed(ctx, drop.Tenant, drop.ID))
	rec, _, err := client.Store().Get(ctx, kv.Ref{Tenant: drop.Tenant, ID: drop.ID})
	require.NoError(t, err)
	require.Equal(t, kv.StateCancelled, rec.State)
	require.Eventually(t, func() bool {
		rec, _, err := client.Store().Get(ctx, kv.Ref{Tenant: keep.Tenant, ID: keep.ID})
		return err == nil && rec.State == kv.StateReady
	}, 10*time.Second, 10*time.Millisecond)
	require.EqualValues(t, 1, natstest.StreamMsgs(t, js, "AX_P2"), "only the task not cancelled runs")
	require.ErrorIs(t, client.CancelDelayed(ctx, keep.Tenant, keep.ID), kv.ErrWrongState)
}

// The leader dies while delayed tasks are due: the next leader releases
// every one, each exactly once.
func TestDelayedTasksSurviveLeaderChange(t *testing.T) {
	t.Parallel()
	lb := setupLoops(t, 2, nil, scheduler.Config{})
	js, client, ctx, first := lb.JS, lb.Client, context.Background(), lb.leader
	const n = 40
	ids := map[string]bool{}
	for i := range n {
		info, err := client.Submit(ctx, ax.TaskSpec{Type: "x", Priority: ax.P1, Delay: time.Duration(1000+100*i) * time.Millisecond})
		require.NoError(t, err)
		ids[info.ID] = true
	}
	time.Sleep(1500 * time.Millisecond) // some released, some fired and held, some scheduled
	first.NC.Close()
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.True(c, natstest.StreamMsgs(c, js, "AX_P1") >= n) }, 30*time.Second, 10*time.Millisecond)
	time.Sleep(500 * time.Millisecond) // a double would land now
	require.Eventually(t, func() bool {
		for id := range ids {
			rec, _, err := client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
			if err != nil || rec.State != kv.StateReady {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond, fmt.Sprintf("%d tasks READY", n))
	// Each task has exactly one message its record names: the one that
	// runs. A release the killed leader published just before its
	// connection died, with no compare-and-set after it, is an orphan
	// copy, which workers drop (docs/WIRE.md): at most one per release the
	// killed leader had in flight.
	named := map[string]int{}
	orphans := 0
	for _, m := range bucketMsgs(t, js, "AX_P1") {
		id := m.Header.Get(streams.HeaderTaskID)
		rec, _, err := client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
		require.NoError(t, err)
		if rec.Names(streams.Names{}, "AX_P1", m.Sequence) {
			named[id]++
		} else {
			orphans++
		}
	}
	for id := range ids {
		require.Equal(t, 1, named[id], "task %s has one current message", id)
	}
	require.LessOrEqual(t, orphans, scheduler.DefaultMoverWorkers, "orphan copies: only the killed leader's releases in flight")
}
