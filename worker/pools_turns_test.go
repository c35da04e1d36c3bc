package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// typeStarts counts the starts of each task type, in the handlers.
type typeStarts struct {
	mu sync.Mutex
	n  map[string]int
}

func (s *typeStarts) count() (bulk, small int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n["bulk"], s.n["small"]
}

// runTypeBacklogs submits 1,500 "bulk" tasks, then 1,500 "small" ones (all
// younger), on a pools deployment with the limits given, starts one worker
// of both types with 4 slots, and counts the starts of each type once
// 1,000 have started, while both backlogs wait.
func runTypeBacklogs(t *testing.T, limits kv.Limits) (bulk, small int) {
	b := setup(t, &streams.Config{Layout: streams.LayoutPools})
	if !limits.Empty() {
		setLimits(t, b.JS, limits)
	}
	for _, typ := range []string{"bulk", "small"} {
		specs := make([]ax.TaskSpec, 1500)
		for i := range specs {
			specs[i] = ax.TaskSpec{Type: typ, Priority: ax.P2}
		}
		_, err := b.Client.SubmitBatch(context.Background(), specs)
		require.NoError(t, err)
	}
	s := &typeStarts{n: map[string]int{}}
	reg := worker.NewRegistry()
	for _, typ := range []string{"bulk", "small"} {
		require.NoError(t, reg.Handle(typ, func(_ context.Context, task *worker.Task) error {
			s.mu.Lock()
			s.n[task.Type]++
			s.mu.Unlock()
			time.Sleep(2 * time.Millisecond)
			return nil
		}, nil))
	}
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4, PrefetchPerShard: 8, Logger: zaptest.NewLogger(t)})
	require.Eventually(t, func() bool { bulk, small := s.count(); return bulk+small >= 1000 }, 60*time.Second, 5*time.Millisecond)
	bulk, small = s.count()
	t.Logf("starts: bulk %d, small %d (ratio %.2f)", bulk, small, float64(bulk)/float64(max(small, 1)))
	require.Less(t, bulk, 1500, "bulk's backlog drained: the test proves nothing")
	require.Less(t, small, 1500, "small's backlog drained: the test proves nothing")
	return bulk, small
}

// On a pools deployment the types a worker serves take turns: small's
// tasks, all younger than bulk's backlog, start one for one with bulk's
// (by age alone, bulk's queued deliveries go first whenever it has any).
func TestPoolsTypesTakeTurns(t *testing.T) {
	t.Parallel()
	bulk, small := runTypeBacklogs(t, kv.Limits{})
	require.InDelta(t, 1, float64(bulk)/float64(max(small, 1)), 0.3, "bulk %d, small %d", bulk, small)
}

// A type's weight is its share of a turn on a pools deployment: bulk at
// weight 3 starts about three tasks for each of small's.
func TestPoolsTypeWeight(t *testing.T) {
	t.Parallel()
	bulk, small := runTypeBacklogs(t, kv.Limits{Limits: map[string]kv.Limit{"bulk": {Weight: 3}}})
	require.InDelta(t, 3, float64(bulk)/float64(max(small, 1)), 0.8, "bulk %d, small %d", bulk, small)
}
