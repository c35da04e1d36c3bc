package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nuid"
)

// WorkflowOptions sizes `ax bench workflow`.
type WorkflowOptions struct {
	// FanOut is the children of the fan-out's root. Default 10,000.
	FanOut int
	// Chain is the length of the chain. Default 1,000.
	Chain int
	// Only runs one part: "chain" runs wf-chain alone (no fan-out, no
	// wf-plain references); "" runs all four.
	Only string
}

// wfType is the task type of the workflow scenario's no-op handler.
const wfType = "wfnoop"

// wfTracker is what the handler of the workflow scenario saw: each task's
// runs, when its handler started and returned, and the starts that came
// before one of the task's parents had returned.
type wfTracker struct {
	mu      sync.Mutex
	runs    map[string]int
	started map[string]time.Time
	ended   map[string]bool
	parents map[string][]string // task id -> its parents' task ids
	early   int                 // a task started before a parent's handler returned
	done    counter
}

func newWFTracker() *wfTracker {
	return &wfTracker{runs: map[string]int{}, started: map[string]time.Time{}, ended: map[string]bool{}, parents: map[string][]string{}}
}

// expect registers wf's tasks and their parents.
func (k *wfTracker) expect(wf *ax.Workflow) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, t := range wf.Tasks {
		ps := make([]string, len(t.After))
		for i, p := range t.After {
			ps[i] = wf.TaskID(p)
		}
		k.parents[wf.TaskID(t.Name)] = ps
	}
}

func (k *wfTracker) handler(_ context.Context, t *worker.Task) error {
	now := time.Now()
	k.mu.Lock()
	k.runs[t.ID]++
	if k.runs[t.ID] == 1 {
		k.started[t.ID] = now
	}
	for _, p := range k.parents[t.ID] {
		if !k.ended[p] {
			k.early++
		}
	}
	k.ended[t.ID] = true
	k.mu.Unlock()
	k.done.n.Add(1)
	return nil
}

// check reports the tasks of ids that did not run exactly once, and the
// starts before a parent's end.
func (k *wfTracker) check(ids []string) (missing, duplicated, early int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, id := range ids {
		switch n := k.runs[id]; {
		case n == 0:
			missing++
		case n > 1:
			duplicated++
		}
	}
	return missing, duplicated, k.early
}

