package ax

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
)

// ErrInvalidWorkflow means a workflow fails its checks; the message names
// the task and what is wrong. Nothing of it was stored.
var ErrInvalidWorkflow = errors.New("invalid workflow")

// The bounds of one workflow (docs/decisions/workflows.md).
const (
	// MaxWorkflowTasks is the most tasks one workflow holds.
	MaxWorkflowTasks = 20_000
	// MaxParents is the most parents one task waits for; a wider join is
	// a tree of joins (a [Workflow.Group] of groups).
	MaxParents = 1_000
	// MaxWorkflowBytes bounds a workflow's document (its JSON): its tasks'
	// specs, payloads included (in base64). A document larger than one
	// message is stored in parts ([Client.SubmitWorkflow]).
	MaxWorkflowBytes = streams.MaxWorkflowDocument
)

// FailurePolicy says what a workflow does with the descendants of a task
// that ended DEAD or CANCELLED.
type FailurePolicy string

const (
	// CancelDescendants releases none of them: they wait on that parent,
	// shown cancelled, until it is replayed and succeeds. The default.
	CancelDescendants FailurePolicy = "cancel"
	// ContinueDescendants releases a task once each of its parents ended,
	// however it ended.
	ContinueDescendants FailurePolicy = "continue"
)

// Step is a named task of a workflow, for [Workflow.Chain] and
// [Workflow.Group].
type Step struct {
	Name string
	Spec TaskSpec
}

// WorkflowTask is one task of a workflow: its name (unique in the
// workflow), its spec and the names of the tasks it starts after.
type WorkflowTask struct {
	Name  string   `json:"name"`
	After []string `json:"after,omitempty"`
	Spec  TaskSpec `json:"task"`
}

// Workflow is a set of named tasks with dependencies between them (a
// DAG), submitted at once and all or nothing: a task starts only after
// each of the tasks it was added after succeeded. Build it with
// [NewWorkflow] and [Workflow.Add] (or [Workflow.Chain] and
// [Workflow.Group]); a mistake (an unknown parent, a cycle, a task spec
// the submit would refuse) is reported by [Workflow.Validate] and by the
// submit, naming the task. Its JSON form is the document `ax workflow
// submit` reads.
type Workflow struct {
	// ID names the workflow in its tenant. Its tasks' ids are
	// "<ID>/<name>".
	ID string `json:"id"`
	// Tenant owns the workflow and each of its tasks. Default "default".
	Tenant string `json:"tenant,omitempty"`
	// OnFailure is what a DEAD or cancelled task does to its descendants.
	// Default [CancelDescendants].
	OnFailure FailurePolicy `json:"on_failure,omitempty"`
	// Tasks in the order they were added.
	Tasks []WorkflowTask `json:"tasks"`
	// Batch marks an atomic batch ([Atomic]): independent tasks (no
	// After), each named by its own id, which is its task id.
	Batch bool `json:"batch,omitempty"`
	// Trace is the W3C trace context ("traceparent", "tracestate") of the
	// workflow's run, which every task of it carries when released: its
	// tasks' spans are children of the span it names, one trace per
	// workflow. [Client.SubmitWorkflow] sets it from the submit's context;
	// a plain publish may set it.
	Trace map[string]string `json:"trace,omitempty"`
}

// WithTrace returns headers with the workflow's trace context added (a
// task's own trace context, if any, is replaced): the headers of a
// released task. headers itself is not changed.
func (w *Workflow) WithTrace(headers map[string]string) map[string]string {
	if len(w.Trace) == 0 {
		return headers
	}
	out := make(map[string]string, len(headers)+len(w.Trace))
	for k, v := range headers {
		if k != streams.HeaderTraceParent && k != streams.HeaderTraceState {
			out[k] = v
		}
	}
	for k, v := range w.Trace {
		out[k] = v
	}
	return out
}

// NewWorkflow returns an empty workflow named id.
func NewWorkflow(id string) *Workflow { return &Workflow{ID: id} }

// Add adds the task name, started after each task of after (added
// before or later: the order of adding does not matter).
func (w *Workflow) Add(name string, spec TaskSpec, after ...string) *Workflow {
	w.Tasks = append(w.Tasks, WorkflowTask{Name: name, After: slices.Clone(after), Spec: spec})
	return w
}

// Chain adds the steps one after the other: each starts after the one
// before it, the first after nothing.
func (w *Workflow) Chain(steps ...Step) *Workflow {
	var prev []string
	for _, s := range steps {
		w.Add(s.Name, s.Spec, prev...)
		prev = []string{s.Name}
	}
	return w
}

// Group adds the steps side by side, with no order between them; its
// [WorkflowGroup.Then] adds a task that starts after all of them.
func (w *Workflow) Group(steps ...Step) *WorkflowGroup {
	g := &WorkflowGroup{w: w}
	for _, s := range steps {
		w.Add(s.Name, s.Spec)
		g.names = append(g.names, s.Name)
	}
	return g
}

// WorkflowGroup is the steps [Workflow.Group] added.
type WorkflowGroup struct {
	w     *Workflow
	names []string
}

// Then adds the step, started once every task of the group succeeded
// (a callback, or chord), and returns the workflow.
func (g *WorkflowGroup) Then(s Step) *Workflow {
	return g.w.Add(s.Name, s.Spec, g.names...)
}

// TaskID is the id of the workflow's task name: "<workflow id>/<name>"
// (in an atomic batch, the name).
func (w *Workflow) TaskID(name string) string { return streams.WorkflowTaskID(w.ID, name, w.Batch) }

