package ax_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ax-mesh/ax/worker"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/stretchr/testify/require"
)

// A task that names no priority lands in DefaultPriority (P2), as the CLI's
// default; P0 must be asked for.
func TestZeroPriorityIsTheDefault(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	ctx := context.Background()
	require.Equal(t, ax.P2, ax.DefaultPriority)
	for _, tc := range []struct {
		name     string
		priority ax.Priority
		stream   string
		info     ax.Priority
		level    int
	}{
		{"unset", "", "AX_P2", ax.P2, 2},
		{"P0 asked for", ax.P0, "AX_P0", ax.P0, 0},
		{"P4", ax.P4, "AX_P4", ax.P4, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "email", Priority: tc.priority})
			require.NoError(t, err)
			require.Equal(t, tc.stream, info.Stream)
			require.Equal(t, tc.info, info.Priority)
			rec := b.Get(t, info.ID)
			require.Equal(t, tc.level, rec.Priority)
		})
	}
	_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "email", Priority: "P0"})
	require.ErrorIs(t, err, ax.ErrInvalidTask, "names are lower-case, as on the wire")
}

// In JSON a priority is its name; a number, as cron jobs stored it before,
// keeps its old meaning (0 was P0).
func TestPriorityJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		json string
		want ax.Priority
	}{
		{`{"type":"x","priority":"p3"}`, ax.P3},
		{`{"type":"x","priority":0}`, ax.P0},
		{`{"type":"x","priority":4}`, ax.P4},
		{`{"type":"x"}`, ""},
	} {
		var task ax.TaskSpec
		require.NoError(t, json.Unmarshal([]byte(tc.json), &task), tc.json)
		require.Equal(t, tc.want, task.Priority, tc.json)
	}
	data, err := json.Marshal(ax.TaskSpec{Type: "x", Priority: ax.P1})
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"x","tenant":"","priority":"p1"}`, string(data))
	level, err := ax.Priority("").Level()
	require.NoError(t, err)
	require.Equal(t, 2, level)
}

// The handler sees the priority the producer named, in the same type
// ([axtype.Priority]): what Submit answers is what Task.Priority holds.
func TestHandlerSeesTheSubmittedPriority(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs a worker; axtype's TestPriorityForms is the fast tier's")
	}
	b := axtest.Fast(t)
	seen := make(chan ax.Priority, 1)
	b.StartWorker(t, worker.Config{Shards: axtest.AllShards(), Registry: axtest.Registry(t, "prio", func(_ context.Context, task *worker.Task) error {
		seen <- task.Priority
		return nil
	})})
	info, err := b.Client.Submit(context.Background(), ax.TaskSpec{Type: "prio", Priority: ax.P4})
	require.NoError(t, err)
	require.Equal(t, ax.P4, info.Priority)
	select {
	case got := <-seen:
		require.Equal(t, info.Priority, got)
	case <-time.After(10 * time.Second):
		t.Fatal("the task did not run")
	}
}
