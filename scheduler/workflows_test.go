package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// runLog records each start and end of a workflow's tasks, by name.
type runLog struct {
	mu     sync.Mutex
	starts map[string]int
	start  map[string]time.Time
	end    map[string]time.Time
}

func (l *runLog) handler(fail map[string]bool) worker.HandlerFunc {
	return func(ctx context.Context, task *worker.Task) error {
		_, name := task.Workflow()
		l.mu.Lock()
		if l.starts == nil {
			l.starts, l.start, l.end = map[string]int{}, map[string]time.Time{}, map[string]time.Time{}
		}
		l.starts[name]++
		l.start[name] = time.Now()
		l.mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		if fail[name] {
			return worker.Permanent(errors.New("failed on purpose"))
		}
		require.NoError(nil, task.SetResultJSON(map[string]string{"by": name}))
		l.mu.Lock()
		l.end[name] = time.Now()
		l.mu.Unlock()
		return nil
	}
}

// A workflow's tasks run after their parents, each once, and read their
// parents' results: a chain, a group with a callback, a task with parents
// in both.
func TestWorkflowRunsInDependencyOrder(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, nil, scheduler.Config{})
	var log runLog
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("step", log.handler(nil), nil))
	var got sync.Map
	require.NoError(t, reg.Handle("join", func(ctx context.Context, task *worker.Task) error {
		for _, p := range []string{"b", "g1", "g2", "g3"} {
			var v map[string]string
			if err := task.ParentResult(ctx, p, &v); err != nil {
				return err
			}
			got.Store(p, v["by"])
		}
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 8})

	step := ax.TaskSpec{Type: "step"}
	wf := ax.NewWorkflow("wf-order").
		Chain(ax.Step{Name: "a", Spec: step}, ax.Step{Name: "b", Spec: step})
	wf.Group(ax.Step{Name: "g1", Spec: step}, ax.Step{Name: "g2", Spec: step}, ax.Step{Name: "g3", Spec: step}).
		Then(ax.Step{Name: "after-group", Spec: step})
	wf.Add("join", ax.TaskSpec{Type: "join"}, "b", "after-group")
	info, err := b.Client.SubmitWorkflow(context.Background(), wf)
	require.NoError(t, err)
	require.Equal(t, 7, info.Tasks)
	require.False(t, info.Duplicate)

	b.WaitState(t, wf.TaskID("join"), kv.StateSucceeded)
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, task := range wf.Tasks {
		if task.Name != "join" {
			require.Equal(t, 1, log.starts[task.Name], "%s ran once", task.Name)
		}
		for _, p := range task.After {
			if task.Name != "join" {
				require.True(t, log.start[task.Name].After(log.end[p]), "%s started before its parent %s ended", task.Name, p)
			}
		}
	}
	for _, p := range []string{"b", "g1", "g2", "g3"} {
		by, _ := got.Load(p)
		require.Equal(t, p, by, "the join read %s's result", p)
	}

	again, err := b.Client.SubmitWorkflow(context.Background(), wf)
	require.NoError(t, err)
	require.True(t, again.Duplicate, "a workflow id is taken once")
}

// A DEAD parent stops its descendants (the default policy) and releases
// them with ContinueDescendants.
func TestWorkflowFailurePolicy(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, nil, scheduler.Config{})
	var log runLog
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("step", log.handler(map[string]bool{"bad": true}), nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4})
	step := ax.TaskSpec{Type: "step"}
	for _, policy := range []ax.FailurePolicy{ax.CancelDescendants, ax.ContinueDescendants} {
		wf := ax.NewWorkflow(fmt.Sprintf("wf-%s", policy)).Chain(ax.Step{Name: "bad", Spec: step}, ax.Step{Name: "next", Spec: step})
		wf.OnFailure = policy
		_, err := b.Client.SubmitWorkflow(context.Background(), wf)
		require.NoError(t, err)
		b.WaitState(t, wf.TaskID("bad"), kv.StateDead)
		if policy == ax.ContinueDescendants {
			b.WaitState(t, wf.TaskID("next"), kv.StateSucceeded)
			continue
		}
		time.Sleep(time.Second)
		_, _, err = b.Client.Store().Get(context.Background(), kv.Ref{Tenant: ax.DefaultTenant, ID: wf.TaskID("next")})
		require.ErrorIs(t, err, kv.ErrNotFound, "the child of a DEAD task was released")
	}
}

