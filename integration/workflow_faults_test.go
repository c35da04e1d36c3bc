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
	"github.com/ax-mesh/ax/kv"
	"github.com/stretchr/testify/require"
)

// Workflows under faults, as processes: three workflows of 194 probe tasks
// of 250 ms each (a root, 12 layers of 16 tasks each after two random
// tasks of the layer before, and a join after the last layer) run while the leader
// is frozen past its lease, then SIGKILLed (the standby takes over, and a
// new standby starts), and workers are SIGKILLed and replaced. Every task
// runs and succeeds, none starts before each of its parents finished, no
// two executions of a task overlap, no second effect that a failure does
// not explain, and each join runs once.
func TestWorkflowsUnderFaults(t *testing.T) {
	t.Parallel()
	s := startStorm(t)
	ctx := context.Background()
	probe := ax.TaskSpec{Type: "probe", Payload: []byte(`{"ms":250}`), MaxAttempts: 12}
	const layers, width = 12, 16
	var wfs []*ax.Workflow
	for w := range 3 {
		wf := ax.NewWorkflow(fmt.Sprintf("faults-%d", w))
		wf.Add("root", probe)
		prev := []string{"root"}
		for l := range layers {
			var layer []string
			for i := range width {
				a, b := prev[rand.IntN(len(prev))], prev[rand.IntN(len(prev))]
				parents := []string{a}
				if b != a {
					parents = append(parents, b)
				}
				name := fmt.Sprintf("l%d-%d", l, i)
				wf.Add(name, probe, parents...)
				layer = append(layer, name)
			}
			prev = layer
		}
		wf.Add("join", probe, prev...)
		_, err := s.client.SubmitWorkflow(ctx, wf)
		require.NoError(t, err)
		wfs = append(wfs, wf)
	}
	var ids []string
	for _, wf := range wfs {
		for _, task := range wf.Tasks {
			ids = append(ids, wf.TaskID(task.Name))
		}
	}

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
	t.Logf("workflows under faults: %d tasks in 3 workflows, all SUCCEEDED after their parents; %s", len(ids), effects)
}
