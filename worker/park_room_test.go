package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// The deliveries a worker parks for its limits hold at most its parking
// room's bytes of messages: beyond it they step aside into AX_DELAYED
// (released by the leader), and every task still runs once, once its slot
// comes.
func TestParkingHoldsAtMostItsBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, nil)
	b.StartLeader(t, scheduler.Config{}) // it releases the tasks that stepped aside
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"big": {Concurrency: 1}}})

	const payload, room = 10_000, 50_000 // five parked at most
	var mu sync.Mutex
	ran := map[string]int{}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("big", func(_ context.Context, task *worker.Task) error {
		mu.Lock()
		ran[task.ID]++
		mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		return nil
	}, nil))
	w, _ := b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 16})
	worker.SetParkRoom(w, room)
	specs := make([]ax.TaskSpec, 30)
	for i := range specs {
		specs[i] = ax.TaskSpec{Type: "big", Payload: make([]byte, payload)}
	}
	_, err := b.Client.SubmitBatch(ctx, specs)
	require.NoError(t, err)

	most, parkedMost := 0, 0
	require.Eventually(t, func() bool {
		n, bytes := worker.Parked(w)
		most, parkedMost = max(most, bytes), max(parkedMost, n)
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
	_, bytes := worker.Parked(w)
	require.Zero(t, bytes, "every reservation given back")
}
