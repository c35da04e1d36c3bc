package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/metrics"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// ax_workflows counts the workflows by state as ax workflow ls shows them:
// one that runs (a task delayed), one that succeeded, one that failed (a
// task DEAD), one cancelled; an atomic batch and a plain publish the
// leader refuses are not counted; a paused one is counted as paused until
// its resume. A later scrape counts what changed
// since: a new workflow, and the failed one replayed to success.
func TestWorkflowMetrics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dep := axtest.Setup(t, axtest.Options{})
	dep.StartLeader(t, scheduler.Config{})
	api := dep.StartAdmin(t, nil)
	broken := make(chan struct{})
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("ok", func(context.Context, *worker.Task) error { return nil }, nil))
	require.NoError(t, reg.Handle("charge", func(context.Context, *worker.Task) error {
		select {
		case <-broken:
			return nil
		default:
			return worker.Permanent(errors.New("card declined"))
		}
	}, nil))
	dep.StartWorker(t, worker.Config{Registry: reg})
	client := dep.Client
	submit := func(wf *ax.Workflow) {
		t.Helper()
		_, err := client.SubmitWorkflow(ctx, wf)
		require.NoError(t, err)
	}
	ok := ax.TaskSpec{Type: "ok"}
	submit(ax.NewWorkflow("good").Chain(ax.Step{Name: "a", Spec: ok}, ax.Step{Name: "b", Spec: ok}))
	submit(ax.NewWorkflow("bad").Chain(ax.Step{Name: "a", Spec: ax.TaskSpec{Type: "charge"}}, ax.Step{Name: "b", Spec: ok}))
	submit(ax.NewWorkflow("later").Chain(ax.Step{Name: "a", Spec: ax.TaskSpec{Type: "ok", Delay: time.Hour}}, ax.Step{Name: "b", Spec: ok}))
	submit(ax.NewWorkflow("stopped").Chain(ax.Step{Name: "a", Spec: ax.TaskSpec{Type: "ok", Delay: time.Hour}}, ax.Step{Name: "b", Spec: ok}))
	_, err := client.SubmitBatch(ctx, []ax.TaskSpec{ok, ok}, ax.Atomic())
	require.NoError(t, err)
	cycle := nats.NewMsg("ax.submit.wf.default.loop.doc")
	cycle.Data = []byte(`{"id": "loop", "tasks": [{"name": "a", "task": {"type": "ok"}, "after": ["b"]}, {"name": "b", "task": {"type": "ok"}, "after": ["a"]}]}`)
	_, err = dep.JS.PublishMsg(ctx, cycle)
	require.NoError(t, err)

	dep.WaitState(t, "good/b", kv.StateSucceeded)
	dep.WaitState(t, "bad/a", kv.StateDead)
	dep.WaitState(t, "later/a", kv.StatePending)
	dep.WaitState(t, "stopped/a", kv.StatePending)
	_, err = api.CancelWorkflow(ctx, admin.WorkflowRequest{ID: "stopped"})
	require.NoError(t, err)

	m := metrics.New(&metrics.Config{JetStream: dep.JS})
	requireWorkflows(t, m, map[string]int{"running": 1, "paused": 0, "succeeded": 1, "failed": 1, "cancelled": 1})

	// Paused, the running one is counted as paused, and as running again
	// once resumed.
	_, err = api.PauseWorkflow(ctx, admin.WorkflowRequest{ID: "later"})
	require.NoError(t, err)
	requireWorkflows(t, m, map[string]int{"running": 0, "paused": 1, "succeeded": 1, "failed": 1, "cancelled": 1})
	_, err = api.ResumeWorkflow(ctx, admin.WorkflowRequest{ID: "later"})
	require.NoError(t, err)

	// Read from where it stopped: a new workflow, and the failed one
	// replayed to success.
	submit(ax.NewWorkflow("good-2").Add("a", ok))
	close(broken)
	_, err = api.Replay(ctx, admin.DLQReplayRequest{ID: "bad/a"})
	require.NoError(t, err)
	dep.WaitState(t, "good-2/a", kv.StateSucceeded)
	dep.WaitState(t, "bad/b", kv.StateSucceeded)
	requireWorkflows(t, m, map[string]int{"running": 1, "paused": 0, "succeeded": 3, "failed": 0, "cancelled": 1})
}

// requireWorkflows scrapes m and requires ax_workflows to read want.
func requireWorkflows(t *testing.T, m *metrics.Metrics, want map[string]int) {
	t.Helper()
	text := scrape(t, m)
	for state, n := range want {
		line := fmt.Sprintf(`ax_workflows{state=%q} %d`, state, n)
		require.True(t, strings.Contains(text, line+"\n"), "missing %q in:\n%s", line, grep(text, "ax_workflows"))
	}
}

// grep returns the lines of text that contain s.
func grep(text, s string) string {
	var out []string
	for line := range strings.SplitSeq(text, "\n") {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// A first scrape that cannot read every document and record within the
// scrape timeout reports no ax_workflows, and the next scrapes go on from
// where it stopped, so that the count comes however many workflows are
// kept: 300 ended workflows (chains of 10, every task CANCELLED, 3,300
// reads) under a 100 ms timeout. Red when a scrape that times out forgets
// what it read (each starts again from the first document).
func TestWorkflowsScrapeCarriesOver(t *testing.T) {
	t.Parallel()
	const workflows, tasks = 300, 10
	ctx := context.Background()
	dep := axtest.Setup(t, axtest.Options{})
	for i := range workflows {
		wf := ax.NewWorkflow(fmt.Sprintf("wf-%d", i))
		for j := range tasks {
			var after []string
			if j > 0 {
				after = []string{fmt.Sprint(j - 1)}
			}
			wf.Add(fmt.Sprint(j), ax.TaskSpec{Type: "x"}, after...)
		}
		_, err := dep.Client.SubmitWorkflow(ctx, wf)
		require.NoError(t, err)
		for j := range tasks {
			_, _, err := dep.Store.Create(ctx, &kv.Record{ID: wf.TaskID(fmt.Sprint(j)), Tenant: ax.DefaultTenant, Type: "x",
				State: kv.StateCancelled}, kv.Actor{Action: "test"})
			require.NoError(t, err)
		}
	}
	m := metrics.New(&metrics.Config{JetStream: dep.JS, ScrapeTimeout: 100 * time.Millisecond})
	require.NotContains(t, scrape(t, m), "ax_workflows{", "the first scrape read everything in 100 ms: the test proves nothing")
	scrapes := 1
	want := fmt.Sprintf(`ax_workflows{state="cancelled"} %d`, workflows) + "\n"
	for !strings.Contains(scrape(t, m), want) {
		scrapes++
		require.Less(t, scrapes, 200, "no scrape counted the workflows: each starts again")
	}
	t.Logf("%d workflows of %d tasks counted at scrape %d (timeout 100 ms each)", workflows, tasks, scrapes)
}
