package ax

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/ax-mesh/ax/axtype"
)

// Args is the payload of one task type: Kind names the type and the
// value's JSON form is the payload. It is [axtype.Args], which a worker
// registers with worker.HandleArgs.
type Args = axtype.Args

// SpecOf returns the task of args: type args.Kind(), payload args' JSON
// form, every other field from opts (nil: the defaults). opts must name no
// other Type and no Payload.
func SpecOf(args Args, opts *TaskSpec) (TaskSpec, error) {
	var t TaskSpec
	if opts != nil {
		t = *opts
	}
	kind := args.Kind()
	if t.Type != "" && t.Type != kind {
		return t, fmt.Errorf("%w: Type %q is not the args' kind %q", ErrInvalidTask, t.Type, kind)
	}
	if t.Payload != nil {
		return t, fmt.Errorf("%w: Payload is set: the args are the payload", ErrInvalidTask)
	}
	payload, err := json.Marshal(args)
	if err != nil {
		return t, fmt.Errorf("%w: encode %s args: %w", ErrInvalidTask, kind, err)
	}
	t.Type, t.Payload = kind, payload
	return t, nil
}

// SubmitJSON submits args as a task of type args.Kind() with args' JSON form
// as its payload (see [SpecOf]); opts sets the other fields, nil for the
// defaults. It is [Client.Submit] otherwise.
func (c *Client) SubmitJSON(ctx context.Context, args Args, opts *TaskSpec) (TaskInfo, error) {
	t, err := SpecOf(args, opts)
	if err != nil {
		return TaskInfo{ID: t.ID}, fmt.Errorf("submit %s: %w", args.Kind(), err)
	}
	return c.Submit(ctx, t)
}
