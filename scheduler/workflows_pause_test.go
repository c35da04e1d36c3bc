package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// A paused workflow releases no further task: its running task finishes,
// and its child, due meanwhile, waits without a record until the resume,
// which releases it once (its trail says it was held). A second pause or
// resume changes nothing; a finished, cancelled or unknown workflow cannot
// be paused, with a clear error.
func TestWorkflowPauseResume(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, nil, scheduler.Config{})
	release := make(chan struct{})
	started := make(chan string, 10)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("quick", func(_ context.Context, task *worker.Task) error {
		started <- task.ID
		return nil
	}, nil))
	require.NoError(t, reg.Handle("held", func(ctx context.Context, task *worker.Task) error {
		started <- task.ID
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, nil))
	require.NoError(t, reg.Handle("block", func(ctx context.Context, task *worker.Task) error {
		started <- task.ID
		<-ctx.Done()
		return context.Cause(ctx)
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4})
	api := b.StartAdmin(t, nil)
	ctx := context.Background()
	wf := ax.NewWorkflow("wf-pause").Chain(
		ax.Step{Name: "parent", Spec: ax.TaskSpec{Type: "held"}},
		ax.Step{Name: "child", Spec: ax.TaskSpec{Type: "quick"}})
	_, err := b.Client.SubmitWorkflow(ctx, wf)
	require.NoError(t, err)
	require.Equal(t, wf.TaskID("parent"), waitStart(t, started))

	reply, err := api.PauseWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
	require.NoError(t, err)
	require.True(t, reply.Paused)
	require.True(t, reply.Changed)
	again, err := api.PauseWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
	require.NoError(t, err)
	require.True(t, again.Paused)
	require.False(t, again.Changed, "a second pause changes nothing")
	require.Equal(t, reply.PausedAt.Unix(), again.PausedAt.Unix())

	close(release) // the running parent finishes
	b.WaitState(t, wf.TaskID("parent"), kv.StateSucceeded)
	time.Sleep(1500 * time.Millisecond) // the leader's retry tick included
	_, _, err = b.Client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: wf.TaskID("child")})
	require.ErrorIs(t, err, kv.ErrNotFound, "a task of a paused workflow was released")
	select {
	case id := <-started:
		t.Fatalf("%s started while its workflow was paused", id)
	default:
	}

	resumed, err := api.ResumeWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
	require.NoError(t, err)
	require.False(t, resumed.Paused)
	require.True(t, resumed.Changed)
	require.Equal(t, wf.TaskID("child"), waitStart(t, started))
	rec := b.WaitState(t, wf.TaskID("child"), kv.StateSucceeded)
	require.Equal(t, kv.ActionRelease, rec.Trail[0].Action)
	require.Equal(t, "released by the success of parent parent; held while the workflow was paused, released at its resume", rec.Trail[0].Note)
	twice, err := api.ResumeWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
	require.NoError(t, err)
	require.False(t, twice.Changed, "a second resume changes nothing")
	time.Sleep(time.Second)
	select {
	case id := <-started:
		t.Fatalf("%s started twice", id)
	default:
	}

	// Ended: nothing to pause.
	_, err = api.PauseWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
	requireCode(t, err, admin.CodeConflict, "has ended (SUCCEEDED): nothing is left to pause")
	cancelled := ax.NewWorkflow("wf-pause-cancelled").Chain(
		ax.Step{Name: "parent", Spec: ax.TaskSpec{Type: "block"}},
		ax.Step{Name: "child", Spec: ax.TaskSpec{Type: "quick"}})
	_, err = b.Client.SubmitWorkflow(ctx, cancelled)
	require.NoError(t, err)
	require.Equal(t, cancelled.TaskID("parent"), waitStart(t, started))
	_, err = api.CancelWorkflow(ctx, admin.WorkflowRequest{ID: cancelled.ID})
	require.NoError(t, err)
	b.WaitState(t, cancelled.TaskID("parent"), kv.StateCancelled)
	_, err = api.PauseWorkflow(ctx, admin.WorkflowRequest{ID: cancelled.ID})
	requireCode(t, err, admin.CodeConflict, "has ended (CANCELLED)")
	_, err = api.PauseWorkflow(ctx, admin.WorkflowRequest{ID: "ghost"})
	requireCode(t, err, admin.CodeNotFound, "no workflow ghost")
	_, err = api.ResumeWorkflow(ctx, admin.WorkflowRequest{ID: "ghost"})
	requireCode(t, err, admin.CodeNotFound, "no workflow ghost")
}

