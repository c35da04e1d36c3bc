package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// blocking registers "block", whose handler reports its context's cause.
func blocking(t *testing.T) (*worker.Registry, chan error) {
	t.Helper()
	causes := make(chan error, 4)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("block", func(ctx context.Context, _ *worker.Task) error {
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return ctx.Err()
		case <-time.After(30 * time.Second):
			causes <- nil
			return nil
		}
	}, nil))
	return reg, causes
}

func requireCause(t *testing.T, causes chan error, want error) {
	t.Helper()
	select {
	case cause := <-causes:
		require.ErrorIs(t, cause, want)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context did not end")
	}
}

// An operator's notice for a running task cancels its handler's context
// with ErrCancelled; the operator's CANCELLED write stands.
func TestCancelNoticeCancelsRunningHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg, causes := blocking(t)
	_, nc := b.startWorker(t, worker.Config{ID: "w-run", Registry: reg})
	info, err := b.client.Submit(context.Background(), ax.TaskSpec{Type: "block"})
	require.NoError(t, err)
	b.waitState(t, info.ID, kv.StateRunning)
	_, _, err = b.store.Transition(context.Background(), info.ID, kv.StateRunning, kv.StateCancelled, kv.Actor{Action: "cancel"}, nil)
	require.NoError(t, err)
	reply, err := nc.Request(streams.DefaultNames().WorkerCancelSubject("w-run"), []byte(info.ID), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, worker.CancelReplyCancelled, string(reply.Data))
	requireCause(t, causes, worker.ErrCancelled)
	rec := b.waitState(t, info.ID, kv.StateCancelled)
	require.Equal(t, "cancel", rec.LastMove().Action)
}

// A notice that arrives before the handler starts is kept: the handler is
// cancelled as soon as it starts.
func TestCancelNoticeBeforeStart(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg, causes := blocking(t)
	_, nc := b.startWorker(t, worker.Config{ID: "w-early", Registry: reg})
	reply, err := nc.Request(streams.DefaultNames().WorkerCancelSubject("w-early"), []byte("t-early"), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, worker.CancelReplyNoted, string(reply.Data))
	_, err = b.client.Submit(context.Background(), ax.TaskSpec{ID: "t-early", Type: "block"})
	require.NoError(t, err)
	requireCause(t, causes, worker.ErrCancelled)
	b.waitState(t, "t-early", kv.StateCancelled)
}
