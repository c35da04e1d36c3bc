package worker

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// A worker composes a type's chain once, not per task, and with tracing
// off the built-ins cost one allocation per task: the context value that
// carries the task.
func TestChainComposedOnceAndCheap(t *testing.T) { // not parallel: AllocsPerRun
	composed := 0
	counting := func(next HandlerFunc) HandlerFunc {
		composed++
		return next
	}
	c := newChains(&Config{Middleware: []Middleware{counting}}, zap.NewNop(), nil)
	handler := func(ctx context.Context, task *Task) error {
		if _, ok := TaskFromContext(ctx); !ok {
			t.Error("no task in the handler's context")
		}
		return nil
	}
	ctx := context.Background()
	task := &Task{ID: "t1", Type: "job"}
	allocs := testing.AllocsPerRun(100, func() {
		_ = c.of("job", handler)(ctx, task)
	})
	require.Equal(t, 1, composed, "the chain is composed once per type")
	require.LessOrEqual(t, allocs, 1.0, "one allocation per task: the task's context value")
	_ = c.of("other", handler)
	require.Equal(t, 2, composed)
}
