package builtin_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax/internal/builtin"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// A sleep of a second or more reports its progress, ending at 100 %; a
// shorter one (the demo's) reports none.
func TestSleepReportsProgress(t *testing.T) {
	t.Parallel()
	long := &worker.Task{ID: "long", Attempt: 1}
	require.NoError(t, builtin.Sleep(context.Background(), long, builtin.SleepArgs{MS: 1200}))
	p := long.LastProgress()
	require.NotNil(t, p)
	require.Equal(t, 100.0, p.Percent)
	require.Equal(t, "slept 1.2s", p.Note)

	short := &worker.Task{ID: "short", Attempt: 1}
	require.NoError(t, builtin.Sleep(context.Background(), short, builtin.SleepArgs{MS: 20}))
	require.Nil(t, short.LastProgress())
}
