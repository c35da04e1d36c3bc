package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
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
	var wf streams.WorkflowTasks
	if err := json.Unmarshal(msg.Data, &wf); err != nil {
		return nil, fmt.Errorf("workflow %s: its document does not decode: %w", id, err)
	}
	return &wf, nil
}
