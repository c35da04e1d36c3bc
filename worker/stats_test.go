package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStatsIsASnapshot: Stats returns values that later work does not
// change.
func TestStatsIsASnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("job", func(context.Context, *worker.Task) error { return nil }, nil))
	w, _ := b.StartWorker(t, worker.Config{ID: "A", Registry: reg})
	before := w.Stats()
	require.Equal(t, worker.Stats{}, before)
	info, err := b.Client.Submit(context.Background(), ax.TaskSpec{Type: "job"})
	require.NoError(t, err)
	b.WaitState(t, info.ID, kv.StateSucceeded)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, int64(1), w.Stats().Succeeded)
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, worker.Stats{}, before, "an earlier snapshot does not move")
}
