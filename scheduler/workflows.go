package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// workflowLoop releases the tasks of workflows (docs/decisions/workflows.md):
// it reads each committed document in AX_WORKFLOWS, keeps the graph of each
// open workflow with the parents each task still waits for, follows the
// records of their tasks, and submits a task once each of its parents
// SUCCEEDED (or, with [ax.ContinueDescendants], ended). A submit is
// idempotent by the task's id ("<workflow>/<name>"): a task released twice
// (a leader change, a restart of the loop) is stored once. The loop starts
// from the documents and the records' states each time, so a new leader
// picks up where the last one stopped.
type workflowLoop struct {
	l     *Leader
	log   *zap.Logger
	runs  map[runRef]*workflowRun
	watch jetstream.KeyWatcher // the records' changes, while runs has a workflow
	// pauses follows the paused workflows' marks in AX_CONTROL, with watch;
	// paused holds them.
	pauses jetstream.KeyWatcher
	paused map[runRef]bool
	board  jetstream.KeyValue // AX_CONTROL, while pauses runs
}

// runRef names a workflow: its tenant and id.
type runRef struct{ tenant, id string }

// workflowRun is an open workflow's graph.
type workflowRun struct {
	wf    *ax.Workflow
	nodes map[string]*workflowNode
	open  int             // tasks not yet ended
	due   []*workflowNode // waiting for no parent, not submitted yet (or their submit failed)
}

// queue adds n to the tasks due for release, once.
func (r *workflowRun) queue(n *workflowNode) {
	if n.released || n.queued || n.waiting > 0 {
		return
	}
	n.queued = true
	r.due = append(r.due, n)
}

// workflowNode is one task of a workflow.
type workflowNode struct {
	task     ax.WorkflowTask
	children []*workflowNode
	waiting  int      // parents not yet done
	state    kv.State // its record's, "" while it has none
	released bool     // submitted by this loop, or found with a record
	counted  bool     // its end was counted for its children
	queued   bool     // in its run's due list
	// note is why it is released, for its record's first move.
	note string
	// held is set when the task came due while its workflow was paused.
	held bool
}

func newWorkflowLoop(l *Leader) *workflowLoop {
	return &workflowLoop{l: l, log: l.log.Named("workflows"), runs: map[runRef]*workflowRun{}}
}

func (w *workflowLoop) run(ctx context.Context) error {
	names := w.l.cfg.Names
	stream, err := w.l.js.Stream(ctx, names.WorkflowStream())
	for errors.Is(err, jetstream.ErrStreamNotFound) {
		// A deployment provisioned before workflows: nothing to release
		// until ax provision creates the stream.
		w.log.Warn("workflows_unavailable", zap.String("stream", names.WorkflowStream()),
			zap.String("hint", "provision the deployment (ax provision) to run workflows"))
		sleep(ctx, 30*time.Second)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		stream, err = w.l.js.Stream(ctx, names.WorkflowStream())
	}
	if err != nil {
		return fmt.Errorf("workflows: bind %s: %w", names.WorkflowStream(), err)
	}
	defer w.unwatch()
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{names.WorkflowFilter()}})
	if err != nil {
		return fmt.Errorf("workflows: read %s: %w", names.WorkflowStream(), err)
	}
	docs, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("workflows: read %s: %w", names.WorkflowStream(), err)
	}
	defer docs.Stop()
	incoming := make(chan jetstream.Msg)
	failed := make(chan error, 1)
	go func() {
		for {
			msg, err := docs.Next()
			if err != nil {
				if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					failed <- err
				}
				return
			}
			select {
			case incoming <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-retry.C: // a release that failed is made again
			for ref, run := range w.runs {
				w.release(ctx, ref.tenant, run)
				w.forgetBatch(ref, run)
			}
		case err := <-failed:
			return fmt.Errorf("workflows: read documents: %w", err)
		case msg := <-incoming:
			if err := w.open(ctx, msg); err != nil {
				return err
			}
		case entry, ok := <-w.updates():
			if !ok {
				return errors.New("workflows: task watch closed")
			}
			if entry != nil {
				w.observe(ctx, entry)
			}
		case entry, ok := <-w.pauseUpdates():
			if !ok {
				return errors.New("workflows: pause watch closed")
			}
			if entry != nil {
				w.pause(ctx, entry)
			}
		}
		if len(w.runs) == 0 {
			w.unwatch() // nothing to follow: no record's change costs the leader anything
		}
	}
}

