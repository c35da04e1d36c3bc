package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// rawDelayed publishes a raw delayed task of type echo with a payload of
// size bytes, due at runAt.
func (b *testBundle) rawDelayed(t *testing.T, id string, size int, runAt time.Time) {
	t.Helper()
	msg := nats.NewMsg("ax.submit.p2.acme.echo." + id)
	msg.Header.Set(streams.HeaderMsgID, id)
	msg.Header.Set(streams.HeaderRunAt, runAt.UTC().Format(time.RFC3339Nano))
	msg.Data = make([]byte, size)
	_, err := b.JS.PublishMsg(context.Background(), msg)
	require.NoError(t, err)
}

// echoRegistry counts the runs of type echo and keeps the last run's time.
func echoRegistry(t *testing.T, runs *atomic.Int32, ranAt *atomic.Int64) *worker.Registry {
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("echo", func(_ context.Context, _ *worker.Task) error {
		runs.Add(1)
		ranAt.Store(time.Now().UnixNano())
		return nil
	}, nil))
	return reg
}

// Issue 23.3: a raw delayed task that fits its bucket but leaves no room
// for the headers ax adds when it moves and releases it is dead-lettered at
// once with the reason; one that leaves room waits. At 9b723bb the first
// one's schedule or release was refused and retried forever.
func TestRawDelayedTaskTooLargeToMoveIsDead(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxMsgSize: 32 << 10})
	var runs atomic.Int32
	var ranAt atomic.Int64
	b.StartWorker(t, worker.Config{Registry: echoRegistry(t, &runs, &ranAt)})
	runAt := time.Now().Add(time.Hour)
	b.rawDelayed(t, "no-room", 32<<10-streams.TaskRoom, runAt)
	b.rawDelayed(t, "room", 32<<10-streams.TaskRoom-200, runAt)

	rec := b.WaitState(t, "no-room", kv.StateDead)
	require.Contains(t, rec.LastError, "task message too large")
	require.Contains(t, rec.LastError, "at most 28672")
	require.NotZero(t, rec.DLQSeq)
	b.WaitState(t, "room", kv.StatePending)
	require.Zero(t, runs.Load())
}

// Issue 23.3: a raw delayed task whose schedule AX_DELAYED refuses for
// what it is (here AX_DELAYED's MaxMsgSize was lowered below it) ends DEAD
// with the refusal as the reason, instead of being moved again every
// second while it waits PENDING with nothing to release it.
func TestRawDelayedTaskRefusedByAXDelayedIsDead(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	s, err := b.JS.Stream(ctx, "AX_DELAYED")
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.MaxMsgSize = 1 << 10
	_, err = b.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	var runs atomic.Int32
	var ranAt atomic.Int64
	b.StartWorker(t, worker.Config{Registry: echoRegistry(t, &runs, &ranAt)})
	b.rawDelayed(t, "refused", 2<<10, time.Now().Add(time.Hour))

	rec := b.WaitState(t, "refused", kv.StateDead)
	require.Contains(t, rec.LastError, "delayed task cannot be scheduled: AX_DELAYED refused its schedule")
	require.Contains(t, rec.LastError, "message size exceeds maximum allowed")
	require.Equal(t, []string{">PENDING", "PENDING>DEAD"}, axtest.Moves(rec))
	require.NotZero(t, rec.DLQSeq)
	require.Eventually(t, func() bool {
		p2, err := b.JS.Stream(ctx, "AX_P2")
		return err == nil && p2.CachedInfo().State.Msgs == 0
	}, 10*time.Second, 20*time.Millisecond, "its message leaves the bucket")
	require.Zero(t, runs.Load())
}

// Issue 23.3: a raw delayed task whose move to AX_DELAYED keeps failing
// (the stream does not take ax.delayed.> for the whole test: an outage)
// runs at its time from its own message, not before and not never. At
// 9b723bb the worker dropped the message at its run time as a stale copy
// of its PENDING task, which then never ran.
func TestRawDelayedTaskRunsFromItsMessageWhenTheMoveFails(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	s, err := b.JS.Stream(ctx, "AX_DELAYED")
	require.NoError(t, err)
	cfg := s.CachedInfo().Config
	cfg.Subjects = []string{"ax.due.>"}
	_, err = b.JS.UpdateStream(ctx, cfg)
	require.NoError(t, err)
	var runs atomic.Int32
	var ranAt atomic.Int64
	b.StartWorker(t, worker.Config{Registry: echoRegistry(t, &runs, &ranAt)})
	runAt := time.Now().Add(2 * time.Second)
	b.rawDelayed(t, "outage", 10, runAt)

	b.WaitState(t, "outage", kv.StatePending)
	rec := b.WaitState(t, "outage", kv.StateSucceeded)
	require.EqualValues(t, 1, runs.Load())
	require.False(t, time.Unix(0, ranAt.Load()).Before(runAt), "ran before its time")
	require.Equal(t, []string{">PENDING", "PENDING>READY", "READY>RUNNING", "RUNNING>SUCCEEDED"}, axtest.Moves(rec))
	require.Equal(t, "due", rec.Trail[1].Action)
}
