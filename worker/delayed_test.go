package worker_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// startLeader runs the scheduler's leader loops until the test ends; the
// function it returns stops them sooner.
func (b *testBundle) startLeader(t *testing.T) (stop func()) {
	t.Helper()
	return b.startLeaderWith(t, scheduler.Config{})
}

// startLeaderWith is startLeader with cfg (its lease TTL and logger set).
func (b *testBundle) startLeaderWith(t *testing.T, cfg scheduler.Config) (stop func()) {
	t.Helper()
	_, js := b.srv.Connect()
	cfg.LeaseTTL, cfg.Logger = 2*time.Second, zaptest.NewLogger(t)
	l, err := scheduler.New(context.Background(), js, &cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Run(ctx)
	}()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

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
	b.startWorker(t, worker.Config{Registry: reg})
	b.startLeader(t)
	ctx := context.Background()
	runAt := time.Now().Add(2 * time.Second)
	msg := nats.NewMsg("ax.submit.p2.acme.echo.k1")
	msg.Header.Set("Nats-Msg-Id", "raw-later")
	msg.Header.Set("Ax-Run-At", runAt.UTC().Format(time.RFC3339Nano))
	msg.Data = []byte("later")
	_, err := b.js.PublishMsg(ctx, msg)
	require.NoError(t, err)

	rec := b.waitState(t, "raw-later", kv.StatePending)
	require.True(t, runAt.Truncate(time.Microsecond).Equal(rec.RunAt.Truncate(time.Microsecond)))
	require.Eventually(t, func() bool {
		s, err := b.js.Stream(ctx, "AX_P2")
		return err == nil && s.CachedInfo().State.Msgs == 0
	}, 10*time.Second, 10*time.Millisecond, "the raw message leaves its bucket while it waits")
	require.Zero(t, runs.Load())

	rec = b.waitState(t, "raw-later", kv.StateSucceeded)
	require.EqualValues(t, 1, runs.Load())
	require.False(t, time.Unix(0, ranAt.Load()).Before(runAt), "ran before its time")
	require.Equal(t, []string{">PENDING", "PENDING>READY", "READY>RUNNING", "RUNNING>SUCCEEDED"}, moves(rec))
}
