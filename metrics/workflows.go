package metrics

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// workflowStates are the values of ax_workflows' state label, each
// reported (0 included) at every scrape that read the workflows.
var workflowStates = []string{"running", "paused", "succeeded", "failed", "cancelled"}

// workflowsCollector counts the workflows kept in AX_WORKFLOWS by state
// (admin.WorkflowState, and admin.PausedState for those paused), at
// scrape time. It reads each document once
// (from the sequence it stopped at), forgets those the stream no longer
// keeps, and reads again only the records of tasks that have not reached
// a state they never leave (SUCCEEDED, CANCELLED). Atomic batches and
// documents the leader refuses (not a valid workflow of their subject's
// tenant and id) are not counted.
type workflowsCollector struct {
	js      jetstream.JetStream
	names   streams.Names
	timeout time.Duration
	desc    *prometheus.Desc

	mu    sync.Mutex
	store *kv.Store                    // opened at the first scrape (mu)
	next  uint64                       // the next document's sequence (mu)
	runs  map[uint64]*workflowCounting // by document sequence (mu)
}

// workflowCounting is what the collector keeps of one workflow; of one
// whose every task is SUCCEEDED or CANCELLED, only its state.
type workflowCounting struct {
	tenant  string
	id      string
	ids     []string   // its tasks' ids
	parents [][]int    // each task's parents, by index
	states  []kv.State // the last read of each ("": no record yet)
	state   string     // admin.WorkflowState of the last read
}

// mayChange reports whether task i's record may have changed since it was
// read: not if it is SUCCEEDED or CANCELLED (states never left), nor if
// it has no record and a parent has not ended (the leader has not
// released it; a workflow.cancel ends its parents too).
func (w *workflowCounting) mayChange(i int) bool {
	switch w.states[i] {
	case kv.StateSucceeded, kv.StateCancelled:
		return false
	case "":
		for _, p := range w.parents[i] {
			if s := w.states[p]; s != kv.StateSucceeded && s != kv.StateDead && s != kv.StateCancelled {
				return false
			}
		}
	}
	return true
}

func newWorkflowsCollector(js jetstream.JetStream, names streams.Names, timeout time.Duration) *workflowsCollector {
	return &workflowsCollector{js: js, names: names, timeout: timeout, runs: map[uint64]*workflowCounting{},
		desc: prometheus.NewDesc("ax_workflows", "Workflows kept in AX_WORKFLOWS by state (running, paused, succeeded, failed, cancelled; as ax workflow ls shows them), read at scrape time; atomic batches are not counted.",
			[]string{"state"}, nil)}
}

// Describe implements [prometheus.Collector].
func (c *workflowsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements [prometheus.Collector]. A scrape that cannot read
// every document and record in time reports nothing (the next one goes on
// from where it stopped).
func (c *workflowsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	counts, err := c.count(ctx)
	if err != nil {
		return
	}
	for _, s := range workflowStates {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[s]), s)
	}
}

// count reads what changed and counts the workflows by state. c.mu must
// be held.
func (c *workflowsCollector) count(ctx context.Context) (map[string]int, error) {
	if c.store == nil {
		store, err := kv.NewStore(ctx, c.js, &kv.StoreConfig{Names: c.names})
		if err != nil {
			return nil, err
		}
		c.store = store
	}
	stream, err := c.js.Stream(ctx, c.names.WorkflowStream())
	if err != nil {
		return nil, err
	}
	state := stream.CachedInfo().State
	for seq := range c.runs {
		if seq < state.FirstSeq {
			delete(c.runs, seq) // the stream no longer keeps it
		}
	}
	c.next = max(c.next, state.FirstSeq, 1)
	for ; c.next <= state.LastSeq; c.next++ {
		msg, err := stream.GetMsg(ctx, c.next)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if run := c.document(msg); run != nil {
			c.runs[c.next] = run
		}
	}
	if err := c.readStates(ctx); err != nil {
		return nil, err
	}
	paused, err := c.paused(ctx)
	if err != nil {
		return nil, err
	}
	counts := map[string]int{}
	for _, run := range c.runs {
		state := admin.PausedState(run.state, paused[control.WorkflowPausedKey(run.tenant, run.id)])
		counts[strings.ToLower(state)]++
	}
	return counts, nil
}

