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
	// Confirmed (workflow.pause) is true once the leader has seen the
	// pause: no release of the workflow was under way then, and none
	// follows until the resume, so its tasks released before (in a
	// bucket, running; some still WAITING in workflow.get until a worker
	// claims their message) are all that run meanwhile. False when no
	// leader confirmed it within [Config].PauseSeenTimeout (no leader, or
	// one busy or cut off): a release it had begun may still go out, and
	// a pause again says whether it has been seen since.
	Confirmed bool `json:"confirmed,omitempty"`
}

// workflowPause marks a workflow paused in AX_CONTROL: the leader releases
// none of its tasks while the mark exists. It then waits, up to
// PauseSeenTimeout, for the leader to confirm it saw the mark
// (WorkflowPauseReply.Confirmed). A workflow that has ended (each task
// SUCCEEDED, or nothing runs or can run: FAILED, CANCELLED) is refused
// with a conflict; one paused already is left as it is.
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
	if pause, err := readPause(ctx, board, key); err != nil || pause != nil {
		return a.pausedAlready(ctx, board, key, reply, pause, err)
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
			pause, err := readPause(ctx, board, key)
			return a.pausedAlready(ctx, board, key, reply, pause, err)
		}
		return nil, fmt.Errorf("pause workflow %s: %w", req.ID, err)
	}
	reply.Changed, reply.PausedAt = true, &now
	a.log.Info("workflow_paused", zapTask(kv.Ref{Tenant: req.Tenant, ID: req.ID}))
	reply.Confirmed = a.pauseSeen(ctx, board, key)
	return reply, nil
}

// pausedAlready answers a pause of a workflow whose mark exists (pause,
// nil if it went meanwhile), waiting for the leader's confirmation as a
// first pause does.
func (a *Service) pausedAlready(ctx context.Context, board jetstream.KeyValue, key string, reply *WorkflowPauseReply, pause *control.WorkflowPause, err error) (*WorkflowPauseReply, error) {
	if err != nil {
		return nil, err
	}
	if pause == nil { // resumed meanwhile
		reply.Paused = false
		return reply, nil
	}
	reply.PausedAt = &pause.PausedAt
	reply.Confirmed = pause.SeenAt != nil || a.pauseSeen(ctx, board, key)
	return reply, nil
}

// pauseSeen waits, up to PauseSeenTimeout, until the leader confirms the
// pause mark key (control.WorkflowPause.SeenAt); false when it did not,
// or the mark went (resumed).
func (a *Service) pauseSeen(ctx context.Context, board jetstream.KeyValue, key string) bool {
	ctx, cancel := context.WithTimeout(ctx, a.cfg.PauseSeenTimeout)
	defer cancel()
	watch, err := board.Watch(ctx, key)
	if err != nil {
		return false
	}
	defer func() { _ = kv.StopWatch(watch) }()
	for {
		select {
		case entry, ok := <-watch.Updates():
			switch {
			case !ok:
				return false
			case entry == nil: // the current value was read: wait for updates
			case entry.Operation() != jetstream.KeyValuePut:
				return false
			default:
				var pause control.WorkflowPause
				if json.Unmarshal(entry.Value(), &pause) == nil && pause.SeenAt != nil {
					return true
				}
			}
		case <-ctx.Done():
			return false
		}
	}
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
	var first *time.Time // the pause read first
	for try := 0; ; try++ {
		entry, err := board.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			return reply, nil
		case err != nil:
			return nil, fmt.Errorf("resume workflow %s: %w", req.ID, err)
		}
		at := pauseOf(entry).PausedAt
		if first != nil && !at.Equal(*first) || try == 3 {
			return nil, conflict("workflow %s was paused again while it was resumed: resume it again", req.ID)
		}
		first = &at
		// Deleted at the revision read: a pause written meanwhile stays. The
		// leader's confirmation of the same pause is read again, and deleted.
		err = board.Delete(ctx, key, jetstream.LastRevision(entry.Revision()))
		if err == nil {
			break
		}
		if !kv.IsRevisionMismatch(err) {
			return nil, fmt.Errorf("resume workflow %s: %w", req.ID, err)
		}
	}
	reply.Changed = true
	a.log.Info("workflow_resumed", zapTask(kv.Ref{Tenant: req.Tenant, ID: req.ID}))
	return reply, nil
}

// readPause reads a pause mark: nil when there is none.
func readPause(ctx context.Context, board jetstream.KeyValue, key string) (*control.WorkflowPause, error) {
	entry, err := board.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return pauseOf(entry), nil
}

// pauseOf decodes a pause mark; one written by hand is paused when it was
// written, not seen.
func pauseOf(entry jetstream.KeyValueEntry) *control.WorkflowPause {
	var p control.WorkflowPause
	if err := json.Unmarshal(entry.Value(), &p); err != nil || p.PausedAt.IsZero() {
		return &control.WorkflowPause{PausedAt: entry.Created()}
	}
	return &p
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