// A pause holds across a change of leader: the new leader reads the pause
// marks before it releases anything, so a task whose parent succeeded
// while the workflow was paused (due when the new leader reads the
// workflow) waits for the resume.
func TestWorkflowPauseHoldsAcrossLeaders(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 2, nil, scheduler.Config{})
	release := make(chan struct{})
	started := make(chan string, 10)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("quick", func(_ context.Context, task *worker.Task) error {
		started <- task.ID
		return nil
	}, nil))
	require.NoError(t, reg.Handle("held", func(ctx context.Context, task *worker.Task) error {
		started <- task.ID
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4})
	api := b.StartAdmin(t, nil)
	ctx := context.Background()
	wf := ax.NewWorkflow("wf-pause-leaders").Chain(
		ax.Step{Name: "parent", Spec: ax.TaskSpec{Type: "held"}},
		ax.Step{Name: "child", Spec: ax.TaskSpec{Type: "quick"}})
	_, err := b.Client.SubmitWorkflow(ctx, wf)
	require.NoError(t, err)
	require.Equal(t, wf.TaskID("parent"), waitStart(t, started))
	_, err = api.PauseWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
	require.NoError(t, err)
	close(release)
	b.WaitState(t, wf.TaskID("parent"), kv.StateSucceeded)

	b.leader.StopRun()
	next := b.follower()
	next.WaitLeading(t)
	time.Sleep(1500 * time.Millisecond) // the new leader read the workflow, and retried
	_, _, err = b.Client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: wf.TaskID("child")})
	require.ErrorIs(t, err, kv.ErrNotFound, "the new leader released a task of a paused workflow")

	_, err = api.ResumeWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
	require.NoError(t, err)
	require.Equal(t, wf.TaskID("child"), waitStart(t, started))
	b.WaitState(t, wf.TaskID("child"), kv.StateSucceeded)
}

// waitStart returns the next task id a handler started.
func waitStart(t *testing.T, started <-chan string) string {
	t.Helper()
	select {
	case id := <-started:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("no task started")
		return ""
	}
}

// requireCode checks that err is the management API's error code with
// a message containing text.
func requireCode(t *testing.T, err error, code int, text string) {
	t.Helper()
	var apiErr *admin.Error
	require.True(t, errors.As(err, &apiErr), "want an API error, got %v", err)
	require.Equal(t, code, apiErr.Code, apiErr.Message)
	require.Contains(t, apiErr.Message, text)
}

// Attack: pause while parents finish. Twenty parents end one after the
// other around the pause (parent i runs i x 100 ms); a child whose parent
// ended after the verb answered (confirmed: the leader had seen the pause)
// is not released before the resume; those before may be; the resume
// releases every held child, and each task runs once.
func TestWorkflowPauseWhileParentsFinish(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, nil, scheduler.Config{})
	var mu sync.Mutex
	runs := map[string]int{}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("staggered", func(_ context.Context, task *worker.Task) error {
		var i int
		if _, err := fmt.Sscanf(task.ID, "wf-pause-race/p%d", &i); err == nil {
			time.Sleep(time.Duration(i) * 100 * time.Millisecond)
		}
		mu.Lock()
		runs[task.ID]++
		mu.Unlock()
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 32})
	api := b.StartAdmin(t, nil)
	ctx := context.Background()
	wf := ax.NewWorkflow("wf-pause-race")
	spec := ax.TaskSpec{Type: "staggered"}
	for i := range 20 {
		wf.Add(fmt.Sprintf("p%d", i), spec)
		wf.Add(fmt.Sprintf("c%d", i), spec, fmt.Sprintf("p%d", i))
	}
	_, err := b.Client.SubmitWorkflow(ctx, wf)
	require.NoError(t, err)
	require.Eventually(t, func() bool { // the first parents have ended
		mu.Lock()
		defer mu.Unlock()
		return len(runs) >= 3
	}, 30*time.Second, time.Millisecond)
	start := time.Now()
	reply, err := api.PauseWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
	require.NoError(t, err)
	held := time.Now() // confirmed: the leader saw the pause before the verb answered
	require.True(t, reply.Confirmed)
	t.Logf("workflow.pause answered, confirmed, after %s", held.Sub(start))
	for i := range 20 {
		b.WaitState(t, wf.TaskID(fmt.Sprintf("p%d", i)), kv.StateSucceeded)
	}
	time.Sleep(1500 * time.Millisecond) // the leader's retry tick included
	late := 0
	for i := range 20 {
		parent, _, err := b.Client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: wf.TaskID(fmt.Sprintf("p%d", i))})
		require.NoError(t, err)
		if parent.FinishedAt.Before(held) {
			continue
		}
		late++
		_, _, err = b.Client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: wf.TaskID(fmt.Sprintf("c%d", i))})
		require.ErrorIs(t, err, kv.ErrNotFound, "c%d was released while its workflow was paused", i)
	}
	require.Positive(t, late, "no parent ended after the pause answered: the test proves nothing")
	t.Logf("%d of 20 parents ended after the pause answered", late)

	_, err = api.ResumeWorkflow(ctx, admin.WorkflowRequest{ID: wf.ID})
	require.NoError(t, err)
	for i := range 20 {
		b.WaitState(t, wf.TaskID(fmt.Sprintf("c%d", i)), kv.StateSucceeded)
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, runs, 40)
	for id, n := range runs {
		require.Equal(t, 1, n, "%s ran %d times", id, n)
	}
}
