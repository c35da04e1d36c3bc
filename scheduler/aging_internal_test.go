package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
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
	js, l, logs, client := setupAgingPass(t, &streams.Config{Capacity: 3}, 3)
	ctx := context.Background()

	require.NoError(t, newAging(l).pass(ctx, 1, noTypes))
	require.Equal(t, 1, logs.FilterMessage("aging_bucket_full").Len(), "one refused lift")
	require.Zero(t, logs.FilterMessage("lift_failed").Len(), "no other lift tried")
	require.EqualValues(t, 3, natstest.StreamMsgs(t, js, "AX_P0"))
	requireNotLifted(t, js, client, 3)
}

// A leader that no longer leads ends its aging pass at the first lift the
// move's guard stops (its copy deleted): each further lift would publish a
// copy only to delete it.
func TestAgingStopsWhenNotLeading(t *testing.T) {
	t.Parallel()
	js, l, logs, client := setupAgingPass(t, nil, 0) // never elected: l.held() is false
	ctx := context.Background()

	require.ErrorIs(t, newAging(l).pass(ctx, 1, noTypes), errNotLeading)
	require.Zero(t, logs.FilterMessage("lift_failed").Len(), "no other lift tried")
	require.Zero(t, natstest.StreamMsgs(t, js, "AX_P0"), "the one copy published is deleted")
	requireNotLifted(t, js, client, 0)
}

func noTypes(context.Context) ([]string, error) { return nil, nil }

// setupAgingPass returns a leader that was never elected (its loops do not
// run: a test calls one pass) with an observed logger, after fill tasks were
// submitted to P0 and 3 tasks to P1 that are due for a lift.
func setupAgingPass(t *testing.T, cfg *streams.Config, fill int) (jetstream.JetStream, *Leader, *observer.ObservedLogs, *ax.Client) {
	t.Helper()
	_, js := natstest.RunServer(t)
	natstest.Provision(t, js, cfg)
	ctx := context.Background()
	core, logs := observer.New(zapcore.DebugLevel)
	l, err := New(ctx, js, &Config{AgingThreshold: 50 * time.Millisecond, Logger: zap.New(core)})
	require.NoError(t, err)
	client, err := ax.NewClient(ctx, js, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = client.Close() })
	for i := range fill {
		_, err := client.Submit(ctx, ax.TaskSpec{ID: fmt.Sprintf("top-%d", i), Type: "x", Priority: ax.P0})
		require.NoError(t, err)
	}
	for i := range 3 {
		_, err = client.Submit(ctx, ax.TaskSpec{ID: fmt.Sprintf("due-%d", i), Type: "x", Priority: ax.P1})
		require.NoError(t, err)
	}
	time.Sleep(100 * time.Millisecond) // every P1 task is due for a lift
	return js, l, logs, client
}

// requireNotLifted checks that the 3 due tasks are still P1, at generation
// 1, on their own messages, and that P0 holds only the fill tasks.
func requireNotLifted(t *testing.T, js jetstream.JetStream, client *ax.Client, fill int) {
	t.Helper()
	require.EqualValues(t, fill, natstest.StreamMsgs(t, js, "AX_P0"))
	require.EqualValues(t, 3, natstest.StreamMsgs(t, js, "AX_P1"))
	for i := range 3 {
		rec, _, err := client.Store().Get(context.Background(), kv.Ref{Tenant: ax.DefaultTenant, ID: fmt.Sprintf("due-%d", i)})
		require.NoError(t, err)
		require.Equal(t, 1, rec.Priority)
		require.EqualValues(t, 1, rec.Gen)
		require.Equal(t, "AX_P1", rec.Stream)
	}
}