// An atomic batch runs every task once, with the ids given; a batch with
// one invalid task stores nothing.
func TestAtomicBatch(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, nil, scheduler.Config{})
	reg := worker.NewRegistry()
	var ran sync.Map
	require.NoError(t, reg.Handle("step", func(ctx context.Context, task *worker.Task) error {
		n, _ := ran.LoadOrStore(task.ID, new(atomic.Int32))
		n.(*atomic.Int32).Add(1)
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 8})
	ctx := context.Background()
	var specs []ax.TaskSpec
	for i := range 20 {
		specs = append(specs, ax.TaskSpec{ID: fmt.Sprintf("atomic-%d", i), Type: "step"})
	}
	infos, err := b.Client.SubmitBatch(ctx, specs, ax.Atomic())
	require.NoError(t, err)
	require.Len(t, infos, 20)
	for i := range specs {
		require.Equal(t, specs[i].ID, infos[i].ID)
		b.WaitState(t, specs[i].ID, kv.StateSucceeded)
	}
	ran.Range(func(id, n any) bool {
		require.EqualValues(t, 1, n.(*atomic.Int32).Load(), "%s ran more than once", id)
		return true
	})

	bad := []ax.TaskSpec{{ID: "fine", Type: "step"}, {ID: "bad", Type: "step", Priority: "p9"}}
	_, err = b.Client.SubmitBatch(ctx, bad, ax.Atomic())
	require.ErrorIs(t, err, ax.ErrInvalidTask)
	require.ErrorContains(t, err, "task 1 (bad)")
	time.Sleep(time.Second)
	_, _, err = b.Client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: "fine"})
	require.ErrorIs(t, err, kv.ErrNotFound, "a task of a refused atomic batch was stored")
}

// Cancelling a workflow (workflow.cancel) cancels the task running and the
// ones not released yet, leaves the ended one, and nothing more runs: the
// leader's release of a task whose parent then ended meets its CANCELLED
// record (red with the unreleased tasks left alone: "after" ran).
func TestWorkflowCancel(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, nil, scheduler.Config{})
	reg := worker.NewRegistry()
	started := make(chan string, 10)
	require.NoError(t, reg.Handle("quick", func(context.Context, *worker.Task) error { return nil }, nil))
	require.NoError(t, reg.Handle("slow", func(ctx context.Context, task *worker.Task) error {
		started <- task.ID
		<-ctx.Done()
		return context.Cause(ctx)
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4})
	wf := ax.NewWorkflow("wf-cancel").Chain(
		ax.Step{Name: "first", Spec: ax.TaskSpec{Type: "quick"}},
		ax.Step{Name: "long", Spec: ax.TaskSpec{Type: "slow"}},
		ax.Step{Name: "after", Spec: ax.TaskSpec{Type: "quick"}})
	// "after" is released once "long" ends, however: after the cancel.
	wf.OnFailure = ax.ContinueDescendants
	_, err := b.Client.SubmitWorkflow(context.Background(), wf)
	require.NoError(t, err)
	select {
	case id := <-started:
		require.Equal(t, wf.TaskID("long"), id)
	case <-time.After(30 * time.Second):
		t.Fatal("the second task never started")
	}
	api := b.StartAdmin(t, nil)
	reply, err := api.CancelWorkflow(context.Background(), admin.WorkflowRequest{ID: wf.ID})
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"long", "after"}, reply.Cancelled)
	require.Equal(t, []string{"first"}, reply.Ended)
	require.Equal(t, 1, reply.Notified, "the running task's worker was told")
	b.WaitState(t, wf.TaskID("long"), kv.StateCancelled)
	time.Sleep(time.Second)
	rec := b.WaitState(t, wf.TaskID("after"), kv.StateCancelled)
	require.Empty(t, rec.Type, "the unreleased task was released: %+v", rec)

	// workflow.list sums it up: nothing runs, a task was cancelled.
	list, err := api.ListWorkflows(context.Background(), admin.WorkflowListRequest{})
	require.NoError(t, err)
	require.Len(t, list.Workflows, 1)
	require.Equal(t, "CANCELLED", list.Workflows[0].State)
	require.Equal(t, map[string]int{"SUCCEEDED": 1, "CANCELLED": 2}, list.Workflows[0].States)
}

// A DEAD task stops its descendants (the default policy) until it is
// replayed from the dead-letter stream and succeeds: then the workflow
// goes on where it stopped, as docs/API.md promises.
func TestWorkflowReplayResumes(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, nil, scheduler.Config{})
	var fixed atomic.Bool
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("step", func(_ context.Context, task *worker.Task) error {
		if _, name := task.Workflow(); name == "bad" && !fixed.Load() {
			return worker.Permanent(errors.New("failed on purpose"))
		}
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4})
	step := ax.TaskSpec{Type: "step"}
	wf := ax.NewWorkflow("wf-replay").Chain(ax.Step{Name: "bad", Spec: step}, ax.Step{Name: "next", Spec: step})
	_, err := b.Client.SubmitWorkflow(context.Background(), wf)
	require.NoError(t, err)
	b.WaitState(t, wf.TaskID("bad"), kv.StateDead)
	time.Sleep(time.Second)
	_, _, err = b.Client.Store().Get(context.Background(), kv.Ref{Tenant: ax.DefaultTenant, ID: wf.TaskID("next")})
	require.ErrorIs(t, err, kv.ErrNotFound, "the child of a DEAD task was released")

	fixed.Store(true)
	api := b.StartAdmin(t, nil)
	reply, err := api.Replay(context.Background(), admin.DLQReplayRequest{ID: wf.TaskID("bad")})
	require.NoError(t, err)
	require.Len(t, reply.Replayed, 1)
	b.WaitState(t, wf.TaskID("bad"), kv.StateSucceeded)
	b.WaitState(t, wf.TaskID("next"), kv.StateSucceeded)
}

