package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With a prefetch above 1 and busy slots, deliveries wait for seconds,
// longer than the ack wait: a message waiting unheartbeated in the
// client's buffer would be redelivered and run twice at once (it did,
// before each consume context pulled one message at a time). No task may
// run twice at the same time, and every task ends SUCCEEDED.
func TestBufferedPrefetchNeverRunsTwiceAtOnce(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	b := setup(t, &streams.Config{AckWait: ackWait})
	type run struct {
		worker     string
		start, end time.Time
	}
	var mu sync.Mutex
	runs := map[string][]run{}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("work", func(ctx context.Context, task *worker.Task) error {
		start := time.Now()
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
		}
		mu.Lock()
		runs[task.ID] = append(runs[task.ID], run{task.Worker, start, time.Now()})
		mu.Unlock()
		return ctx.Err()
	}, nil))
	var workers []*worker.Worker
	for _, id := range []string{"A", "B"} {
		w, _ := b.StartWorker(t, worker.Config{ID: id, Registry: reg, Concurrency: 2, PrefetchPerShard: 4, AckWait: ackWait})
		workers = append(workers, w)
	}

	tasks := make([]ax.TaskSpec, 200) // ~6 per shard: a backlog each worker buffers for seconds
	for i := range tasks {
		tasks[i] = ax.TaskSpec{Type: "work", Priority: ax.P2}
	}
	infos, err := b.Client.SubmitBatch(context.Background(), tasks)
	require.NoError(t, err)
	start := time.Now()
	var counts map[kv.State]int
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		counts = map[kv.State]int{}
		for _, info := range infos {
			rec, _, err := b.Store.Get(context.Background(), kv.Ref{Tenant: info.Tenant, ID: info.ID})
			if !assert.NoError(c, err) {
				return
			}
			counts[rec.State]++
		}
		assert.Equal(c, len(infos), counts[kv.StateSucceeded])
	}, 2*time.Minute, 100*time.Millisecond)
	require.Equal(t, len(infos), counts[kv.StateSucceeded], "every task SUCCEEDED: %v", counts)
	took := time.Since(start)

	mu.Lock()
	defer mu.Unlock()
	reruns := 0
	for id, rs := range runs {
		for i := range rs {
			for j := i + 1; j < len(rs); j++ {
				require.False(t, rs[i].start.Before(rs[j].end) && rs[j].start.Before(rs[i].end),
					"task %s ran twice at once: %+v", id, rs)
			}
		}
		reruns += len(rs) - 1
	}
	t.Logf("%d tasks in %s, %d runs cut short and run again; dropped deliveries: A %d, B %d", len(infos),
		took.Round(time.Millisecond), reruns, workers[0].Stats().Dropped, workers[1].Stats().Dropped)
}

// A worker serving one shard runs as many of its tasks at once as its
// prefetch allows, under every priority policy: its consume contexts on a
// pinned consumer share the pin.
func TestPrefetchRunsAShardsTasksInParallel(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"overflow", "pinned_client", "none"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &streams.Config{PriorityPolicy: policy})
			var running, most atomic.Int32
			reg := worker.NewRegistry()
			require.NoError(t, reg.Handle("work", func(ctx context.Context, _ *worker.Task) error {
				n := running.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				// Wait for the others of the round (at most 10 s): with
				// less parallelism the round never fills and most stays low.
				for deadline := time.Now().Add(10 * time.Second); running.Load() < 4 && time.Now().Before(deadline); {
					time.Sleep(5 * time.Millisecond)
				}
				time.Sleep(20 * time.Millisecond)
				running.Add(-1)
				return nil
			}, nil))
			b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4, PrefetchPerShard: 4, Shards: []int{7}})
			key := keyOnShard(t, 7)
			tasks := make([]ax.TaskSpec, 8)
			for i := range tasks {
				tasks[i] = ax.TaskSpec{Type: "work", Key: key}
			}
			infos, err := b.Client.SubmitBatch(context.Background(), tasks)
			require.NoError(t, err)
			for _, info := range infos {
				b.WaitState(t, info.ID, kv.StateSucceeded)
			}
			require.EqualValues(t, 4, most.Load(), "tasks of one shard running at once")
		})
	}
}

