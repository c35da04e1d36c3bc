package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/streams"
	"github.com/ax-mesh/ax/worker"
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
		w, _ := b.startWorker(t, worker.Config{ID: id, Registry: reg, Concurrency: 2, PrefetchPerShard: 4, AckWait: ackWait})
		workers = append(workers, w)
	}

	tasks := make([]scheduler.Task, 200) // ~6 per shard: a backlog each worker buffers for seconds
	for i := range tasks {
		tasks[i] = scheduler.Task{Type: "work", Priority: 2}
	}
	infos, err := b.client.SubmitBatch(context.Background(), tasks)
	require.NoError(t, err)
	start := time.Now()
	var counts map[kv.State]int
	assert.Eventually(t, func() bool {
		counts = map[kv.State]int{}
		for _, info := range infos {
			rec, _, err := b.store.Get(context.Background(), info.ID)
			require.NoError(t, err)
			counts[rec.State]++
		}
		return counts[kv.StateSucceeded] == len(infos)
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
		took.Round(time.Millisecond), reruns, workers[0].Stats().Dropped.Load(), workers[1].Stats().Dropped.Load())
}
