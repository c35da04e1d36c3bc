package ax

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nuid"
)

// BatchOption changes how [Client.SubmitBatch] submits.
type BatchOption func(*batchOptions)

type batchOptions struct {
	atomic bool
	notes  []string
}

// Atomic makes a [Client.SubmitBatch] all or nothing: once it returns nil
// every task of the batch will run; if it returns an error (one that does
// not match [ErrMaybeStored]) none will. The tasks must be of one tenant.
// The batch is stored as one document, a workflow without dependencies
// ([Client.SubmitWorkflow]; in parts, committed at once, when it is larger
// than one message), and the leader submits its tasks at once:
// the infos carry each task's id, tenant and priority, not yet its stream
// and sequence. An invalid task refuses the whole batch, naming it.
func Atomic() BatchOption { return func(o *batchOptions) { o.atomic = true } }

// Released marks a [Client.SubmitBatch] as the release of workflow tasks
// (the leader's): each task is published without a record, as by a
// publish-only client ([Config.PublishOnly]), so that the worker whose
// claim first sees it creates its record in one write; the first move of
// that record has action "release" ([kv.ActionRelease]) and note notes[i]
// (carried in the message's Ax-Release header), which says why it was
// released (the parent whose success released it). notes must be as long
// as the batch. A task with a delay or a unique key is submitted as alone,
// with its record, whose first move has no note.
func Released(notes []string) BatchOption { return func(o *batchOptions) { o.notes = notes } }

// Validate checks task as [Client.Submit] does before anything is stored:
// its fields and this client's bounds ([Config].MaxTimeout, MaxDelay).
// The error matches [ErrInvalidTask] and says what is wrong.
func (c *Client) Validate(task TaskSpec) error {
	now := time.Now()
	t, err := task.normalize(now)
	if err == nil {
		err = c.bounds(t, now)
	}
	return err
}

// submitAtomic is [Client.SubmitBatch] with [Atomic].
func (c *Client) submitAtomic(ctx context.Context, tasks []TaskSpec) ([]TaskInfo, error) {
	if len(tasks) == 0 {
		return nil, nil
	}
	now := time.Now()
	wf := &Workflow{ID: "batch-" + nuid.Next(), Batch: true, Tasks: make([]WorkflowTask, len(tasks))}
	infos := make([]TaskInfo, len(tasks))
	for i, task := range tasks {
		t, err := task.normalize(now)
		if err == nil {
			err = c.bounds(t, now)
		}
		if err != nil {
			return nil, fmt.Errorf("atomic batch: task %d (%s): %w", i, t.ID, err)
		}
		if i == 0 {
			wf.Tenant = t.Tenant
		} else if t.Tenant != wf.Tenant {
			return nil, fmt.Errorf("atomic batch: %w: task %d is of tenant %q, task 0 of %q: an atomic batch is of one tenant", ErrInvalidTask, i, t.Tenant, wf.Tenant)
		}
		spec := task
		spec.ID = t.ID
		wf.Tasks[i] = WorkflowTask{Name: t.ID, Spec: spec}
		infos[i] = t.info(c.cfg.Names, 0, false)
	}
	info, err := c.SubmitWorkflow(ctx, wf)
	if err != nil {
		if errors.Is(err, ErrInvalidWorkflow) {
			return nil, fmt.Errorf("atomic batch: %w: %w", ErrInvalidTask, err)
		}
		return infos, fmt.Errorf("atomic batch: %w", err)
	}
	_ = info // a fresh id: never a duplicate
	return infos, nil
}
