package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// agingRun keeps P0 saturated with a steady stream of short tasks served by
// one slow worker, submits one P4 task and returns its record once it
// started, or nil if it did not start within wait.
func agingRun(t *testing.T, threshold time.Duration, wait time.Duration) (*kv.Record, time.Time) {
	lb := setupLoops(t, 1, nil, scheduler.Config{AgingThreshold: threshold})
	js, client := lb.JS, lb.Client
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("work", func(ctx context.Context, _ *worker.Task) error {
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
		return nil
	}, nil))
	w, _ := lb.StartWorker(t, worker.Config{Registry: reg, Concurrency: 1, PrefetchPerShard: 1})
	defer axtest.Stop(t, w)

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { // P0 backlog kept at 10 or more
		for ctx.Err() == nil {
			if natstest.StreamMsgs(t, js, "AX_P0") < 10 {
				_, _ = client.SubmitBatch(ctx, make10())
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	// Saturated means the worker is busy with P0 and more P0 tasks wait.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.True(c, w.Stats().Started >= 5 && natstest.StreamMsgs(c, js, "AX_P0") >= 10)
	}, 10*time.Second, 5*time.Millisecond)
	info, err := client.Submit(ctx, ax.TaskSpec{Type: "work", Priority: ax.P4})
	require.NoError(t, err)
	submitted := time.Now()
	var rec *kv.Record
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		r, err := client.Get(ctx, info.Tenant, info.ID) // no record until its claim: the one it will write
		require.NoError(t, err)
		if r.StartedAt != nil {
			rec = r
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.GreaterOrEqual(t, natstest.StreamMsgs(t, js, "AX_P0"), uint64(1), "P0 stayed saturated")
	return rec, submitted
}

func make10() []ax.TaskSpec {
	tasks := make([]ax.TaskSpec, 10)
	for i := range tasks {
		tasks[i] = ax.TaskSpec{Type: "work", Priority: ax.P0}
	}
	return tasks
}

// With P0 saturated, a P4 task is lifted one level per threshold and
// starts within 4 x threshold + 1s.
func TestAgingLiftsStarvedTask(t *testing.T) {
	t.Parallel()
	const threshold = 500 * time.Millisecond
	rec, submitted := agingRun(t, threshold, 4*threshold+10*time.Second)
	require.NotNil(t, rec, "the P4 task never started")
	took := rec.StartedAt.Sub(submitted)
	t.Logf("P4 task started %s after submit (bound %s)", took, 4*threshold+time.Second)
	var aged []int
	for _, m := range rec.Trail {
		t.Logf("%s %s>%s %s", m.At.Sub(submitted), m.From, m.To, m.Action)
	}
	require.LessOrEqual(t, took, 4*threshold+time.Second)
	for _, m := range rec.Trail {
		if m.Action == "aging" {
			aged = append(aged, 1)
		}
	}
	require.Len(t, aged, 4, "lifted P4 -> P3 -> P2 -> P1 -> P0")
	require.Equal(t, 0, rec.Priority)
	require.EqualValues(t, 4, rec.Gen, "its first message had none (its record is written at the claim), each lift one more")
}

// The same load without aging starves the P4 task: the test above can fail.
func TestNoAgingStarves(t *testing.T) {
	const threshold = 500 * time.Millisecond
	rec, _ := agingRun(t, -1, 4*threshold+time.Second)
	require.Nil(t, rec, "a P4 task ran while P0 was saturated and aging was off")
}

// On the default layout, a task a worker put back for want of its handler
// is not lifted: it waits for a worker that has the handler at its own
// priority, as an unserved type of a pools deployment does (lifted, it
// would climb to P0, taking the room of tasks that can run). Fails without
// the check: the tasks reach P0.
func TestAgingLeavesPutBackTasksWhereTheyAre(t *testing.T) {
	t.Parallel()
	lb := setupLoops(t, 1, nil, scheduler.Config{AgingThreshold: 200 * time.Millisecond})
	ctx := context.Background()
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("x", func(context.Context, *worker.Task) error { return nil }, nil))
	lb.StartWorker(t, worker.Config{Registry: reg})
	var ids []string
	for range 4 {
		info, err := lb.Client.Submit(ctx, ax.TaskSpec{Type: "report", Priority: ax.P4})
		require.NoError(t, err)
		ids = append(ids, info.ID)
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, id := range ids {
			rec, _, err := lb.Client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
			if assert.NoError(c, err) {
				assert.Equal(c, kv.ActionNoHandler, rec.LastMove().Action)
			}
		}
	}, 30*time.Second, 20*time.Millisecond)
	time.Sleep(2 * time.Second) // ten thresholds: P4 would reach P0 after four
	for _, id := range ids {
		rec, _, err := lb.Client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
		require.NoError(t, err)
		require.Equal(t, 4, rec.Priority, "task %s lifted: %v", id, rec.Trail)
		require.Equal(t, kv.StateReady, rec.State)
	}
}