// The trail says why a workflow's task was released and by which parent:
// the first move of each record is a release whose note names the
// workflow's start (a root) or the parent whose success released it, the
// last of them to end for a join; with ContinueDescendants, the failed
// parent and how it ended.
func TestWorkflowTrailNamesTheReleasingParent(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, nil, scheduler.Config{})
	var log runLog
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("step", log.handler(map[string]bool{"bad": true}), nil))
	require.NoError(t, reg.Handle("slow", func(ctx context.Context, _ *worker.Task) error {
		time.Sleep(500 * time.Millisecond) // ends well after b: the last parent of d
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4})
	step := ax.TaskSpec{Type: "step"}
	wf := ax.NewWorkflow("wf-trail").Chain(ax.Step{Name: "a", Spec: step}, ax.Step{Name: "b", Spec: step})
	wf.Add("c", ax.TaskSpec{Type: "slow"}, "a")
	wf.Add("d", step, "b", "c")
	wf.Add("bad", step)
	wf.Add("after-bad", step, "bad")
	wf.OnFailure = ax.ContinueDescendants
	_, err := b.Client.SubmitWorkflow(context.Background(), wf)
	require.NoError(t, err)
	b.WaitState(t, wf.TaskID("d"), kv.StateSucceeded)
	b.WaitState(t, wf.TaskID("after-bad"), kv.StateSucceeded)

	first := func(name string) kv.Move {
		rec, _, err := b.Client.Store().Get(context.Background(), kv.Ref{Tenant: ax.DefaultTenant, ID: wf.TaskID(name)})
		require.NoError(t, err)
		require.NotEmpty(t, rec.Trail)
		return rec.Trail[0]
	}
	for name, note := range map[string]string{
		"a":         "released by the workflow's start",
		"bad":       "released by the workflow's start",
		"b":         "released by the success of parent a",
		"c":         "released by the success of parent a",
		"after-bad": "released by the end of parent bad (DEAD; the workflow's on_failure is continue)",
	} {
		m := first(name)
		require.Equal(t, kv.ActionRelease, m.Action, name)
		require.Equal(t, note, m.Note, name)
	}
	require.Equal(t, "released by the success of parent c, the last of its 2 parents", first("d").Note)
}

// A workflow's task released twice (a new leader that read the workflow
// before the first release's record was written, or any release after
// JetStream's duplicate window: a release's Nats-Msg-Id is its own, so
// nothing is de-duplicated by it) runs once: the worker's claim creates
// the record for the first message it sees, and a record names the one
// message that runs its task, so the other is dropped; a release of a task
// that ended long ago runs nothing either. Both messages of c are stored
// (neither is de-duplicated), so the claim alone keeps c to one run: with
// the claim's record create broken to run a message whose record exists,
// b and c each run twice (red).
func TestWorkflowReleasedTwiceRunsOnce(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, nil, scheduler.Config{})
	var mu sync.Mutex
	runs := map[string]int{}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("count", func(_ context.Context, task *worker.Task) error {
		mu.Lock()
		runs[task.ID]++
		mu.Unlock()
		return nil
	}, nil))
	w1, _ := b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 8})
	w2, _ := b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 8})
	ctx := context.Background()
	spec := ax.TaskSpec{Type: "count"}
	wf := ax.NewWorkflow("wf-twice").Chain(ax.Step{Name: "a", Spec: spec}, ax.Step{Name: "b", Spec: spec})
	_, err := b.Client.SubmitWorkflow(ctx, wf)
	require.NoError(t, err)
	b.WaitState(t, wf.TaskID("b"), kv.StateSucceeded)

	again := func(id string) ax.TaskSpec { return ax.TaskSpec{ID: id, Type: "count"} }
	// The ended task released again, as the leader releases (no record at
	// submit); a new one released twice at once.
	infos, err := b.Client.SubmitBatch(ctx, []ax.TaskSpec{again(wf.TaskID("b")), again("wf-twice/c"), again("wf-twice/c")},
		ax.Released([]string{"again", "first", "second"}))
	require.NoError(t, err)
	// Each message is stored: JetStream's duplicate window took none for
	// another, so only the claim can keep the task to one run.
	for i, info := range infos {
		require.False(t, info.Duplicate, "release %d was de-duplicated by its Nats-Msg-Id", i)
	}
	require.NotEqual(t, infos[1].Sequence, infos[2].Sequence, "c's two releases are one message")
	b.WaitState(t, "wf-twice/c", kv.StateSucceeded)
	require.Eventually(t, func() bool { return w1.Stats().Dropped+w2.Stats().Dropped >= 2 }, 30*time.Second, 20*time.Millisecond,
		"the second messages were not dropped")
	time.Sleep(500 * time.Millisecond) // a late second run would show
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, map[string]int{wf.TaskID("a"): 1, wf.TaskID("b"): 1, "wf-twice/c": 1}, runs)
}
