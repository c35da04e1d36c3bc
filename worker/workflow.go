package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/ax-mesh/ax/internal/kv"
)

// ErrNotInWorkflow means a task asked for a parent's result but was not
// submitted in a workflow.
var ErrNotInWorkflow = errors.New("not a task of a workflow")

// Workflow returns the id of the workflow the task belongs to and its name
// in it, read from its id ("<workflow>/<name>"), or two empty strings for
// an id without one '/' (a task submitted alone whose id has one reads as
// a workflow's).
func (t *Task) Workflow() (id, name string) {
	id, name, ok := strings.Cut(t.ID, "/")
	if !ok || name == "" || strings.Contains(name, "/") {
		return "", ""
	}
	return id, name
}

// ParentResult reads the result of the workflow's task name (one the task
// was released after, SUCCEEDED: its record keeps the result) and decodes
// it as JSON into v, as [Task.SetResultJSON] wrote it. A nil v returns no
// error when the parent succeeded. The error wraps [ErrNotInWorkflow] when
// the task is not in a workflow, [kv.ErrNotFound] when the workflow has no
// such task (or its record expired), and says so when the parent has not
// succeeded.
func (t *Task) ParentResult(ctx context.Context, name string, v any) error {
	data, err := t.parentResult(ctx, name)
	if err != nil || v == nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("result of %s's parent %s: %w", t.ID, name, err)
	}
	return nil
}

// ParentResultBytes is [Task.ParentResult] for a result set with
// [Task.SetResult]: the bytes as they were set.
func (t *Task) ParentResultBytes(ctx context.Context, name string) ([]byte, error) {
	return t.parentResult(ctx, name)
}

func (t *Task) parentResult(ctx context.Context, name string) ([]byte, error) {
	wf, _ := t.Workflow()
	if wf == "" {
		return nil, fmt.Errorf("result of %s's parent %s: %w", t.ID, name, ErrNotInWorkflow)
	}
	if t.exec == nil {
		return nil, fmt.Errorf("result of %s's parent %s: the task was not given by a worker", t.ID, name)
	}
	ref := kv.Ref{Tenant: t.Tenant, ID: wf + "/" + name}
	rec, _, err := t.exec.rn.store.Get(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("result of %s's parent %s: %w", t.ID, name, err)
	}
	if rec.State != kv.StateSucceeded {
		return nil, fmt.Errorf("result of %s's parent %s: it is %s, not SUCCEEDED", t.ID, name, rec.State)
	}
	return rec.Result, nil
}
