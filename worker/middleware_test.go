package worker_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// Middleware runs around every handler, the first outermost; one may
// short-circuit the handler; each sees the task's context (its timeout)
// and headers; a panic in one fails the attempt permanently.
func TestMiddleware(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	var mu sync.Mutex
	var calls []string
	log := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, s)
	}
	type seen struct {
		left    time.Duration
		header  string
		handled bool
	}
	views := make(chan seen, 4)
	named := func(name string) worker.Middleware {
		return func(next worker.HandlerFunc) worker.HandlerFunc {
			return func(ctx context.Context, task *worker.Task) error {
				log(name + " before " + task.Type)
				err := next(ctx, task)
				log(name + " after")
				return err
			}
		}
	}
	gate := func(next worker.HandlerFunc) worker.HandlerFunc {
		return func(ctx context.Context, task *worker.Task) error {
			deadline, ok := ctx.Deadline()
			var left time.Duration
			if ok {
				left = time.Until(deadline)
			}
			v := seen{left: left, header: task.Headers.Get("Ax-Gate")}
			switch v.header {
			case "deny":
				views <- v
				return worker.Permanent(errors.New("denied by gate"))
			case "answer":
				views <- v
				task.SetResult([]byte("from the gate"))
				return nil
			case "panic":
				panic("gate exploded")
			}
			err := next(ctx, task)
			v.handled = true
			views <- v
			return err
		}
	}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("job", func(ctx context.Context, task *worker.Task) error {
		log("handler")
		task.SetResult([]byte("from the handler"))
		return nil
	}, &worker.TypeConfig{Timeout: 7 * time.Second}))
	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL, Middleware: []worker.Middleware{named("a"), named("b"), gate}})

	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "job", Headers: map[string]string{"Ax-Gate": "open"}})
	require.NoError(t, err)
	rec := b.WaitState(t, info.ID, kv.StateSucceeded)
	require.Equal(t, "from the handler", string(rec.Result))
	require.Equal(t, []string{"a before job", "b before job", "handler", "b after", "a after"}, calls, "the first middleware is the outermost")
	v := <-views
	require.True(t, v.handled)
	require.Equal(t, "open", v.header, "a middleware sees the task's headers")
	require.InDelta(t, 7*time.Second, v.left, float64(2*time.Second), "a middleware sees the task's timeout in its context")

	mu.Lock()
	calls = nil
	mu.Unlock()
	info, err = b.Client.Submit(ctx, ax.TaskSpec{Type: "job", Headers: map[string]string{"Ax-Gate": "answer"}})
	require.NoError(t, err)
	rec = b.WaitState(t, info.ID, kv.StateSucceeded)
	require.Equal(t, "from the gate", string(rec.Result), "a middleware answers without the handler")
	require.False(t, (<-views).handled)
	mu.Lock()
	require.NotContains(t, calls, "handler")
	mu.Unlock()

	info, err = b.Client.Submit(ctx, ax.TaskSpec{Type: "job", Headers: map[string]string{"Ax-Gate": "deny"}})
	require.NoError(t, err)
	rec = b.WaitState(t, info.ID, kv.StateDead)
	require.Contains(t, rec.LastError, "denied by gate")
	<-views

	info, err = b.Client.Submit(ctx, ax.TaskSpec{Type: "job", Headers: map[string]string{"Ax-Gate": "panic"}})
	require.NoError(t, err)
	rec = b.WaitState(t, info.ID, kv.StateDead)
	require.Contains(t, rec.LastError, "handler panicked: gate exploded")
	require.Equal(t, 1, rec.Attempt)
}

func TestMiddlewareNilRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	_, err := worker.New(context.Background(), b.JS, &worker.Config{Registry: worker.NewRegistry(), Middleware: []worker.Middleware{nil}})
	require.ErrorContains(t, err, "the Middleware at index 0 is nil")
}
