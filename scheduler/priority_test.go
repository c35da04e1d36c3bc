package scheduler_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/ax-mesh/ax/scheduler"
	"github.com/stretchr/testify/require"
)

// A task that names no priority lands in DefaultPriority (P2), as the CLI's
// default; P0 must be asked for.
func TestZeroPriorityIsTheDefault(t *testing.T) {
	t.Parallel()
	b := setupAdmin(t)
	ctx := context.Background()
	require.Equal(t, scheduler.P2, scheduler.DefaultPriority)
	for _, tc := range []struct {
		name     string
		priority scheduler.Priority
		stream   string
		level    int
	}{
		{"unset", "", "AX_P2", 2},
		{"P0 asked for", scheduler.P0, "AX_P0", 0},
		{"P4", scheduler.P4, "AX_P4", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := b.client.Submit(ctx, scheduler.TaskSpec{Type: "email", Priority: tc.priority})
			require.NoError(t, err)
			require.Equal(t, tc.stream, info.Stream)
			require.Equal(t, tc.level, info.Priority)
			rec, _, err := b.client.Store().Get(ctx, info.ID)
			require.NoError(t, err)
			require.Equal(t, tc.level, rec.Priority)
		})
	}
	_, err := b.client.Submit(ctx, scheduler.TaskSpec{Type: "email", Priority: "P0"})
	require.ErrorIs(t, err, scheduler.ErrInvalidTask, "names are lower-case, as on the wire")
}

// In JSON a priority is its name; a number, as cron jobs stored it before,
// keeps its old meaning (0 was P0).
func TestPriorityJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		json string
		want scheduler.Priority
	}{
		{`{"type":"x","priority":"p3"}`, scheduler.P3},
		{`{"type":"x","priority":0}`, scheduler.P0},
		{`{"type":"x","priority":4}`, scheduler.P4},
		{`{"type":"x"}`, ""},
	} {
		var task scheduler.TaskSpec
		require.NoError(t, json.Unmarshal([]byte(tc.json), &task), tc.json)
		require.Equal(t, tc.want, task.Priority, tc.json)
	}
	data, err := json.Marshal(scheduler.TaskSpec{Type: "x", Priority: scheduler.P1})
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"x","tenant":"","priority":"p1"}`, string(data))
	level, err := scheduler.Priority("").Level()
	require.NoError(t, err)
	require.Equal(t, 2, level)
}