// updates is the record watch's channel; nil (never ready) without one.
func (w *workflowLoop) updates() <-chan jetstream.KeyValueEntry {
	if w.watch == nil {
		return nil
	}
	return w.watch.Updates()
}

// pauseUpdates is the pause watch's channel; nil (never ready) without one.
func (w *workflowLoop) pauseUpdates() <-chan jetstream.KeyValueEntry {
	if w.pauses == nil {
		return nil
	}
	return w.pauses.Updates()
}

// follow starts the record watch and the pause watch if they are not
// running. They start before a workflow's records are read, so that no
// state written after one is read is missed; the pause marks are read
// before follow returns, so that no task of a paused workflow is released.
func (w *workflowLoop) follow(ctx context.Context) error {
	if w.watch != nil {
		return nil
	}
	board, err := control.Open(ctx, w.l.js, w.l.cfg.Names)
	if err != nil {
		return fmt.Errorf("workflows: %w", err)
	}
	pauses, err := board.Watch(ctx, control.WorkflowPausedPrefix+">")
	if err != nil {
		return fmt.Errorf("workflows: watch the paused workflows: %w", err)
	}
	w.paused = map[runRef]bool{}
	for entry := range pauses.Updates() { // the marks there are, then nil
		if entry == nil {
			break
		}
		w.notePause(entry)
		w.confirmPause(ctx, board, entry)
	}
	if ctx.Err() != nil {
		_ = kv.StopWatch(pauses)
		return ctx.Err()
	}
	watch, err := w.l.store.Bucket().WatchAll(ctx, jetstream.UpdatesOnly())
	if err != nil {
		_ = kv.StopWatch(pauses)
		return fmt.Errorf("workflows: watch tasks: %w", err)
	}
	w.watch, w.pauses, w.board = watch, pauses, board
	return nil
}

func (w *workflowLoop) unwatch() {
	if w.watch != nil {
		_ = kv.StopWatch(w.watch)
		w.watch = nil
	}
	if w.pauses != nil {
		_ = kv.StopWatch(w.pauses)
		w.pauses, w.paused = nil, nil
	}
}

// notePause applies a pause mark's change to the paused set; it reports
// the workflow and whether it was resumed.
func (w *workflowLoop) notePause(entry jetstream.KeyValueEntry) (runRef, bool) {
	tenant, id, ok := control.ParseWorkflowPausedKey(entry.Key())
	if !ok {
		return runRef{}, false
	}
	ref := runRef{tenant, id}
	if entry.Operation() == jetstream.KeyValuePut {
		if !w.paused[ref] { // not again for the leader's own confirmation
			w.log.Info("workflow_paused", zap.String("tenant", tenant), zap.String("workflow", id))
		}
		w.paused[ref] = true
		return ref, false
	}
	delete(w.paused, ref)
	w.log.Info("workflow_resumed", zap.String("tenant", tenant), zap.String("workflow", id))
	return ref, true
}

// pause applies a pause mark's change; a resumed workflow releases what
// became due while it was paused.
func (w *workflowLoop) pause(ctx context.Context, entry jetstream.KeyValueEntry) {
	ref, resumed := w.notePause(entry)
	w.confirmPause(ctx, w.board, entry)
	if run := w.runs[ref]; resumed && run != nil {
		w.release(ctx, ref.tenant, run)
	}
}

