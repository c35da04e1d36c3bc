package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// On the shared layout the shards of a priority take turns, so the
// backlog of one partition key delays another key's tasks by about one
// turn, not by the backlog: 150 tasks of key "bulk" (100 ms each, 3.75 s
// on 4 slots) wait when tasks of another key arrive, each started by the
// next slot that frees (every 25 ms). By age alone (every shard one group)
// bulk's queued deliveries, all older, win every free slot but those that
// free while its puller asks for more (about a millisecond in 25): the
// other key's tasks wait for most of the backlog.
func TestKeysTakeTurns(t *testing.T) {
	t.Parallel()
	const backlog, other = 150, 5
	b := setup(t, nil)
	paced := "paced"
	for i := 0; streams.Shard(paced) == streams.Shard("bulk"); i++ {
		paced = fmt.Sprintf("paced-%d", i)
	}
	specs := make([]ax.TaskSpec, backlog)
	for i := range specs {
		specs[i] = ax.TaskSpec{Type: "bulk", Key: "bulk", Priority: ax.P2}
	}
	_, err := b.Client.SubmitBatch(context.Background(), specs)
	require.NoError(t, err)

	var mu sync.Mutex
	bulkStarts := 0
	pacedStarts := map[string]time.Time{}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("bulk", func(_ context.Context, _ *worker.Task) error {
		mu.Lock()
		bulkStarts++
		mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		return nil
	}, nil))
	require.NoError(t, reg.Handle("paced", func(_ context.Context, task *worker.Task) error {
		mu.Lock()
		pacedStarts[task.ID] = time.Now()
		mu.Unlock()
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4, PrefetchPerShard: 2, Logger: zaptest.NewLogger(t)})
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return bulkStarts >= 8 }, 30*time.Second, time.Millisecond)

	submitted := map[string]time.Time{}
	for i := range other {
		at := time.Now()
		info, err := b.Client.Submit(context.Background(), ax.TaskSpec{Type: "paced", Key: paced, Priority: ax.P2})
		require.NoError(t, err)
		submitted[info.ID] = at
		require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(pacedStarts) > i }, 2*time.Second, time.Millisecond,
			"a task of another key waits behind bulk's backlog")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Less(t, bulkStarts, backlog-20, "bulk's backlog drained: the test proves nothing")
	for id, at := range submitted {
		waited := pacedStarts[id].Sub(at)
		t.Logf("%s: submit → start %v", id, waited)
		require.Less(t, waited, 300*time.Millisecond, "a task of another key waited behind bulk's backlog")
	}
}
