package dashboard_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/dashboard"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The task view's JSON carries a running task's progress and a succeeded
// task's result, cut to MaxShownResult with its whole size.
func TestTaskViewShowsResultAndProgress(t *testing.T) {
	t.Parallel()
	b := setup(t, dashboard.Config{})
	release := make(chan struct{})
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("crunch", func(ctx context.Context, task *worker.Task) error {
		if err := task.Progress(ctx, 42.5, "crunching"); err != nil {
			return err
		}
		select {
		case <-release:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		task.SetResult([]byte(strings.Repeat("é", dashboard.MaxShownResult))) // two bytes a rune
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg})
	id := b.Submit(t, ax.TaskSpec{ID: "crunch-1", Type: "crunch", Tenant: "acme"})

	var detail dashboard.TaskDetail
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		detail = dashboard.TaskDetail{}
		if assert.Equal(c, 200, b.get(c, "/api/tasks/"+id, &detail)) && assert.NotNil(c, detail.Task.Progress) {
			assert.Equal(c, kv.StateRunning, detail.Task.State)
		}
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, 42.5, detail.Task.Progress.Percent)
	require.Equal(t, "crunching", detail.Task.Progress.Note)
	require.Nil(t, detail.Result)

	close(release)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		detail = dashboard.TaskDetail{}
		if assert.Equal(c, 200, b.get(c, "/api/tasks/"+id, &detail)) {
			assert.Equal(c, kv.StateSucceeded, detail.Task.State)
		}
	}, 30*time.Second, 50*time.Millisecond)
	require.NotNil(t, detail.Result)
	require.Equal(t, 2*dashboard.MaxShownResult, detail.Result.Size)
	require.True(t, detail.Result.Truncated)
	require.Equal(t, strings.Repeat("é", dashboard.MaxShownResult/2), detail.Result.Text)
	require.Empty(t, detail.Task.Result, "the whole result is not in the view")
	require.Equal(t, 42.5, detail.Task.Progress.Percent, "the last progress stays")
}
