package worker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// Claims whose record reads went out in one batch each keep their own
// compare-and-set: when another writer moves one task's record between the
// batch's read and the claim's write, that claim alone loses. The task an
// operator cancelled there is dropped without running; the task whose
// record was only rewritten is looked at again and runs once; every other
// task of the batch runs once, as if it had been read alone. The runs are
// counted by the handler.
func TestBatchedClaimOneLostCompareAndSet(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	const n = 200

	// The tasks are submitted before any worker runs, so that the claims of
	// a fetched backlog read their records together.
	var ids []string
	for i := range n {
		info, err := b.Client.Submit(ctx, ax.TaskSpec{ID: fmt.Sprintf("b%03d", i), Type: "count", Key: fmt.Sprintf("k%d", i)})
		require.NoError(t, err)
		ids = append(ids, info.ID)
	}
	ref := func(id string) kv.Ref { return kv.Ref{Tenant: ax.DefaultTenant, ID: id} }

	// The first batch of more than one read that holds two tasks is where
	// the interloper writes: it cancels one and rewrites the other.
	var once sync.Once
	var cancelled, rewritten atomic.Value
	interlope := func(keys []string) {
		var in []kv.Ref
		for _, key := range keys {
			r, err := kv.ParseKey(key)
			if err == nil && slices.Contains(ids, r.ID) && !slices.Contains(in, r) {
				in = append(in, r)
			}
		}
		if len(in) < 2 {
			return
		}
		once.Do(func() {
			_, _, err := b.Store.Transition(ctx, in[0], kv.StateReady, kv.StateCancelled, kv.Actor{Action: "cancel"}, nil)
			require.NoError(t, err)
			_, _, err = b.Store.Transition(ctx, in[1], kv.StateReady, kv.StateReady, kv.Actor{Action: "touch"}, nil)
			require.NoError(t, err)
			cancelled.Store(in[0].ID)
			rewritten.Store(in[1].ID)
		})
	}

	var runs sync.Map // id -> *atomic.Int32
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("count", func(_ context.Context, task *worker.Task) error {
		c, _ := runs.LoadOrStore(task.ID, new(atomic.Int32))
		c.(*atomic.Int32).Add(1)
		return nil
	}, nil))
	cfg := worker.Config{Registry: reg, Concurrency: 64}
	cfg.Store.Test.Reads = &kv.ReadTestHooks{Answered: interlope}
	b.StartWorker(t, cfg)

	require.Eventually(t, func() bool { return cancelled.Load() != nil }, 30*time.Second, 10*time.Millisecond,
		"no batch of more than one record read held two of the tasks")
	gone := cancelled.Load().(string)
	touched := rewritten.Load().(string)
	for _, id := range ids {
		want := kv.StateSucceeded
		if id == gone {
			want = kv.StateCancelled
		}
		b.WaitState(t, id, want)
	}
	time.Sleep(200 * time.Millisecond) // a second run would have shown by now
	for _, id := range ids {
		c, ok := runs.Load(id)
		if id == gone {
			require.False(t, ok, "the cancelled task %s never runs", id)
			continue
		}
		require.True(t, ok, "task %s ran", id)
		require.EqualValues(t, 1, c.(*atomic.Int32).Load(), "task %s ran once", id)
	}
	rec, _, err := b.Store.Get(ctx, ref(touched))
	require.NoError(t, err)
	require.Equal(t, []string{">READY", "READY>READY", "READY>RUNNING", "RUNNING>SUCCEEDED"}, axtest.Moves(rec),
		"the rewritten task's claim lost once, looked again and ran")
}