// Validate checks the workflow as a submit does, before anything is
// stored: its id, each task's name and spec, that every parent is a task
// of the workflow, that no task waits for itself through its
// descendants, and its bounds ([MaxWorkflowTasks], [MaxParents],
// [MaxWorkflowBytes]). The error matches [ErrInvalidWorkflow] and names
// the task.
func (w *Workflow) Validate() error {
	_, err := w.normalize(time.Now())
	return err
}

// normalize returns the workflow with its defaults filled in and each
// task's spec normalized, its id and tenant the workflow's.
func (w *Workflow) normalize(now time.Time) (*Workflow, error) {
	bad := func(format string, args ...any) (*Workflow, error) {
		return nil, fmt.Errorf("%w %q: %s", ErrInvalidWorkflow, w.ID, fmt.Sprintf(format, args...))
	}
	out := &Workflow{ID: w.ID, Tenant: w.Tenant, OnFailure: w.OnFailure, Batch: w.Batch, Trace: w.Trace, Tasks: make([]WorkflowTask, 0, len(w.Tasks))}
	if out.Tenant == "" {
		out.Tenant = DefaultTenant
	}
	if out.OnFailure == "" {
		out.OnFailure = CancelDescendants
	}
	if err := streams.ValidateTaskID(w.ID); err != nil {
		return bad("id: %s", err)
	}
	if strings.Contains(w.ID, "/") {
		return bad("id: contains '/', which separates the workflow's id from a task's name in the task ids")
	}
	if err := streams.ValidateToken("tenant", out.Tenant); err != nil {
		return bad("%s", err)
	}
	if out.OnFailure != CancelDescendants && out.OnFailure != ContinueDescendants {
		return bad("on_failure %q is not %q or %q", out.OnFailure, CancelDescendants, ContinueDescendants)
	}
	for name, value := range w.Trace {
		if !streams.ValidTrace(name, value) {
			return bad("trace: %q=%q is not a W3C trace context header (traceparent, tracestate) with a well-formed value", name, value)
		}
	}
	switch {
	case len(w.Tasks) == 0:
		return bad("it has no task")
	case len(w.Tasks) > MaxWorkflowTasks:
		return bad("%d tasks, more than the %d one workflow holds", len(w.Tasks), MaxWorkflowTasks)
	}
	index := make(map[string]int, len(w.Tasks))
	size := 0
	for i, t := range w.Tasks {
		if t.Name == "" {
			return bad("task %d has no name", i)
		}
		if _, dup := index[t.Name]; dup {
			return bad("task %q is added twice", t.Name)
		}
		index[t.Name] = i
		spec := t.Spec
		switch {
		case w.Batch && (spec.ID != t.Name || len(t.After) > 0):
			return bad("task %q of an atomic batch: its name is its id (%q) and it waits for no other", t.Name, spec.ID)
		case !w.Batch && spec.ID != "":
			return bad("task %q sets its id %q: a workflow names its tasks' ids (%q)", t.Name, spec.ID, w.TaskID(t.Name))
		case spec.Tenant != "" && spec.Tenant != out.Tenant:
			return bad("task %q is of tenant %q, the workflow of %q", t.Name, spec.Tenant, out.Tenant)
		}
		spec.ID, spec.Tenant = w.TaskID(t.Name), out.Tenant
		norm, err := spec.normalize(now)
		if err != nil {
			return bad("task %q: %s", t.Name, err)
		}
		if len(t.After) > MaxParents {
			return bad("task %q waits for %d tasks, more than %d: make a tree of joins", t.Name, len(t.After), MaxParents)
		}
		size += len(t.Name) + base64.StdEncoding.EncodedLen(len(norm.Payload)) + len(norm.Type) + len(norm.Key) + 64
		for _, p := range t.After {
			size += len(p) + 3
		}
		for k, v := range norm.Headers {
			size += len(k) + len(v) + 6
		}
		// The spec is kept as given (a Delay counts from the task's
		// release); its id and tenant are the workflow's.
		kept := t.Spec
		kept.Tenant = ""
		if w.Batch { // as submitted: a Delay counts from the submit
			kept = norm
			kept.Tenant = ""
		}
		out.Tasks = append(out.Tasks, WorkflowTask{Name: t.Name, After: slices.Clone(t.After), Spec: kept})
	}
	if size > MaxWorkflowBytes {
		return bad("its tasks take about %d bytes, more than the %d a workflow holds", size, MaxWorkflowBytes)
	}
	for _, t := range out.Tasks {
		seen := make(map[string]bool, len(t.After))
		for _, p := range t.After {
			switch _, ok := index[p]; {
			case p == t.Name:
				return bad("task %q waits for itself", t.Name)
			case !ok:
				return bad("task %q waits for %q, which is not a task of the workflow", t.Name, p)
			case seen[p]:
				return bad("task %q waits for %q twice", t.Name, p)
			}
			seen[p] = true
		}
	}
	if cycle := out.cycle(index); cycle != nil {
		return bad("a cycle: %s", strings.Join(cycle, " -> "))
	}
	return out, nil
}

// cycle returns the names along a cycle of tasks, each waiting for the
// next: "a -> b -> a" is a that starts after b, which starts after a. Nil
// when the workflow is a DAG.
func (w *Workflow) cycle(index map[string]int) []string {
	const (
		unseen = iota
		open
		done
	)
	mark := make([]int, len(w.Tasks))
	var path []string
	var visit func(i int) []string
	visit = func(i int) []string {
		mark[i] = open
		path = append(path, w.Tasks[i].Name)
		for _, p := range w.Tasks[i].After {
			j := index[p]
			switch mark[j] {
			case open:
				start := slices.Index(path, p)
				return append(slices.Clone(path[start:]), p)
			case unseen:
				if c := visit(j); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		mark[i] = done
		return nil
	}
	for i := range w.Tasks {
		if mark[i] == unseen {
			if c := visit(i); c != nil {
				return c
			}
		}
	}
	return nil
}