// keyOnShard returns a task key that the stream partitions to shard.
func keyOnShard(t *testing.T, shard int) string {
	t.Helper()
	for i := range 10_000 {
		if key := fmt.Sprintf("k%d", i); streams.Shard(key) == shard {
			return key
		}
	}
	t.Fatalf("no key on shard %d", shard)
	return ""
}

// A shard's messages held ahead of a busy slot (up to PrefetchPerShard,
// one per consume context) wait in the worker, here for up to three ack
// waits' worth of handler time. They are held and heartbeated from the
// moment they arrive: none lapses, none is redelivered, each runs once, on
// its first delivery. (Any design that pulls several messages per request
// must keep this; it fails if queued deliveries go unheartbeated.)
func TestHeldDeliveriesWaitingForASlotKeepTheirClaim(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	b := setup(t, &streams.Config{AckWait: ackWait})
	var mu sync.Mutex
	attempts := map[string][]int{}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("work", func(ctx context.Context, task *worker.Task) error {
		mu.Lock()
		attempts[task.ID] = append(attempts[task.ID], task.Attempt)
		mu.Unlock()
		select {
		case <-time.After(ackWait / 2):
		case <-ctx.Done():
		}
		return ctx.Err()
	}, nil))
	w, _ := b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 1, PrefetchPerShard: 4, AckWait: ackWait, Shards: []int{7}})
	key := keyOnShard(t, 7)
	tasks := make([]ax.TaskSpec, 4) // the fourth waits 3 × ackWait/2 for the slot
	for i := range tasks {
		tasks[i] = ax.TaskSpec{Type: "work", Key: key}
	}
	infos, err := b.Client.SubmitBatch(context.Background(), tasks)
	require.NoError(t, err)
	for _, info := range infos {
		rec := b.WaitState(t, info.ID, kv.StateSucceeded)
		require.Equal(t, kv.StateSucceeded, rec.State)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, info := range infos {
		require.Equal(t, []int{1}, attempts[info.ID], "task %s ran once, on its first attempt", info.ID)
	}
	require.Zero(t, w.Stats().Dropped, "no delivery lapsed while it waited for the slot")
}

// A backlog is pulled in batches: a request asks for the puller's whole
// credit (PrefetchPerShard), so draining N queued tasks costs about N /
// PrefetchPerShard pull requests, not one per task as with one-message
// pulls (issue 14: each request is a message in and out of the server).
// Counted on the server's subject for the bucket's pull requests.
func TestBacklogIsPulledInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	const n = 640 // 20 per shard
	tasks := make([]ax.TaskSpec, n)
	for i := range tasks {
		tasks[i] = ax.TaskSpec{Type: "echo", Priority: ax.P2}
	}
	infos, err := b.Client.SubmitBatch(context.Background(), tasks)
	require.NoError(t, err)

	nc, _ := b.Server.Connect()
	var pulls atomic.Int64
	sub, err := nc.Subscribe("$JS.API.CONSUMER.MSG.NEXT."+streams.DefaultNames().PriorityStream(2)+".>", func(*nats.Msg) { pulls.Add(1) })
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	b.StartWorker(t, worker.Config{ID: "A", Concurrency: 16, PrefetchPerShard: 4})
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, info := range infos {
			rec, _, err := b.Store.Get(context.Background(), kv.Ref{Tenant: info.Tenant, ID: info.ID})
			if !assert.NoError(c, err) || !assert.Equal(c, kv.StateSucceeded, rec.State) {
				return
			}
		}
	}, 2*time.Minute, 200*time.Millisecond)
	// One open request per shard consumer, then one per 4 messages: about
	// 32 + 160. One-message pulls made 4 per consumer plus one per task.
	got := pulls.Load()
	t.Logf("%d pull requests for %d tasks", got, n)
	require.Less(t, got, int64(n/2), "pull requests for a backlog of %d tasks", n)
}