// open reads a workflow's document, the states of its tasks' records, and
// releases what may run. It fails when the record watch cannot start or
// a document's parts cannot be read.
func (w *workflowLoop) open(ctx context.Context, msg jetstream.Msg) error {
	tenant, id, ok := w.l.cfg.Names.ParseWorkflowSubject(msg.Subject())
	if !ok {
		return nil
	}
	ref := runRef{tenant, id}
	if _, seen := w.runs[ref]; seen {
		return nil
	}
	data, err := w.document(ctx, msg)
	if err != nil && !errors.Is(err, streams.ErrWorkflowParts) {
		return err // read again when the loop starts again
	}
	var wf ax.Workflow
	if err == nil {
		err = json.Unmarshal(data, &wf)
	}
	if wf.Tenant == "" { // a plain publish may leave its tenant to the subject's
		wf.Tenant = tenant
	}
	if err != nil || wf.ID != id || wf.Tenant != tenant || wf.Validate() != nil {
		// A plain publish that is not a valid workflow of the subject's
		// tenant and id: nothing of it runs.
		w.log.Warn("workflow_refused", zap.String("tenant", tenant), zap.String("workflow", id), zap.Error(workflowError(err, &wf, tenant, id)))
		return nil
	}
	run := &workflowRun{wf: &wf, nodes: make(map[string]*workflowNode, len(wf.Tasks)), open: len(wf.Tasks)}
	for _, t := range wf.Tasks {
		run.nodes[t.Name] = &workflowNode{task: t, waiting: len(t.After)}
	}
	for _, n := range run.nodes {
		for _, p := range n.task.After {
			run.nodes[p].children = append(run.nodes[p].children, n)
		}
	}
	if err := w.follow(ctx); err != nil {
		return err
	}
	if err := w.readStates(ctx, tenant, run); err != nil {
		// Read again when the loop starts again.
		return fmt.Errorf("workflows: read the records of %s (tenant %s): %w", id, tenant, err)
	}
	for _, n := range run.nodes {
		if state := n.state; state != "" {
			n.state = ""
			w.ended(run, n, state)
		}
	}
	for _, n := range run.nodes { // not released by a change seen live
		switch {
		case len(n.task.After) == 0:
			n.note = "released by the workflow's start"
			if run.wf.Batch {
				n.note = "released by the atomic batch's commit"
			}
		default:
			n.note = fmt.Sprintf("released when the leader read the workflow: each of its %d parents had ended", len(n.task.After))
		}
	}
	if run.open == 0 {
		return nil // ended before
	}
	for _, n := range run.nodes {
		run.queue(n) // the roots, and those whose parents ended before
	}
	w.runs[ref] = run
	w.release(ctx, tenant, run)
	w.forgetBatch(ref, run)
	return nil
}

// forgetBatch stops following an atomic batch once each of its tasks is
// submitted: its tasks wait for nothing, and nothing waits for them.
func (w *workflowLoop) forgetBatch(ref runRef, run *workflowRun) {
	if !run.wf.Batch {
		return
	}
	if len(run.due) == 0 { // each task waits for nothing: all submitted
		delete(w.runs, ref)
	}
}

// workflowError says why a document was refused.
func workflowError(decode error, wf *ax.Workflow, tenant, id string) error {
	switch {
	case decode != nil:
		return decode
	case wf.ID != id || wf.Tenant != tenant:
		return fmt.Errorf("the document names workflow %q of tenant %q, its subject %q of %q", wf.ID, wf.Tenant, id, tenant)
	}
	return wf.Validate()
}

// readStates reads the record of each task of run, concurrently (the store
// batches the reads).
func (w *workflowLoop) readStates(ctx context.Context, tenant string, run *workflowRun) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, 64)
	for _, n := range run.nodes {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rec, _, err := w.l.store.Get(ctx, kv.Ref{Tenant: tenant, ID: run.wf.TaskID(n.task.Name)})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, kv.ErrNotFound):
			case err != nil:
				if first == nil {
					first = err
				}
			default:
				n.state, n.released = rec.State, true
			}
		})
	}
	wg.Wait()
	return first
}

