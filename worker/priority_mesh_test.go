package worker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// keyIn returns a key whose shard is one of shards.
func keyIn(t *testing.T, shards []int) string {
	t.Helper()
	for i := range 10_000 {
		if k := fmt.Sprintf("k%d", i); slices.Contains(shards, streams.Shard(k)) {
			return k
		}
	}
	t.Fatalf("no key in shards %v", shards)
	return ""
}

// Priority is strict within a worker, not across the mesh
// (docs/RELIABILITY.md, issue 17.13): a P0 task on a shard of a worker
// whose slot is busy waits for that slot, while another worker with no
// higher task starts a P4 task of its own shards; the P0 task starts once
// its worker's slot frees.
func TestPriorityIsPerWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	type start struct {
		worker   string
		priority int
		at       time.Time
	}
	starts := make(chan start, 16)
	release := make(chan struct{})
	registry := func(id string) *worker.Registry {
		reg := worker.NewRegistry()
		require.NoError(t, reg.Handle("hold", func(ctx context.Context, _ *worker.Task) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, nil))
		require.NoError(t, reg.Handle("job", func(_ context.Context, task *worker.Task) error {
			starts <- start{worker: id, priority: levelOf(task.Priority), at: time.Now()}
			return nil
		}, nil))
		return reg
	}
	b.StartWorker(t, worker.Config{ID: "wa", Registry: registry("wa"), Concurrency: 1})
	b.StartWorker(t, worker.Config{ID: "wb", Registry: registry("wb"), Concurrency: 1})
	members := waitMembers(t, b.JS, "wa", "wb")
	shards := map[string][]int{}
	for _, m := range members {
		shards[m.ID] = m.Shards
	}
	keyA, keyB := keyIn(t, shards["wa"]), keyIn(t, shards["wb"])

	// wb's only slot is busy; a P0 task waits in wb's hands.
	hold, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "hold", Key: keyB, Priority: ax.P0})
	require.NoError(t, err)
	b.WaitState(t, hold.ID, kv.StateRunning)
	_, err = b.Client.Submit(ctx, ax.TaskSpec{Type: "job", Key: keyB, Priority: ax.P0})
	require.NoError(t, err)
	// wa, with no higher task, starts a P4 task at once.
	_, err = b.Client.Submit(ctx, ax.TaskSpec{Type: "job", Key: keyA, Priority: ax.P4})
	require.NoError(t, err)
	var low start
	select {
	case low = <-starts:
	case <-time.After(30 * time.Second):
		t.Fatal("the P4 task did not start")
	}
	require.Equal(t, start{worker: "wa", priority: 4}, start{worker: low.worker, priority: low.priority},
		"the P4 task started first, on the other worker")
	select {
	case s := <-starts:
		t.Fatalf("the P0 task started while its worker's slot was busy: %+v", s)
	case <-time.After(500 * time.Millisecond):
	}

	close(release) // wb's slot frees: the P0 task starts there
	select {
	case high := <-starts:
		require.Equal(t, "wb", high.worker)
		require.Equal(t, 0, high.priority)
		require.True(t, high.at.After(low.at))
	case <-time.After(30 * time.Second):
		t.Fatal("the P0 task did not start once its worker's slot freed")
	}
}
