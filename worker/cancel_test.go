package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
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
	_, nc := b.StartWorker(t, worker.Config{ID: "w-run", Registry: reg})
	info, err := b.Client.Submit(context.Background(), ax.TaskSpec{Type: "block"})
	require.NoError(t, err)
	b.WaitState(t, info.ID, kv.StateRunning)
	_, _, err = b.Store.Transition(context.Background(), kv.Ref{Tenant: info.Tenant, ID: info.ID}, kv.StateRunning, kv.StateCancelled, kv.Actor{Action: "cancel"}, nil)
	require.NoError(t, err)
	reply, err := nc.Request(streams.DefaultNames().WorkerCancelSubject("w-run"), []byte(kv.Ref{Tenant: info.Tenant, ID: info.ID}.Key()), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, worker.CancelReplyCancelled, string(reply.Data))
	requireCause(t, causes, worker.ErrCancelled)
	rec := b.WaitState(t, info.ID, kv.StateCancelled)
	require.Equal(t, "cancel", rec.LastMove().Action)
}

// A notice that arrives before the handler starts is kept: the handler is
// cancelled as soon as it starts.
func TestCancelNoticeBeforeStart(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg, causes := blocking(t)
	_, nc := b.StartWorker(t, worker.Config{ID: "w-early", Registry: reg})
	reply, err := nc.Request(streams.DefaultNames().WorkerCancelSubject("w-early"), []byte(kv.Ref{Tenant: ax.DefaultTenant, ID: "t-early"}.Key()), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, worker.CancelReplyNoted, string(reply.Data))
	_, err = b.Client.Submit(context.Background(), ax.TaskSpec{ID: "t-early", Type: "block"})
	require.NoError(t, err)
	requireCause(t, causes, worker.ErrCancelled)
	b.WaitState(t, "t-early", kv.StateCancelled)
}

// Two tenants' tasks with one id are two tasks on one worker too: both run
// at once (neither waits for the other as if it were its redelivery), and
// a cancel notice for one tenant's task ends only its handler.
func TestEqualIDsOfTwoTenantsRunApart(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg, causes := blocking(t)
	_, nc := b.StartWorker(t, worker.Config{ID: "w-ten", Registry: reg, Concurrency: 4})
	ctx := context.Background()
	acme, globex := kv.Ref{Tenant: "acme", ID: "same"}, kv.Ref{Tenant: "globex", ID: "same"}
	for _, ref := range []kv.Ref{acme, globex} {
		info, err := b.Client.Submit(ctx, ax.TaskSpec{ID: ref.ID, Tenant: ref.Tenant, Type: "block", Key: "k"})
		require.NoError(t, err)
		require.False(t, info.Duplicate, "%v is a task of its own", ref)
	}
	for _, ref := range []kv.Ref{acme, globex} {
		require.Eventually(t, func() bool {
			rec, _, err := b.Store.Get(ctx, ref)
			return err == nil && rec.State == kv.StateRunning
		}, 20*time.Second, 20*time.Millisecond, "%v runs", ref)
	}
	_, _, err := b.Store.Transition(ctx, acme, kv.StateRunning, kv.StateCancelled, kv.Actor{Action: "cancel"}, nil)
	require.NoError(t, err)
	reply, err := nc.Request(streams.DefaultNames().WorkerCancelSubject("w-ten"), []byte(acme.Key()), 5*time.Second)
	require.NoError(t, err)
	require.Equal(t, worker.CancelReplyCancelled, string(reply.Data))
	requireCause(t, causes, worker.ErrCancelled)
	select {
	case cause := <-causes:
		t.Fatalf("a second handler ended (%v): the notice for %v reached %v", cause, acme, globex)
	case <-time.After(500 * time.Millisecond):
	}
	rec, _, err := b.Store.Get(ctx, globex)
	require.NoError(t, err)
	require.Equal(t, kv.StateRunning, rec.State)
}