// observe applies a task record's change to its workflow.
func (w *workflowLoop) observe(ctx context.Context, entry jetstream.KeyValueEntry) {
	if len(w.runs) == 0 || entry.Operation() != jetstream.KeyValuePut || !strings.Contains(entry.Key(), "/") {
		return
	}
	ref, err := kv.ParseKey(entry.Key())
	if err != nil {
		return
	}
	wfID, name, ok := strings.Cut(ref.ID, "/")
	if !ok {
		return
	}
	run := w.runs[runRef{ref.Tenant, wfID}]
	if run == nil {
		return
	}
	n := run.nodes[name]
	if n == nil {
		return
	}
	var rec kv.Record
	if rec.UnmarshalJSON(entry.Value()) != nil || rec.ID != ref.ID || rec.Tenant != ref.Tenant {
		return
	}
	n.released = true
	if n.state == rec.State {
		return
	}
	w.ended(run, n, rec.State)
	w.release(ctx, ref.Tenant, run)
	if run.open == 0 {
		delete(w.runs, runRef{ref.Tenant, wfID})
		w.log.Info("workflow_ended", zap.String("tenant", ref.Tenant), zap.String("workflow", wfID))
	}
}

// ended notes n's new state. A task that ended counts for its children
// once: when it SUCCEEDED, or ended at all with ContinueDescendants. A
// task replayed from DEAD is open again, and counts for its children when
// it succeeds.
func (w *workflowLoop) ended(run *workflowRun, n *workflowNode, state kv.State) {
	was := done(n.state)
	n.state = state
	switch now := done(state); {
	case now && !was:
		run.open--
	case !now && was:
		run.open++
	}
	if n.counted || !done(state) || state != kv.StateSucceeded && run.wf.OnFailure != ax.ContinueDescendants {
		return
	}
	n.counted = true
	for _, c := range n.children {
		c.waiting--
		if c.waiting == 0 {
			c.note = releaseNote(n, c, state)
		}
		run.queue(c)
	}
}

// releaseNote says that parent, which ended in state, released child.
func releaseNote(parent, child *workflowNode, state kv.State) string {
	note := "released by the success of parent " + parent.task.Name
	if state != kv.StateSucceeded {
		note = fmt.Sprintf("released by the end of parent %s (%s; the workflow's on_failure is continue)", parent.task.Name, state)
	}
	if k := len(child.task.After); k > 1 {
		note += fmt.Sprintf(", the last of its %d parents", k)
	}
	return note
}

// done reports whether a task in state s has ended for its children.
func done(s kv.State) bool {
	return s == kv.StateSucceeded || s == kv.StateDead || s == kv.StateCancelled
}

// release submits the tasks of run that are due (a record change queues
// the children it frees: no pass over the whole graph); those whose submit
// failed stay due.
func (w *workflowLoop) release(ctx context.Context, tenant string, run *workflowRun) {
	if w.paused[runRef{tenant, run.wf.ID}] {
		for _, n := range run.due {
			n.held = true // it stays due: released at the resume
		}
		return
	}
	var specs []ax.TaskSpec
	var nodes []*workflowNode
	var notes []string
	for _, n := range run.due {
		if n.released {
			n.queued = false
			continue
		}
		spec := n.task.Spec
		spec.ID, spec.Tenant = run.wf.TaskID(n.task.Name), tenant
		spec.Headers = run.wf.WithTrace(spec.Headers) // one trace per workflow run
		specs = append(specs, spec)
		nodes = append(nodes, n)
		note := n.note
		if n.held {
			note += "; held while the workflow was paused, released at its resume"
		}
		notes = append(notes, note)
	}
	run.due = run.due[:0]
	if len(specs) == 0 {
		return
	}
	// Released: no record at submit, the claim writes it (one write less
	// on the way from a parent's end to its child's start).
	_, err := w.l.client.SubmitBatch(ctx, specs, ax.Released(notes))
	var batch *ax.BatchError
	for i, n := range nodes {
		switch {
		case err == nil || errors.As(err, &batch) && batch.Failed[i] == nil:
			n.released = true
		case batch != nil && errors.Is(batch.Failed[i], ax.ErrInvalidTask):
			// Refused for what it is now (its deadline passed while it
			// waited): it will never run, and is not tried again.
			n.released = true
			w.log.Warn("workflow_task_unreleasable", zap.String("tenant", tenant), zap.String("task_id", specs[i].ID), zap.Error(batch.Failed[i]))
		}
		if n.released {
			n.queued = false
		} else {
			run.due = append(run.due, n) // tried again at the next tick
		}
	}
	if err != nil {
		w.log.Warn("workflow_release_failed", zap.String("tenant", tenant), zap.String("workflow", run.wf.ID), zap.Error(err))
	}
}
