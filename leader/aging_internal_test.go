package leader

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A full bucket above stops an aging pass at its first refused lift: the
// move changes nothing (the owner's full-bucket rule), and every other
// lift into that bucket would be refused too. The pressure loop has not
// seen the bucket refuse yet (its reading lags), so only the refusal of
// the copy stops aging here.
func TestAgingStopsAtAFullBucket(t *testing.T) {
	t.Parallel()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, &streams.Config{Capacity: 3})
	ctx := context.Background()
	core, logs := observer.New(zapcore.DebugLevel)
	l, err := New(ctx, js, &Config{AgingThreshold: 50 * time.Millisecond, Logger: zap.New(core)})
	require.NoError(t, err)
	client, err := ax.NewClient(ctx, js, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	for i := range 3 {
		_, err := client.Submit(ctx, ax.TaskSpec{ID: fmt.Sprintf("top-%d", i), Type: "x", Priority: ax.P0})
		require.NoError(t, err)
		_, err = client.Submit(ctx, ax.TaskSpec{ID: fmt.Sprintf("due-%d", i), Type: "x", Priority: ax.P1})
		require.NoError(t, err)
	}
	time.Sleep(100 * time.Millisecond) // every P1 task is due for a lift

	require.NoError(t, newAging(l).pass(ctx, 1, func(context.Context) ([]string, error) { return nil, nil }))
	require.Equal(t, 1, logs.FilterMessage("aging_bucket_full").Len(), "one refused lift")
	require.Zero(t, logs.FilterMessage("lift_failed").Len(), "no other lift tried")
	require.EqualValues(t, 3, natstest.StreamMsgs(t, js, "AX_P0"))
	require.EqualValues(t, 3, natstest.StreamMsgs(t, js, "AX_P1"))
	for i := range 3 {
		rec, _, err := client.Store().Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: fmt.Sprintf("due-%d", i)})
		require.NoError(t, err)
		require.Equal(t, 1, rec.Priority)
		require.EqualValues(t, 1, rec.Gen)
		require.Equal(t, "AX_P1", rec.Stream)
	}
}
