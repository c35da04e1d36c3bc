package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// flowSettle is how long every task of the flow storm has to end once its
// faults, actions and limits are over: a task that stepped aside for a
// limit waits up to 37.5 s in AX_DELAYED before the leader releases it.
const flowSettle = 2 * stormSettle

// Flow storm: the operator storm (its tasks, its operator scripts, its
// leader freezes and worker SIGKILLs) while a fourth script churns the
// mesh's flow control every 150-450 ms: concurrency limits on the task
// type and on tenants (from 2 to the mesh's 48 slots), rate limits on
// tenants, their removal, and short pauses of a tenant or of the type,
// every fifth through the ax CLI. Each change hands every parked
// delivery back to try the new limits, moves tasks aside for a pause or a
// full parking room, and releases them again. Then every limit is removed
// and every pause ended, and the storm's checks hold: every task
// SUCCEEDED, CANCELLED or DEAD with a reason, none lost, no two
// executions of a task overlapping, no unexplained second effect.
func TestFlowStorm(t *testing.T) {
	t.Parallel()
	s := startStorm(t)
	ids, doomed := s.submit(stormTasks)
	t.Logf("flow storm: %d tasks submitted, %d of them failing for good", len(ids), len(doomed))

	freezes, kills := s.rage(ids, doomed, s.churnFlow)
	s.clearFlow()

	final, resumed := s.settle(ids, flowSettle)
	aside := map[string]int{}
	for _, rec := range final {
		if rec == nil {
			continue
		}
		for _, action := range []string{kv.ActionSteppedAside, kv.ActionPausedAside, worker.ActionRateLimited} {
			if slices.ContainsFunc(rec.Trail, func(m kv.Move) bool { return m.Action == action }) {
				aside[action]++
			}
		}
	}
	t.Logf("flow storm: tasks whose kept trail shows a move by the flow control: %v", aside)
	s.report(ids, final, resumed, freezes, kills)
}

// flowTargets are the targets the flow script limits and pauses.
var flowTargets = []string{"probe", "tenant:t0", "tenant:t1", "tenant:t2"}

// churnFlow is the flow script: until ctx ends, a change of the limits or
// the pauses every 150-450 ms; a pause it makes it ends 0.3-1.5 s later
// (a pause of the task type holds every task).
func (s *storm) churnFlow(ctx context.Context) {
	resumes := map[admin.PauseRequest]time.Time{} // the pauses made, and when to end each
	for n := 0; ctx.Err() == nil; n++ {
		target := flowTargets[rand.IntN(len(flowTargets))]
		tenant := fmt.Sprint("t", rand.IntN(3))
		var verb string
		var req any
		var cli []string
		var due *admin.PauseRequest
		for p, at := range resumes {
			if time.Now().After(at) {
				due = &p
				break
			}
		}
		switch r := rand.IntN(100); {
		case due != nil:
			delete(resumes, *due)
			verb, req, cli = admin.VerbResume, *due, pauseArgs("resume", *due)
		case r < 40:
			c := 2 + rand.IntN(47)
			verb, req, cli = admin.VerbLimitSet, admin.LimitRequest{Target: target, Concurrency: c},
				[]string{"limit", "set", target, "--concurrency", fmt.Sprint(c)}
		case r < 60:
			rate, burst := 5+rand.IntN(96), 1+rand.IntN(20)
			target = "tenant:" + tenant
			verb, req, cli = admin.VerbLimitSet, admin.LimitRequest{Target: target, Rate: float64(rate), Burst: burst},
				[]string{"limit", "set", target, "--rate", fmt.Sprint(rate), "--burst", fmt.Sprint(burst)}
		case r < 85:
			verb, req, cli = admin.VerbLimitRemove, admin.LimitRequest{Target: target}, []string{"limit", "rm", target}
		default:
			p := admin.PauseRequest{Tenant: tenant}
			if r >= 97 {
				p = admin.PauseRequest{Type: "probe"}
			}
			verb, req, cli = admin.VerbPause, p, pauseArgs("pause", p)
			resumes[p] = time.Now().Add(time.Duration(300+rand.IntN(1201)) * time.Millisecond)
		}
		_ = s.act(ctx, n%5 == 0, verb, req, cli)
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(150+rand.IntN(301)) * time.Millisecond):
		}
	}
}

// pauseArgs are the arguments of `ax pause` or `ax resume` (command) for p.
func pauseArgs(command string, p admin.PauseRequest) []string {
	if p.Type != "" {
		return []string{command, "--type", p.Type}
	}
	return []string{command, "--tenant", p.Tenant}
}

// clearFlow removes every limit and ends every pause the flow script may
// have left (one it did not leave answers 404).
func (s *storm) clearFlow() {
	s.t.Helper()
	clear := func(verb string, req any) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := s.api.Call(ctx, verb, req, &json.RawMessage{})
		var ae *admin.Error
		if errors.As(err, &ae) && ae.Code == admin.CodeNotFound {
			err = nil
		}
		require.NoError(s.t, err, "%s %+v", verb, req)
	}
	for _, target := range flowTargets {
		clear(admin.VerbLimitRemove, admin.LimitRequest{Target: target})
	}
	for i := range 3 {
		clear(admin.VerbResume, admin.PauseRequest{Tenant: fmt.Sprint("t", i)})
	}
	clear(admin.VerbResume, admin.PauseRequest{Type: "probe"})
}