// paused lists the paused workflows' marks (one listing, whatever their
// count) when a workflow runs: only a RUNNING one is shown PAUSED, so a
// deployment with none running pays nothing for it. c.mu must be held.
func (c *workflowsCollector) paused(ctx context.Context) (map[string]bool, error) {
	running := false
	for _, run := range c.runs {
		running = running || run.state == "RUNNING"
	}
	if !running {
		return nil, nil
	}
	board, err := control.Open(ctx, c.js, c.names)
	if err != nil {
		return nil, err
	}
	return control.PausedWorkflows(ctx, board)
}

// document returns what is counted of a stored document, nil for one the
// leader does not run (or an atomic batch).
func (c *workflowsCollector) document(msg *jetstream.RawStreamMsg) *workflowCounting {
	tenant, id, ok := c.names.ParseWorkflowSubject(msg.Subject)
	if !ok {
		return nil
	}
	var wf ax.Workflow
	if json.Unmarshal(msg.Data, &wf) != nil || wf.Batch {
		return nil
	}
	if wf.Tenant == "" {
		wf.Tenant = tenant
	}
	if wf.ID != id || wf.Tenant != tenant || wf.Validate() != nil {
		return nil
	}
	run := &workflowCounting{tenant: tenant, id: id, ids: make([]string, len(wf.Tasks)), parents: make([][]int, len(wf.Tasks)),
		states: make([]kv.State, len(wf.Tasks))}
	index := make(map[string]int, len(wf.Tasks))
	for i, t := range wf.Tasks {
		run.ids[i] = wf.TaskID(t.Name)
		index[t.Name] = i
	}
	for i, t := range wf.Tasks {
		for _, p := range t.After {
			run.parents[i] = append(run.parents[i], index[p])
		}
	}
	return run
}

// readStates reads, concurrently, the record of each task that may have
// changed (workflowCounting.mayChange), in waves: a task whose parents a
// wave found ended is read in the next. It then sums up each workflow.
// c.mu must be held.
func (c *workflowsCollector) readStates(ctx context.Context) error {
	type task struct {
		run *workflowCounting
		i   int
	}
	read := map[task]bool{}
	for {
		var wave []task
		for _, run := range c.runs {
			for i := range run.ids {
				if t := (task{run, i}); !read[t] && run.mayChange(i) {
					wave = append(wave, t)
					read[t] = true
				}
			}
		}
		if len(wave) == 0 {
			break
		}
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			first error
		)
		sem := make(chan struct{}, 32) // concurrent reads, batched by the store
		for _, t := range wave {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				rec, _, err := c.store.Get(ctx, kv.Ref{Tenant: t.run.tenant, ID: t.run.ids[t.i]})
				switch {
				case errors.Is(err, kv.ErrNotFound):
					t.run.states[t.i] = ""
				case err != nil:
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
				default:
					t.run.states[t.i] = rec.State
				}
			})
		}
		wg.Wait()
		if first != nil {
			return first
		}
	}
	for _, run := range c.runs {
		if run.ids == nil {
			continue // ended for good: its state is kept, nothing else
		}
		counts := make(map[string]int, 4)
		for _, s := range run.states {
			if s == "" {
				counts["WAITING"]++
			} else {
				counts[string(s)]++
			}
		}
		run.state = admin.WorkflowState(counts, len(run.ids))
		if counts[string(kv.StateSucceeded)]+counts[string(kv.StateCancelled)] == len(run.ids) {
			run.ids, run.parents, run.states = nil, nil, nil // no task of it changes again
		}
	}
	return nil
}
