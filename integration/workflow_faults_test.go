package integration

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/require"
)

// Workflows under faults, as processes: three workflows of 194 probe tasks
// of 250 ms each (a root, 12 layers of 16 tasks each after one to three random
// tasks of the layer before, and a join after the last layer) run while the leader
// is frozen past its lease, then SIGKILLed (the standby takes over, and a
// new standby starts), and workers are SIGKILLed and replaced. Every task
// runs and succeeds, none starts before each of its parents finished, no
// two executions of a task overlap, no second effect that a failure does
// not explain, and each join runs once.
func TestWorkflowsUnderFaults(t *testing.T) {
	t.Parallel()
	s := startStorm(t)
	probe := ax.TaskSpec{Type: "probe", Payload: []byte(`{"ms":250}`), MaxAttempts: 12}
	var wfs []*ax.Workflow
	for w := range 3 {
		wfs = append(wfs, layeredWorkflow(fmt.Sprintf("faults-%d", w), probe, 12, 16))
	}
	ids := s.submitWorkflows(wfs)

	// The faults, while the workflows run.
	time.Sleep(time.Second)
	leader := s.leader()
	require.NotEmpty(t, leader)
	s.schedulers[leader].signal(t, syscall.SIGSTOP)
	time.Sleep(4 * time.Second) // twice the lease TTL: the standby takes over
	s.schedulers[leader].signal(t, syscall.SIGCONT)
	live := slices.Sorted(maps.Keys(s.workers))
	s.kill(live[0])
	s.spawn()
	time.Sleep(2 * time.Second)
	require.Less(t, s.states(ids)[kv.StateSucceeded], len(ids), "the workflows ended before the leader's kill")
	if now := s.leader(); now != "" {
		s.schedulers[now].kill(t)
		delete(s.schedulers, now)
		s.schedulers["s3"] = startAx(t, "scheduler", "--server", s.url, "--scheduler-id", "s3", "--lease-ttl", "2s", "--ack-wait", faultAckWait)
	}
	live = slices.Sorted(maps.Keys(s.workers))
	s.kill(live[len(live)-1])
	s.spawn()

	s.waitSucceeded(ids, 3*time.Minute, nil)
	effects := s.requireWorkflowRuns(wfs, ids)
	t.Logf("workflows under faults: %d tasks in 3 workflows, all SUCCEEDED after their parents; %s", len(ids), effects)
}

// A DAG of 2,000 probe tasks of 400 ms (a root, 18 layers of 111 tasks
// each after one to three random tasks of the layer before, and a join
// after the last layer) runs while workers are SIGKILLed and replaced, and
// the leader and the server are frozen together (SIGSTOP) for 6 s, three
// times the lease TTL: the server resumes first, the old leader 2 s later
// (its lease has lapsed and the standby may lead). Every task runs and
// succeeds (nothing stranded), none starts before each of its parents
// finished, no second effect that a failure does not explain, and the
// join runs once.
func TestWorkflowDAGUnderFreezes(t *testing.T) {
	t.Parallel()
	s := startStorm(t)
	// 400 ms a task: at 200 ms the DAG was seen to end (in 18.5 s, the
	// freeze included) before the last worker's kill.
	probe := ax.TaskSpec{Type: "probe", Payload: []byte(`{"ms":400}`), MaxAttempts: 12}
	wf := layeredWorkflow("dag-2000", probe, 18, 111)
	require.Len(t, wf.Tasks, 2000)
	ids := s.submitWorkflows([]*ax.Workflow{wf})

	time.Sleep(2 * time.Second)
	live := slices.Sorted(maps.Keys(s.workers))
	s.kill(live[0])
	s.spawn()
	time.Sleep(time.Second)
	leader := s.leader()
	require.NotEmpty(t, leader)
	frozenAt := s.states(ids)
	s.schedulers[leader].signal(t, syscall.SIGSTOP)
	s.dev.signal(t, syscall.SIGSTOP)
	time.Sleep(6 * time.Second)
	s.dev.signal(t, syscall.SIGCONT)
	time.Sleep(2 * time.Second)
	s.schedulers[leader].signal(t, syscall.SIGCONT)
	require.Less(t, frozenAt[kv.StateSucceeded], len(ids)/2, "the DAG was half done before the freeze: %v", frozenAt)
	time.Sleep(2 * time.Second)
	live = slices.Sorted(maps.Keys(s.workers))
	s.kill(live[len(live)-1])
	s.spawn()
	require.Less(t, s.states(ids)[kv.StateSucceeded], len(ids), "the DAG ended before the last worker's kill")

	s.waitSucceeded(ids, 4*time.Minute, nil)
	effects := s.requireWorkflowRuns([]*ax.Workflow{wf}, ids)
	t.Logf("2,000-task DAG through a 6 s freeze of the leader and the server and 2 worker kills: states at the freeze %v; all SUCCEEDED after their parents; %s",
		frozenAt, effects)
}

// layeredWorkflow returns a workflow of spec: a root, layers of width
// tasks each after one to three random tasks of the layer before, and a
// join after the last layer.
func layeredWorkflow(id string, spec ax.TaskSpec, layers, width int) *ax.Workflow {
	wf := ax.NewWorkflow(id)
	wf.Add("root", spec)
	prev := []string{"root"}
	for l := range layers {
		var layer []string
		for i := range width {
			parents := []string{prev[rand.IntN(len(prev))]}
			for range rand.IntN(3) {
				if p := prev[rand.IntN(len(prev))]; !slices.Contains(parents, p) {
					parents = append(parents, p)
				}
			}
			name := fmt.Sprintf("l%d-%d", l, i)
			wf.Add(name, spec, parents...)
			layer = append(layer, name)
		}
		prev = layer
	}
	wf.Add("join", spec, prev...)
	return wf
}

// submitWorkflows submits wfs and returns the ids of their tasks.
func (s *storm) submitWorkflows(wfs []*ax.Workflow) []string {
	s.t.Helper()
	var ids []string
	for _, wf := range wfs {
		_, err := s.client.SubmitWorkflow(context.Background(), wf)
		require.NoError(s.t, err)
		for _, task := range wf.Tasks {
			ids = append(ids, wf.TaskID(task.Name))
		}
	}
	return ids
}

// requireWorkflowRuns checks, from the probes' journals, that every task
// of wfs applied its effect once (a re-execution only where a failure
// explains it), that none started before each of its parents finished,
// and that each join ran its effect once. It returns the effects' summary.
func (s *storm) requireWorkflowRuns(wfs []*ax.Workflow, ids []string) effectCounts {
	t := s.t
	t.Helper()
	s.requireEffects(ids)
	j := s.readJournals()
	effects := j.requireOneEffect(t)
	for _, wf := range wfs {
		finished := map[string]time.Time{}
		for _, task := range wf.Tasks {
			for _, e := range j.executions[wf.TaskID(task.Name)] {
				if e.finished && e.end.After(finished[task.Name]) {
					finished[task.Name] = e.end
				}
			}
		}
		for _, task := range wf.Tasks {
			runs := j.executions[wf.TaskID(task.Name)]
			require.NotEmpty(t, runs, "%s never ran", wf.TaskID(task.Name))
			for _, p := range task.After {
				require.False(t, runs[0].start.Before(finished[p]), "%s started at %s, before its parent %s finished at %s",
					wf.TaskID(task.Name), runs[0].start, p, finished[p])
			}
		}
		n := 0
		for _, e := range j.executions[wf.TaskID("join")] {
			if e.effect {
				n++
			}
		}
		require.Equal(t, 1, n, "the join of %s ran its effect %d times", wf.ID, n)
	}
	return effects
}