// Workflow measures the three targets of workflows (issue 39) on one
// deployment, its leader in this process:
//
//   - wf-plain: the fan-out's tasks submitted without dependencies
//     (pipelined SubmitBatch), the reference for the CPU of the fan-out;
//   - wf-plain-publish-only: the same by a publish-only client, as the
//     leader releases a workflow's tasks (the claim writes the record): the
//     second reference;
//   - wf-fanout: a root, FanOut children after it, and a fan-in back to one
//     task as a tree of joins (a task waits for at most [ax.MaxParents]: one
//     join per 1,000 children, then a last join after those): each task
//     must run once and after each of its parents; its CPU over wf-plain's,
//     divided by its edges, is the overhead per edge (cpu_us_per_edge; and
//     over wf-plain-publish-only's, cpu_us_per_edge_vs_publish_only);
//   - wf-chain: Chain tasks one after the other (an idle mesh: one task
//     runs at a time): how long it takes from the submit to the last
//     task's end, and per link how long a child started after its parent's
//     record said SUCCEEDED (the parent's finished_at against the child's
//     handler start: the p50/p99/max columns).
func Workflow(ctx context.Context, o Options, wo WorkflowOptions) ([]*Result, error) {
	if wo.FanOut <= 0 {
		wo.FanOut = 10_000
	}
	if wo.Chain <= 0 {
		wo.Chain = 1_000
	}
	if wo.Only != "" && wo.Only != "chain" {
		return nil, fmt.Errorf("workflow: --only %q: want chain, or no --only for every part", wo.Only)
	}
	r, err := newRun(ctx, o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	k := newWFTracker()
	if err := r.start(ctx, o, wfType, k.handler); err != nil {
		return nil, err
	}
	if err := r.startLeader(ctx); err != nil {
		return nil, err
	}
	if wo.Only == "chain" {
		chain, err := r.wfChain(ctx, o, k, wo.Chain)
		if err != nil {
			return nil, err
		}
		return []*Result{chain}, nil
	}
	fan := fanOutWorkflow("fan-"+nuid.Next(), wo.FanOut)
	edges := 0
	for _, t := range fan.Tasks {
		edges += len(t.After)
	}

	// The same tasks without dependencies: submitted by a client as a
	// service submits (a record at submit), and by a publish-only one (the
	// worker's claim writes the record), as the leader releases them.
	plain, err := r.wfPlain(ctx, o, k, r.client, "wf-plain", len(fan.Tasks))
	if err != nil {
		return nil, err
	}
	publishOnly, err := ax.NewClient(ctx, r.js, &ax.Config{Names: r.names, PublishOnly: true})
	if err != nil {
		return nil, err
	}
	defer func() { _ = publishOnly.Close() }()
	plainPO, err := r.wfPlain(ctx, o, k, publishOnly, "wf-plain-publish-only", len(fan.Tasks))
	if err != nil {
		return nil, err
	}

	// The fan-out and the fan-in.
	k.expect(fan)
	base := k.done.load()
	bar := startProgress(o.Progress, "workflow fan-out", len(fan.Tasks), func() int64 { return k.done.load() - base })
	before, start := r.usage(), time.Now()
	if _, err := r.client.SubmitWorkflow(ctx, fan); err != nil {
		return nil, fmt.Errorf("workflow fan-out: %w", err)
	}
	last := fan.TaskID(fan.Tasks[len(fan.Tasks)-1].Name)
	if err := waitFor(ctx, func() bool { return k.hasRun(last) && k.done.load()-base >= int64(len(fan.Tasks)) }); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	after := r.usage()
	bar.end()
	fanRes := &Result{Scenario: "wf-fanout", Concurrency: o.Concurrency, Workers: o.Workers, Sync: o.Sync}
	measure(fanRes, len(fan.Tasks), elapsed, before, after)
	ids := make([]string, len(fan.Tasks))
	for i, t := range fan.Tasks {
		ids[i] = fan.TaskID(t.Name)
	}
	missing, duplicated, early := k.check(ids)
	fanRes.Counts = map[string]int64{"children": int64(wo.FanOut), "joins": int64(len(fan.Tasks) - wo.FanOut - 1), "edges": int64(edges),
		"missing": int64(missing), "duplicated": int64(duplicated), "before_parent": int64(early)}
	perEdge := func(ref *Result) float64 {
		return (fanRes.CPUMicrosPer - ref.CPUMicrosPer) * float64(len(fan.Tasks)) / float64(edges)
	}
	fanRes.Extra = map[string]float64{"cpu_us_per_edge": perEdge(plain), "cpu_us_per_edge_vs_publish_only": perEdge(plainPO)}

	chain, err := r.wfChain(ctx, o, k, wo.Chain)
	if err != nil {
		return nil, err
	}
	return []*Result{plain, plainPO, fanRes, chain}, nil
}

// hasRun reports whether the task id's handler ran.
func (k *wfTracker) hasRun(id string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.runs[id] > 0
}

// fanOutWorkflow is a root, n children after it, one join per
// [ax.MaxParents] children and a last join after the joins.
func fanOutWorkflow(id string, n int) *ax.Workflow {
	wf := ax.NewWorkflow(id)
	spec := ax.TaskSpec{Type: wfType, Priority: ax.P2}
	wf.Add("root", spec)
	var joins, group []string
	for i := range n {
		name := fmt.Sprintf("c%d", i)
		wf.Add(name, spec, "root")
		group = append(group, name)
		if len(group) == ax.MaxParents || i == n-1 {
			join := fmt.Sprintf("j%d", len(joins))
			wf.Add(join, spec, group...)
			joins = append(joins, join)
			group = nil
		}
	}
	wf.Add("end", spec, joins...)
	return wf
}

// wfPlain runs n tasks of the workflow's type without dependencies,
// submitted by client.
func (r *run) wfPlain(ctx context.Context, o Options, k *wfTracker, client *ax.Client, name string, n int) (*Result, error) {
	base := k.done.load()
	bar := startProgress(o.Progress, name, n, func() int64 { return k.done.load() - base })
	before, start := r.usage(), time.Now()
	const chunk = 5_000
	tasks := make([]ax.TaskSpec, 0, chunk)
	for i := 0; i < n; i += chunk {
		tasks = tasks[:0]
		for range min(chunk, n-i) {
			tasks = append(tasks, ax.TaskSpec{Type: wfType, Priority: ax.P2})
		}
		if _, err := client.SubmitBatch(ctx, tasks); err != nil {
			return nil, fmt.Errorf("%s submit: %w", name, err)
		}
	}
	if err := waitFor(ctx, func() bool { return k.done.load()-base >= int64(n) }); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	after := r.usage()
	bar.end()
	res := &Result{Scenario: name, Concurrency: o.Concurrency, Workers: o.Workers, Sync: o.Sync}
	measure(res, n, elapsed, before, after)
	return res, nil
}

// wfChain runs a chain of n tasks and times it, and each link.
func (r *run) wfChain(ctx context.Context, o Options, k *wfTracker, n int) (*Result, error) {
	wf := ax.NewWorkflow("chain-" + nuid.Next())
	steps := make([]ax.Step, n)
	for i := range steps {
		steps[i] = ax.Step{Name: fmt.Sprintf("s%d", i), Spec: ax.TaskSpec{Type: wfType, Priority: ax.P2}}
	}
	wf.Chain(steps...)
	k.expect(wf)
	base := k.done.load()
	bar := startProgress(o.Progress, "workflow chain", n, func() int64 { return k.done.load() - base })
	before, start := r.usage(), time.Now()
	if _, err := r.client.SubmitWorkflow(ctx, wf); err != nil {
		return nil, fmt.Errorf("workflow chain: %w", err)
	}
	last := wf.TaskID(steps[n-1].Name)
	if err := waitFor(ctx, func() bool { return k.hasRun(last) }); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	after := r.usage()
	bar.end()
	res := &Result{Scenario: "wf-chain", Concurrency: o.Concurrency, Workers: o.Workers, Sync: o.Sync}
	measure(res, n, elapsed, before, after)
	// Each link: the child's start after its parent's SUCCEEDED record,
	// in three legs: to the child's record (its release), to its claim,
	// to its handler.
	var links, release, claim latencies
	recs := make([]*kv.Record, n)
	for i, s := range steps {
		rec, _, err := r.client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: wf.TaskID(s.Name)})
		if err != nil {
			return nil, fmt.Errorf("workflow chain: read %s: %w", s.Name, err)
		}
		if rec.State != kv.StateSucceeded || rec.FinishedAt == nil {
			return nil, fmt.Errorf("workflow chain: %s is %s", s.Name, rec.State)
		}
		recs[i] = rec
	}
	for i := 1; i < n; i++ {
		k.mu.Lock()
		started := k.started[wf.TaskID(steps[i].Name)]
		k.mu.Unlock()
		ended := *recs[i-1].FinishedAt
		links.add(started.Sub(ended))
		born := recs[i].CreatedAt
		release.add(born.Sub(ended))
		if recs[i].StartedAt != nil {
			claim.add(recs[i].StartedAt.Sub(born))
		}
	}
	links.fill(res)
	ids := make([]string, n)
	for i, s := range steps {
		ids[i] = wf.TaskID(s.Name)
	}
	missing, duplicated, early := k.check(ids)
	res.Counts = map[string]int64{"missing": int64(missing), "duplicated": int64(duplicated), "before_parent": int64(early)}
	res.Extra = map[string]float64{"link_mean_ms": float64(elapsed.Milliseconds()) / float64(n)}
	for name, l := range map[string]*latencies{"release": &release, "claim": &claim} {
		p50, p99, _ := l.percentiles()
		res.Extra[name+"_p50_ms"], res.Extra[name+"_p99_ms"] = p50, p99
	}
	return res, nil
}
