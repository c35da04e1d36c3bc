package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// WorkflowRequest names a workflow (workflow.cancel).
type WorkflowRequest struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant,omitempty"` // default "default"
}

// WorkflowCancelReply is what workflow.cancel did, by task name.
type WorkflowCancelReply struct {
	// Cancelled are the tasks moved to CANCELLED: waiting in a bucket,
	// running (their workers told), or not released yet (a CANCELLED
	// record holds their id, so a release stores nothing).
	Cancelled []string `json:"cancelled"`
	// Ended are the tasks that had ended before (SUCCEEDED, DEAD,
	// CANCELLED), left as they are.
	Ended []string `json:"ended,omitempty"`
	// Notified counts the running tasks whose workers answered the notice.
	Notified int `json:"notified"`
}

// workflowCancel cancels every task of a workflow that has not ended.
// It reads the workflow's document, then cancels each task as task.cancel
// does, an unreleased one as task.cancel with unseen does: the leader's
// release of it then meets its CANCELLED record and stores nothing, and
// the workflow ends. Children go before their parents, so that a parent
// ending meanwhile releases nothing that could run.
func (a *Service) workflowCancel(ctx context.Context, data []byte) (any, error) {
	var req WorkflowRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if req.ID == "" {
		return nil, badRequest(`"id" is required`)
	}
	if req.Tenant == "" {
		req.Tenant = streams.DefaultTenant
	}
	if err := streams.ValidateTaskID(req.ID); err != nil {
		return nil, badRequest("workflow id: %s", err)
	}
	if err := streams.ValidateToken("tenant", req.Tenant); err != nil {
		return nil, badRequest("%s", err)
	}
	wf, err := a.workflow(ctx, req.Tenant, req.ID)
	if err != nil {
		return nil, err
	}
	reply := &WorkflowCancelReply{Cancelled: []string{}}
	for _, name := range wf.ChildrenFirst() {
		ref := kv.Ref{Tenant: req.Tenant, ID: streams.WorkflowTaskID(wf.ID, name, wf.Batch)}
		done, err := a.cancel(ctx, ref, true)
		var apiErr *Error
		switch {
		case errors.As(err, &apiErr) && apiErr.Code == CodeConflict:
			reply.Ended = append(reply.Ended, name)
		case err != nil:
			return nil, fmt.Errorf("cancel workflow %s: task %s: %w", req.ID, name, err)
		default:
			reply.Cancelled = append(reply.Cancelled, name)
			if done.Notified {
				reply.Notified++
			}
		}
	}
	a.log.Info("workflow_cancelled", zapTask(kv.Ref{Tenant: req.Tenant, ID: req.ID}))
	return reply, nil
}

// workflow reads tenant's workflow id's document.
func (a *Service) workflow(ctx context.Context, tenant, id string) (*streams.WorkflowTasks, error) {
	names := a.cfg.Names
	stream, err := a.js.Stream(ctx, names.WorkflowStream())
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", names.WorkflowStream(), err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, names.WorkflowSubject(tenant, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, notFoundf("no workflow %s of tenant %s", id, tenant)
	}
	if err != nil {
		return nil, fmt.Errorf("read workflow %s: %w", id, err)
	}
	data, err := names.WorkflowDocument(ctx, stream, msg.Sequence, msg.Subject, msg.Header, msg.Data)
	if errors.Is(err, streams.ErrWorkflowParts) {
		return nil, notFoundf("no workflow %s of tenant %s: its document was refused (nothing of it runs): %s", id, tenant, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read workflow %s: %w", id, err)
	}
	var wf streams.WorkflowTasks
	if err := json.Unmarshal(data, &wf); err != nil {
		return nil, fmt.Errorf("workflow %s: its document does not decode: %w", id, err)
	}
	return &wf, nil
}

// MaxWorkflowListLimit bounds a workflow.list page.
const MaxWorkflowListLimit = 100

// WorkflowListRequest asks for the newest workflows (workflow.list).
type WorkflowListRequest struct {
	Tenant string `json:"tenant,omitempty"` // only this tenant's; empty: every tenant's
	Limit  int    `json:"limit,omitempty"`  // default 20, at most MaxWorkflowListLimit
}

// WorkflowSummary is one workflow of workflow.list.
type WorkflowSummary struct {
	ID          string    `json:"id"`
	Tenant      string    `json:"tenant"`
	SubmittedAt time.Time `json:"submitted_at"`
	Tasks       int       `json:"tasks"`
	// State is SUCCEEDED (every task), RUNNING (a task waits in a bucket,
	// runs or retries, or is about to be released), PAUSED (RUNNING, and
	// paused by workflow.pause: it releases no further task until
	// workflow.resume), FAILED (a task is DEAD and nothing runs) or
	// CANCELLED (a task was cancelled and nothing runs).
	State string `json:"state"`
	// Paused is true while the workflow's pause mark exists
	// (workflow.pause), also after its last task ended.
	Paused bool `json:"paused,omitempty"`
	// States counts its tasks by state; WAITING: not released yet.
	States map[string]int `json:"states"`
}

