package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// WorkflowPauseReply is what workflow.pause and workflow.resume did.
type WorkflowPauseReply struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant"`
	// Paused is whether the workflow is paused now.
	Paused bool `json:"paused"`
	// Changed is false when the workflow was already so (a second pause or
	// resume changes nothing).
	Changed bool `json:"changed"`
	// PausedAt is when it was paused (while it is).
	PausedAt *time.Time `json:"paused_at,omitempty"`
}

// workflowPause marks a workflow paused in AX_CONTROL: the leader releases
// none of its tasks while the mark exists. A workflow that has ended
// (each task SUCCEEDED, or nothing runs or can run: FAILED, CANCELLED) is
// refused with a conflict; one paused already is left as it is.
func (a *Service) workflowPause(ctx context.Context, data []byte) (any, error) {
	req, err := a.workflowRequest(data)
	if err != nil {
		return nil, err
	}
	wf, err := a.workflow(ctx, req.Tenant, req.ID)
	if err != nil {
		return nil, err
	}
	board, err := control.Open(ctx, a.js, a.cfg.Names)
	if err != nil {
		return nil, err
	}
	key := control.WorkflowPausedKey(req.Tenant, req.ID)
	reply := &WorkflowPauseReply{ID: req.ID, Tenant: req.Tenant, Paused: true}
	if at, err := pausedAt(ctx, board, key); err != nil || at != nil {
		reply.PausedAt = at
		return reply, err
	}
	sum, err := a.summarize(ctx, req.Tenant, wf)
	if err != nil {
		return nil, err
	}
	if sum.State != "RUNNING" {
		return nil, conflict("workflow %s of tenant %s has ended (%s): nothing is left to pause", req.ID, req.Tenant, sum.State)
	}
	now := time.Now().UTC()
	value, err := json.Marshal(control.WorkflowPause{PausedAt: now})
	if err != nil {
		return nil, err
	}
	if _, err := board.Create(ctx, key, value); err != nil {
		if kv.IsRevisionMismatch(err) || errors.Is(err, jetstream.ErrKeyExists) { // paused meanwhile
			at, err := pausedAt(ctx, board, key)
			reply.PausedAt = at
			return reply, err
		}
		return nil, fmt.Errorf("pause workflow %s: %w", req.ID, err)
	}
	reply.Changed, reply.PausedAt = true, &now
	a.log.Info("workflow_paused", zapTask(kv.Ref{Tenant: req.Tenant, ID: req.ID}))
	return reply, nil
}

// workflowResume deletes a workflow's pause mark: the leader releases what
// became due while it was paused. A workflow not paused is left as it is.
func (a *Service) workflowResume(ctx context.Context, data []byte) (any, error) {
	req, err := a.workflowRequest(data)
	if err != nil {
		return nil, err
	}
	if _, err := a.workflow(ctx, req.Tenant, req.ID); err != nil {
		return nil, err
	}
	board, err := control.Open(ctx, a.js, a.cfg.Names)
	if err != nil {
		return nil, err
	}
	key := control.WorkflowPausedKey(req.Tenant, req.ID)
	reply := &WorkflowPauseReply{ID: req.ID, Tenant: req.Tenant}
	entry, err := board.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return reply, nil
	case err != nil:
		return nil, fmt.Errorf("resume workflow %s: %w", req.ID, err)
	}
	// Deleted at the revision read: a pause written meanwhile stays.
	if err := board.Delete(ctx, key, jetstream.LastRevision(entry.Revision())); err != nil {
		if kv.IsRevisionMismatch(err) {
			return nil, conflict("workflow %s was paused again while it was resumed: resume it again", req.ID)
		}
		return nil, fmt.Errorf("resume workflow %s: %w", req.ID, err)
	}
	reply.Changed = true
	a.log.Info("workflow_resumed", zapTask(kv.Ref{Tenant: req.Tenant, ID: req.ID}))
	return reply, nil
}

// pausedAt reads a pause mark: nil when there is none.
func pausedAt(ctx context.Context, board jetstream.KeyValue, key string) (*time.Time, error) {
	entry, err := board.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	var p control.WorkflowPause
	if err := json.Unmarshal(entry.Value(), &p); err != nil || p.PausedAt.IsZero() {
		at := entry.Created()
		return &at, nil
	}
	return &p.PausedAt, nil
}

// workflowRequest decodes and checks a request naming a workflow.
func (a *Service) workflowRequest(data []byte) (*WorkflowRequest, error) {
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
	return &req, nil
}
