package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Client calls the management API over NATS request/reply.
type Client struct {
	nc    *nats.Conn
	names streams.Names
}

// NewClient returns a client of the management API of the deployment
// names (zero: the default "ax").
func NewClient(nc *nats.Conn, names streams.Names) *Client {
	return &Client{nc: nc, names: names}
}

// Call sends req as JSON to verb and decodes the reply into resp. An error
// reply is returned as an [*Error] with its code and message.
func (c *Client) Call(ctx context.Context, verb string, req, resp any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode %s request: %w", verb, err)
	}
	subject := c.names.AdminSubject(verb)
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no ax management API answers on %s: start `ax dev` or `ax scheduler`, and check --server and --prefix: %w", subject, err)
	}
	if err != nil {
		return fmt.Errorf("call %s: %w", subject, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		n, _ := strconv.Atoi(code)
		// The body holds the whole message; the header a line of it.
		var body Error
		if json.Unmarshal(msg.Data, &body) == nil && body.Message != "" {
			return &Error{Code: n, Message: body.Message}
		}
		return &Error{Code: n, Message: msg.Header.Get(micro.ErrorHeader)}
	}
	if err := json.Unmarshal(msg.Data, resp); err != nil {
		return fmt.Errorf("decode %s reply: %w", verb, err)
	}
	return nil
}

// call sends req to verb and decodes the reply into a new R.
func call[R any](ctx context.Context, c *Client, verb string, req any) (*R, error) {
	var resp R
	if err := c.Call(ctx, verb, req, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Get reads a task's record (task.get): req.ID of req.Tenant, or of the
// one tenant with a record of it when req.Tenant is empty.
func (c *Client) Get(ctx context.Context, req TaskRequest) (*TaskReply, error) {
	return call[TaskReply](ctx, c, VerbTaskGet, req)
}

// Trail reads a task's moves, oldest first (task.trail).
func (c *Client) Trail(ctx context.Context, req TaskRequest) (*TrailReply, error) {
	return call[TrailReply](ctx, c, VerbTaskTrail, req)
}

// Cancel cancels a task (task.cancel); req.Unseen acts on a task that has no
// record yet (with req.Tenant).
func (c *Client) Cancel(ctx context.Context, req TaskRequest) (*TaskReply, error) {
	return call[TaskReply](ctx, c, VerbTaskCancel, req)
}

// Pause holds a waiting task (task.pause); req.Unseen acts on a task that
// has no record yet.
func (c *Client) Pause(ctx context.Context, req TaskRequest) (*TaskReply, error) {
	return call[TaskReply](ctx, c, VerbTaskPause, req)
}

// Resume puts a PAUSED task back in its bucket (task.resume).
func (c *Client) Resume(ctx context.Context, req TaskRequest) (*TaskReply, error) {
	return call[TaskReply](ctx, c, VerbTaskResume, req)
}

// Reprioritize moves a READY or PENDING task to another priority bucket
// (task.reprioritize).
func (c *Client) Reprioritize(ctx context.Context, req ReprioritizeRequest) (*TaskReply, error) {
	return call[TaskReply](ctx, c, VerbTaskReprioritize, req)
}

// CancelMatching cancels, or with req.DryRun counts, every task that matches
// a filter (tasks.cancel).
func (c *Client) CancelMatching(ctx context.Context, req BatchCancelRequest) (*BatchCancelReply, error) {
	return call[BatchCancelReply](ctx, c, VerbTasksCancel, req)
}

// CancelWorkflow cancels every task of a workflow that has not ended, the
// tasks not released yet included (workflow.cancel).
func (c *Client) CancelWorkflow(ctx context.Context, req WorkflowRequest) (*WorkflowCancelReply, error) {
	return call[WorkflowCancelReply](ctx, c, VerbWorkflowCancel, req)
}

// PauseWorkflow pauses a workflow: the leader releases no further task of
// it until ResumeWorkflow; its running tasks finish (workflow.pause).
func (c *Client) PauseWorkflow(ctx context.Context, req WorkflowRequest) (*WorkflowPauseReply, error) {
	return call[WorkflowPauseReply](ctx, c, VerbWorkflowPause, req)
}

// ResumeWorkflow resumes a paused workflow: the leader releases what
// became due while it was paused (workflow.resume).
func (c *Client) ResumeWorkflow(ctx context.Context, req WorkflowRequest) (*WorkflowPauseReply, error) {
	return call[WorkflowPauseReply](ctx, c, VerbWorkflowResume, req)
}

// GetWorkflow reads a workflow's graph with each task's state
// (workflow.get).
func (c *Client) GetWorkflow(ctx context.Context, req WorkflowRequest) (*WorkflowGetReply, error) {
	return call[WorkflowGetReply](ctx, c, VerbWorkflowGet, req)
}

// ListWorkflows lists the newest workflows with their tasks' states
// (workflow.list).
func (c *Client) ListWorkflows(ctx context.Context, req WorkflowListRequest) (*WorkflowListReply, error) {
	return call[WorkflowListReply](ctx, c, VerbWorkflowList, req)
}

// List lists task records matching a filter, most recently updated first
// (tasks.list).
func (c *Client) List(ctx context.Context, req TasksListRequest) (*TasksListReply, error) {
	return call[TasksListReply](ctx, c, VerbTasksList, req)
}

// ListDLQ lists dead letters, oldest first (dlq.list).
func (c *Client) ListDLQ(ctx context.Context, req DLQListRequest) (*DLQListReply, error) {
	return call[DLQListReply](ctx, c, VerbDLQList, req)
}

// Replay puts one dead task (req.ID) or the dead letters matching a filter
// back to READY (dlq.replay).
func (c *Client) Replay(ctx context.Context, req DLQReplayRequest) (*DLQReplayReply, error) {
	return call[DLQReplayReply](ctx, c, VerbDLQReplay, req)
}

// Stats describes every priority bucket and the dead-letter stream (stats).
func (c *Client) Stats(ctx context.Context, req StatsRequest) (*StatsReply, error) {
	return call[StatsReply](ctx, c, VerbStats, req)
}

// Workers lists the live workers (workers).
func (c *Client) Workers(ctx context.Context) (*WorkersReply, error) {
	return call[WorkersReply](ctx, c, VerbWorkers, struct{}{})
}

// Control lists the control bucket's entries (control), every page of
// them: the pressure report, cron jobs, the shard and pool tables, the
// deadlines of unserved types and the leader's reports (docs/WIRE.md).
func (c *Client) Control(ctx context.Context) (*ControlReply, error) {
	all := &ControlReply{Entries: []ControlEntry{}}
	req := ControlRequest{}
	for {
		page, err := call[ControlReply](ctx, c, VerbControl, req)
		if err != nil {
			return nil, err
		}
		all.Entries = append(all.Entries, page.Entries...)
		if page.Next == "" {
			return all, nil
		}
		req.After = page.Next
	}
}
