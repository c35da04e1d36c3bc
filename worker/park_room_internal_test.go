package worker

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/streams"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// The deliveries a worker parks for its limits hold at most its parking
// room's bytes of messages: beyond it they step aside into AX_DELAYED
// (released by the leader), and every task still runs once, once its slot
// comes.
func TestParkingHoldsAtMostItsBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := natstest.Start(t, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(t, js, nil)
	startLeader(t, srv)
	board, err := js.KeyValue(ctx, streams.Names{}.ControlBucket())
	require.NoError(t, err)
	limits, err := json.Marshal(kv.Limits{Limits: map[string]kv.Limit{"big": {Concurrency: 1}}})
	require.NoError(t, err)
	_, err = board.Put(ctx, kv.LimitsKey, limits)
	require.NoError(t, err)

	const payload, room = 10_000, 50_000 // five parked at most
	var mu sync.Mutex
	ran := map[string]int{}
	reg := NewRegistry()
	require.NoError(t, reg.Handle("big", func(_ context.Context, task *Task) error {
		mu.Lock()
		ran[task.ID]++
		mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		return nil
	}, nil))
	w, err := New(ctx, js, &Config{Registry: reg, Concurrency: 16, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	w.limits.room = room
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, w.Stop(sctx))
	})
	client, err := ax.NewClient(ctx, js, nil)
	require.NoError(t, err)
	specs := make([]ax.TaskSpec, 30)
	for i := range specs {
		specs[i] = ax.TaskSpec{Type: "big", Payload: make([]byte, payload)}
	}
	_, err = client.SubmitBatch(ctx, specs)
	require.NoError(t, err)

	most, parkedMost := 0, 0
	require.Eventually(t, func() bool {
		w.limits.mu.Lock()
		n := 0
		for _, q := range w.limits.parked {
			n += len(q)
		}
		most, parkedMost = max(most, w.limits.bytes), max(parkedMost, n)
		w.limits.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == len(specs)
	}, 60*time.Second, 2*time.Millisecond)
	t.Logf("most parked: %d deliveries, %d bytes", parkedMost, most)
	require.Positive(t, parkedMost, "nothing was parked: the test proves nothing")
	require.LessOrEqual(t, most, room)
	require.Positive(t, w.Stats().SteppedAside, "nothing stepped aside: the room was never full")
	for id, n := range ran {
		require.Equal(t, 1, n, "task %s", id)
	}
	w.limits.mu.Lock()
	defer w.limits.mu.Unlock()
	require.Zero(t, w.limits.bytes, "every reservation given back")
}

// startLeader runs the scheduler's leader loops on srv until the test ends:
// it releases the tasks that stepped aside.
func startLeader(t *testing.T, srv *natstest.Server) {
	t.Helper()
	_, js := srv.Connect()
	l, err := scheduler.New(context.Background(), js, &scheduler.Config{LeaseTTL: 2 * time.Second, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = l.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
}
