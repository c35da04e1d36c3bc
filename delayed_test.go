package ax_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/stretchr/testify/require"
)

func TestDelayedValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, nil)
	_, err := b.client.Submit(context.Background(), ax.TaskSpec{Type: "x", Delay: -time.Second})
	require.ErrorIs(t, err, ax.ErrInvalidTask)
	require.Contains(t, err.Error(), "Delay")
	_, err = b.client.Submit(context.Background(), ax.TaskSpec{Type: "x", Delay: time.Second, RunAt: time.Now().Add(time.Hour)})
	require.ErrorIs(t, err, ax.ErrInvalidTask)
	// A run time in the past runs at once.
	info, err := b.client.Submit(context.Background(), ax.TaskSpec{Type: "x", RunAt: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	require.True(t, info.RunAt.IsZero())
	require.EqualValues(t, 1, natstest.StreamMsgs(t, b.js, "AX_P2"))
}