// WorkflowListReply lists workflows, newest first.
type WorkflowListReply struct {
	Workflows []WorkflowSummary `json:"workflows"`
}

// workflowList reads the newest documents in AX_WORKFLOWS (atomic batches
// left out) and the states of their tasks.
func (a *Service) workflowList(ctx context.Context, data []byte) (any, error) {
	var req WorkflowListRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if req.Limit < 0 || req.Limit > MaxWorkflowListLimit {
		return nil, badRequest(`"limit" %d is outside 1..%d`, req.Limit, MaxWorkflowListLimit)
	}
	if req.Tenant != "" {
		if err := streams.ValidateToken("tenant", req.Tenant); err != nil {
			return nil, badRequest("%s", err)
		}
	}
	limit := cmp.Or(req.Limit, 20)
	names := a.cfg.Names
	stream, err := a.js.Stream(ctx, names.WorkflowStream())
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", names.WorkflowStream(), err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", names.WorkflowStream(), err)
	}
	board, err := control.Open(ctx, a.js, names)
	if err != nil {
		return nil, err
	}
	paused, err := control.PausedWorkflows(ctx, board)
	if err != nil {
		return nil, err
	}
	reply := &WorkflowListReply{Workflows: []WorkflowSummary{}}
	for seq := info.State.LastSeq; seq >= info.State.FirstSeq && seq > 0 && len(reply.Workflows) < limit; seq-- {
		msg, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s #%d: %w", names.WorkflowStream(), seq, err)
		}
		tenant, id, ok := names.ParseWorkflowSubject(msg.Subject)
		if !ok || req.Tenant != "" && tenant != req.Tenant {
			continue
		}
		data, err := names.WorkflowDocument(ctx, stream, msg.Sequence, msg.Subject, msg.Header, msg.Data)
		if errors.Is(err, streams.ErrWorkflowParts) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s #%d: %w", names.WorkflowStream(), seq, err)
		}
		if parts, err := strconv.Atoi(msg.Header.Get(streams.WorkflowPartsHeader)); err == nil {
			seq -= uint64(parts) // its parts, read and checked: not read again
		}
		var wf streams.WorkflowTasks
		if json.Unmarshal(data, &wf) != nil || wf.Batch || wf.ID != id {
			continue
		}
		sum, err := a.summarize(ctx, tenant, &wf)
		if err != nil {
			return nil, err
		}
		sum.SubmittedAt = msg.Time
		sum.Paused = paused[control.WorkflowPausedKey(tenant, id)]
		sum.State = PausedState(sum.State, sum.Paused)
		reply.Workflows = append(reply.Workflows, *sum)
	}
	return reply, nil
}

// summarize reads the state of each task of wf.
func (a *Service) summarize(ctx context.Context, tenant string, wf *streams.WorkflowTasks) (*WorkflowSummary, error) {
	sum := &WorkflowSummary{ID: wf.ID, Tenant: tenant, Tasks: len(wf.Tasks), States: map[string]int{}}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, 32) // concurrent reads, batched by the store
	for _, t := range wf.Tasks {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			rec, _, err := a.store.Get(ctx, kv.Ref{Tenant: tenant, ID: streams.WorkflowTaskID(wf.ID, t.Name, false)})
			state := "WAITING"
			switch {
			case errors.Is(err, kv.ErrNotFound):
			case err != nil:
				mu.Lock()
				first = cmp.Or(first, err)
				mu.Unlock()
				return
			default:
				state = string(rec.State)
			}
			mu.Lock()
			sum.States[state]++
			mu.Unlock()
		})
	}
	wg.Wait()
	if first != nil {
		return nil, fmt.Errorf("read workflow %s: %w", wf.ID, first)
	}
	sum.State = WorkflowState(sum.States, sum.Tasks)
	return sum, nil
}

// WorkflowState sums up a workflow's task states, counted by state name
// ("WAITING": not released yet), as [WorkflowSummary.State] does:
// SUCCEEDED, RUNNING, FAILED or CANCELLED.
func WorkflowState(states map[string]int, tasks int) string {
	moving := 0
	for _, s := range []kv.State{kv.StateReady, kv.StateRunning, kv.StateRetrying, kv.StatePending, kv.StatePaused} {
		moving += states[string(s)]
	}
	switch {
	case states[string(kv.StateSucceeded)] == tasks:
		return string(kv.StateSucceeded)
	case moving > 0:
		return "RUNNING"
	case states[string(kv.StateDead)] > 0:
		return "FAILED"
	case states[string(kv.StateCancelled)] > 0:
		return string(kv.StateCancelled)
	}
	return "RUNNING" // the rest about to be released
}

// PausedState is the state a workflow in state (as [WorkflowState] sums
// it up) is shown in when paused says whether its pause mark exists:
// PAUSED in place of RUNNING, since a paused workflow makes no progress
// until it is resumed. A workflow that has ended keeps its end.
func PausedState(state string, paused bool) string {
	if paused && state == "RUNNING" {
		return "PAUSED"
	}
	return state
}
