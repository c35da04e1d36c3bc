package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// Two parents that finish at the same instant, on two workers, release
// their child once: 60 joins, each of two parents held at a barrier until
// both run, held 300 ms more and ended together, and a child after both. Each child
// runs once, on its first attempt, after both its parents' records are
// SUCCEEDED.
func TestWorkflowParentsEndTogether(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, nil, scheduler.Config{})
	const joins = 60
	var (
		mu       sync.Mutex
		arrived  = map[string]chan struct{}{} // per join, closed when its second parent arrives
		children = map[string]int{}
		started  = map[string]time.Time{}
	)
	barrier := func(join string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		ch, ok := arrived[join]
		if !ok {
			ch = make(chan struct{})
			arrived[join] = ch
			return ch
		}
		close(ch)
		return ch
	}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("parent", func(ctx context.Context, task *worker.Task) error {
		_, name := task.Workflow() // "a-<i>" or "b-<i>"
		select {
		case <-barrier(name[2:]):
		case <-time.After(10 * time.Second):
			return fmt.Errorf("the other parent of %s never ran", name[2:])
		}
		time.Sleep(300 * time.Millisecond) // both run, then end together
		return nil
	}, nil))
	require.NoError(t, reg.Handle("child", func(ctx context.Context, task *worker.Task) error {
		_, name := task.Workflow()
		mu.Lock()
		children[name]++
		started[name] = time.Now()
		mu.Unlock()
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: joins + 4})
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: joins + 4})

	wf := ax.NewWorkflow("together")
	for i := range joins {
		a, p := fmt.Sprintf("a-%d", i), fmt.Sprintf("b-%d", i)
		wf.Add(a, ax.TaskSpec{Type: "parent"}).Add(p, ax.TaskSpec{Type: "parent"})
		wf.Add(fmt.Sprintf("c-%d", i), ax.TaskSpec{Type: "child"}, a, p)
	}
	_, err := b.Client.SubmitWorkflow(context.Background(), wf)
	require.NoError(t, err)
	for i := range joins {
		rec := b.WaitState(t, wf.TaskID(fmt.Sprintf("c-%d", i)), kv.StateSucceeded)
		require.Equal(t, 1, rec.Attempt, "c-%d", i)
	}
	time.Sleep(time.Second) // a second release would run by now
	mu.Lock()
	defer mu.Unlock()
	ends := 0 * time.Second
	for i := range joins {
		name := fmt.Sprintf("c-%d", i)
		require.Equal(t, 1, children[name], "%s ran %d times", name, children[name])
		a := b.Get(t, wf.TaskID(fmt.Sprintf("a-%d", i)))
		p := b.Get(t, wf.TaskID(fmt.Sprintf("b-%d", i)))
		require.Equal(t, kv.StateSucceeded, a.State)
		require.Equal(t, kv.StateSucceeded, p.State)
		for _, parent := range []*kv.Record{a, p} {
			require.False(t, started[name].Before(*parent.FinishedAt), "%s started before %s finished", name, parent.ID)
		}
		ends = max(ends, a.FinishedAt.Sub(*p.FinishedAt).Abs())
	}
	t.Logf("%d joins: the two parents of each ended at most %s apart; each child ran once, after both", joins, ends)
}
