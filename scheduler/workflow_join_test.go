package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// Two parents that finish at the same instant, on two workers, release
// their child once: 60 joins, each of two parents held at a barrier until
// both run, held 300 ms more and ended together, and a child after both. Each child
// runs once, on its first attempt, after both its parents' records are
// SUCCEEDED; and the leader released it once: one message of its id was
// published (a subscription on the submit subjects sees each publish; a
// retried publish keeps its Nats-Msg-Id) and no worker dropped a second
// one. Runs alone cannot tell a single release from a double one, since
// the claim drops the second message (TestWorkflowReleasedTwiceRunsOnce):
// with the leader's bookkeeping broken to release a task again, only the
// count of releases goes red.
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
	w1, _ := b.StartWorker(t, worker.Config{Registry: reg, Concurrency: joins + 4})
	w2, _ := b.StartWorker(t, worker.Config{Registry: reg, Concurrency: joins + 4})
	releases := map[string]map[string]bool{} // a child's task id: the Nats-Msg-Ids of its released messages
	sub, err := b.NC.Subscribe("ax.submit.*.*.child.*", func(m *nats.Msg) {
		msgID := m.Header.Get(jetstream.MsgIDHeader)
		id := streams.TaskIDOf(msgID)
		mu.Lock()
		defer mu.Unlock()
		if releases[id] == nil {
			releases[id] = map[string]bool{}
		}
		releases[id][msgID] = true
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	require.NoError(t, b.NC.Flush())

	wf := ax.NewWorkflow("together")
	for i := range joins {
		a, p := fmt.Sprintf("a-%d", i), fmt.Sprintf("b-%d", i)
		wf.Add(a, ax.TaskSpec{Type: "parent"}).Add(p, ax.TaskSpec{Type: "parent"})
		wf.Add(fmt.Sprintf("c-%d", i), ax.TaskSpec{Type: "child"}, a, p)
	}
	_, err = b.Client.SubmitWorkflow(context.Background(), wf)
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
		require.Len(t, releases[wf.TaskID(name)], 1, "%s released %d times", name, len(releases[wf.TaskID(name)]))
		a := b.Get(t, wf.TaskID(fmt.Sprintf("a-%d", i)))
		p := b.Get(t, wf.TaskID(fmt.Sprintf("b-%d", i)))
		require.Equal(t, kv.StateSucceeded, a.State)
		require.Equal(t, kv.StateSucceeded, p.State)
		for _, parent := range []*kv.Record{a, p} {
			require.False(t, started[name].Before(*parent.FinishedAt), "%s started before %s finished", name, parent.ID)
		}
		ends = max(ends, a.FinishedAt.Sub(*p.FinishedAt).Abs())
	}
	require.Zero(t, w1.Stats().Dropped+w2.Stats().Dropped, "a worker dropped a second message of a task")
	t.Logf("%d joins: the two parents of each ended at most %s apart; each child ran once, after both", joins, ends)
}
