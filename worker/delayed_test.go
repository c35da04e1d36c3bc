package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A raw publish with a future Ax-Run-At does not run early and holds no
// consumer slot: the worker moves it to AX_DELAYED (PENDING), and it runs
// once, at its time.
func TestRawPublishWithRunAtWaits(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	var runs atomic.Int32
	var ranAt atomic.Int64
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("echo", func(_ context.Context, _ *worker.Task) error {
		runs.Add(1)
		ranAt.Store(time.Now().UnixNano())
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	runAt := time.Now().Add(2 * time.Second)
	msg := nats.NewMsg("ax.submit.p2.acme.echo.k1")
	msg.Header.Set("Nats-Msg-Id", "raw-later")
	msg.Header.Set("Ax-Run-At", runAt.UTC().Format(time.RFC3339Nano))
	msg.Data = []byte("later")
	_, err := b.JS.PublishMsg(ctx, msg)
	require.NoError(t, err)

	rec := b.WaitState(t, "raw-later", kv.StatePending)
	require.True(t, runAt.Truncate(time.Microsecond).Equal(rec.RunAt.Truncate(time.Microsecond)))
	require.Eventually(t, func() bool {
		s, err := b.JS.Stream(ctx, "AX_P2")
		return err == nil && s.CachedInfo().State.Msgs == 0
	}, 10*time.Second, 10*time.Millisecond, "the raw message leaves its bucket while it waits")
	require.Zero(t, runs.Load())

	rec = b.WaitState(t, "raw-later", kv.StateSucceeded)
	require.EqualValues(t, 1, runs.Load())
	require.False(t, time.Unix(0, ranAt.Load()).Before(runAt), "ran before its time")
	require.Equal(t, []string{">PENDING", "PENDING>READY", "READY>RUNNING", "RUNNING>SUCCEEDED"}, axtest.Moves(rec))
}
