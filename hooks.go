package ax

import (
	"context"
	"fmt"
	"strings"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
)

// SubmitHook runs around the submit of each task ([Client.Submit],
// [Client.SubmitBatch], [Client.SubmitJSON]; delayed and unique tasks
// included), after the task was validated and right before anything is
// published or stored. It receives the submit's context, the task (its
// defaults filled: ID, Tenant, Key, Priority) and header, the headers to
// add to the task's message: what a hook sets there travels with the task
// (through AX_DELAYED, retries and dead letters) to the handler's
// [worker.Task.Headers] — a tracer injects its trace context there. It may
// not set the headers ax sets itself (Ax-Task-Id, Ax-Timeout, Nats-Msg-Id,
// …): such a submit fails with [ErrInvalidTask].
//
// A hook that returns an error refuses the task: nothing is published,
// and the submit returns the error, wrapped. The after function it returns
// (nil: none) is called once the submit of the task is decided, with its
// info and error (a tracer ends its span there).
//
// [Config.SubmitHooks] lists them; they run in order, and their after
// functions in reverse order (the first hook is the outermost).
type SubmitHook func(ctx context.Context, task TaskSpec, header nats.Header) (after func(TaskInfo, error), err error)

// beforeSubmit runs the submit hooks for the normalized task t, keeping
// the headers they set in t, and returns the after function to call with
// the submit's outcome (never nil).
func (c *Client) beforeSubmit(ctx context.Context, t *TaskSpec) (func(TaskInfo, error), error) {
	if len(c.cfg.SubmitHooks) == 0 {
		return noAfter, nil
	}
	header := nats.Header{}
	var afters []func(TaskInfo, error)
	after := func(info TaskInfo, err error) {
		for i := len(afters) - 1; i >= 0; i-- {
			afters[i](info, err)
		}
	}
	for i, hook := range c.cfg.SubmitHooks {
		a, err := hook(ctx, *t, header)
		if a != nil {
			afters = append(afters, a)
		}
		if err != nil {
			err = fmt.Errorf("submit task %s: submit hook %d: %w", t.ID, i, err)
			after(TaskInfo{ID: t.ID, Tenant: t.Tenant}, err)
			return nil, err
		}
	}
	for name := range header {
		if streams.IsInternalHeader(name) || isOptionHeader(name) || strings.HasPrefix(strings.ToLower(name), "nats-") {
			err := fmt.Errorf("%w: submit task %s: a submit hook set header %q, which ax sets", ErrInvalidTask, t.ID, name)
			after(TaskInfo{ID: t.ID, Tenant: t.Tenant}, err)
			return nil, err
		}
	}
	t.hookHeader = header
	return after, nil
}

func noAfter(TaskInfo, error) {}
