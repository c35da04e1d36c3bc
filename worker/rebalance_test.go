package worker_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// execution is one run of a handler: who ran it and when.
type execution struct {
	worker     string
	start, end time.Time
}

// executions records every handler run per task.
type executions struct {
	mu    sync.Mutex
	runs  map[string][]execution
	tasks int // tasks with at least one finished run
}

func (e *executions) handler(ctx context.Context, task *worker.Task) error {
	start := time.Now()
	select { // a short task, so that hand-overs catch some mid-run
	case <-time.After(time.Duration(rand.IntN(2000)) * time.Microsecond):
	case <-ctx.Done():
	}
	end := time.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.runs[task.ID]) == 0 {
		e.tasks++
	}
	e.runs[task.ID] = append(e.runs[task.ID], execution{worker: task.Worker, start: start, end: end})
	return ctx.Err()
}

func (e *executions) done() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tasks
}

// While 20,000 tasks flow through 4 workers, one stops, two join and another
// stops: every task ends SUCCEEDED exactly once, none is lost, and no task
// runs on two workers at once (the start-finish intervals of its runs never
// overlap).
func TestRebalanceWithoutLoss(t *testing.T) {
	t.Parallel()
	const total = 20_000
	b := setup(t, nil)
	ctx := context.Background()
	rec := &executions{runs: map[string][]execution{}}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("job", rec.handler, nil))

	tasks := make([]ax.TaskSpec, total)
	for i := range tasks {
		tasks[i] = ax.TaskSpec{Type: "job", Priority: ax.PriorityOf(i % 5)}
	}
	infos, err := b.Client.SubmitBatch(ctx, tasks)
	require.NoError(t, err)

	start := func(id string) *worker.Worker {
		w, _ := b.StartWorker(t, worker.Config{ID: id, Registry: reg, Concurrency: 8, MemberTTL: memberTTL, Logger: zap.NewNop()})
		return w
	}
	waitDone := func(n int) {
		require.Eventually(t, func() bool { return rec.done() >= n }, 3*time.Minute, 10*time.Millisecond,
			"only %d of %d tasks ran", rec.done(), n)
	}
	ws := map[string]*worker.Worker{}
	for _, id := range []string{"w1", "w2", "w3", "w4"} {
		ws[id] = start(id)
	}
	waitDone(total / 5)
	require.NoError(t, ws["w1"].Stop(ctx))
	waitDone(2 * total / 5)
	ws["w5"], ws["w6"] = start("w5"), start("w6")
	waitDone(3 * total / 5)
	require.NoError(t, ws["w2"].Stop(ctx))
	waitDone(total)

	// Every task SUCCEEDED, exactly once.
	check := func(info ax.TaskInfo) error {
		ctx := context.Background()
		var r *kv.Record
		var err error
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			r, _, err = b.Store.Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
			if err == nil && r.State == kv.StateSucceeded {
				break
			}
		}
		if err != nil {
			return err
		}
		succeeded := 0
		for _, m := range r.Trail {
			if m.To == kv.StateSucceeded {
				succeeded++
			}
		}
		if r.State != kv.StateSucceeded || succeeded != 1 {
			return fmt.Errorf("task %s is %s with %d moves to SUCCEEDED: %v", info.ID, r.State, succeeded, axtest.Moves(r))
		}
		return nil
	}
	errs := make(chan error, len(infos))
	next := make(chan ax.TaskInfo)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for info := range next {
				errs <- check(info)
			}
		})
	}
	for _, info := range infos {
		next <- info
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// No task ran on two workers at once.
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.runs, total)
	again := 0
	for id, runs := range rec.runs {
		slices.SortFunc(runs, func(a, b execution) int { return a.start.Compare(b.start) })
		for i := 1; i < len(runs); i++ {
			require.False(t, runs[i].start.Before(runs[i-1].end),
				"task %s ran on %s from %s while %s ran it until %s", id, runs[i].worker, runs[i].start, runs[i-1].worker, runs[i-1].end)
		}
		again += len(runs) - 1
	}
	ran := map[string]int64{}
	for id, w := range ws {
		ran[id] = w.Stats().Succeeded
	}
	t.Logf("re-runs: %d; succeeded per worker: %v", again, ran)
}
