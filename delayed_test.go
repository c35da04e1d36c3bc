package ax_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

func TestDelayedValidation(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	_, err := b.Client.Submit(context.Background(), ax.TaskSpec{Type: "x", Delay: -time.Second})
	require.ErrorIs(t, err, ax.ErrInvalidTask)
	require.Contains(t, err.Error(), "Delay")
	_, err = b.Client.Submit(context.Background(), ax.TaskSpec{Type: "x", Delay: time.Second, RunAt: time.Now().Add(time.Hour)})
	require.ErrorIs(t, err, ax.ErrInvalidTask)
	// A run time in the past runs at once.
	info, err := b.Client.Submit(context.Background(), ax.TaskSpec{Type: "x", RunAt: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	require.True(t, info.RunAt.IsZero())
	require.EqualValues(t, 1, natstest.StreamMsgs(t, b.JS, "AX_P2"))
}

// Issue 23.3: a delayed task that would not fit the copy that releases it
// into its bucket is refused at submit, with nothing stored; a smaller
// one is accepted. The limit is the server's max_payload less the room
// AX_DELAYED takes beyond a bucket, or the bucket's MaxMsgSize as the
// pressure report gives it. At 9b723bb the first was scheduled (AX_DELAYED
// took 64 KiB more than its bucket) and its release refused forever.
func TestDelayedTaskTooLargeIsRefusedAtSubmit(t *testing.T) {
	t.Parallel()
	b := axtest.Setup(t, axtest.Options{})
	ctx := context.Background()
	limit := int(b.JS.Conn().MaxPayload()) - streams.HeaderRoom
	_, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "too-big", Type: "x", Delay: time.Hour, Payload: make([]byte, limit-100)})
	require.ErrorIs(t, err, ax.ErrInvalidTask)
	require.ErrorIs(t, err, streams.ErrTooLarge)
	require.ErrorContains(t, err, fmt.Sprintf("at most %d", limit-streams.TaskRoom))
	_, _, err = b.Client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: "too-big"})
	require.ErrorIs(t, err, kv.ErrNotFound, "nothing stored")
	require.Zero(t, natstest.StreamMsgs(t, b.JS, "AX_DELAYED"))
	_, err = b.Client.Submit(ctx, ax.TaskSpec{ID: "fits", Type: "x", Delay: time.Hour, Payload: make([]byte, limit-streams.TaskRoom-200)})
	require.NoError(t, err)

	// A bucket provisioned smaller, as the leader's report says.
	board, err := b.JS.KeyValue(ctx, "AX_CONTROL")
	require.NoError(t, err)
	report, err := json.Marshal(ax.Pressure{UpdatedAt: time.Now(), ValidFor: time.Minute, Thresholds: ax.DefaultPressureThresholds(),
		Buckets: []ax.BucketPressure{{Stream: "AX_P2", Priority: 2, Capacity: 1000, MaxMsgSize: 32 << 10}}})
	require.NoError(t, err)
	_, err = board.Put(ctx, control.PressureKey, report)
	require.NoError(t, err)
	client, err := ax.NewClient(ctx, b.JS, nil)
	require.NoError(t, err)
	_, err = client.Submit(ctx, ax.TaskSpec{Type: "x", Priority: ax.P2, Delay: time.Hour, Payload: make([]byte, 32<<10-streams.TaskRoom)})
	require.ErrorIs(t, err, streams.ErrTooLarge)
	_, err = client.Submit(ctx, ax.TaskSpec{Type: "x", Priority: ax.P3, Delay: time.Hour, Payload: make([]byte, 32<<10-streams.TaskRoom)})
	require.NoError(t, err, "another bucket")
}
