package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Weights changed again and again while a concurrency-limited type's
// tasks run, park and are handed slots: every limits change swaps the
// worker's flow table (handed slots given back, parked deliveries
// redispatched), and the concurrency bound must still hold, no task lost.
func TestAttackWeightChurnKeepsConcurrencyBound(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{Layout: streams.LayoutPools})
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"bulk": {Concurrency: 2}}})
	ctx := context.Background()
	bulk, small := &gauge{}, &gauge{}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("bulk", bulk.handler(10*time.Millisecond), nil))
	require.NoError(t, reg.Handle("small", small.handler(10*time.Millisecond), nil))
	for _, typ := range []string{"bulk", "small"} {
		specs := make([]ax.TaskSpec, 150)
		for i := range specs {
			specs[i] = ax.TaskSpec{Type: typ, Priority: ax.P2}
		}
		_, err := b.Client.SubmitBatch(ctx, specs)
		require.NoError(t, err)
	}
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 8})
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 8})
	stop := make(chan struct{})
	churned := make(chan int)
	go func() {
		n := 0
		defer func() { churned <- n }()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(15 * time.Millisecond):
			}
			l := kv.Limits{Limits: map[string]kv.Limit{"bulk": {Concurrency: 2, Weight: i%4 + 1}, "small": {Weight: i%3 + 1}}}
			if i%5 == 4 {
				l = kv.Limits{Limits: map[string]kv.Limit{"bulk": {Concurrency: 2}}}
			}
			setLimits(t, b.JS, l)
			n++
		}
	}()
	ok := assert.Eventually(t, func() bool { return bulk.executions.Load() >= 150 && small.executions.Load() >= 150 }, 90*time.Second, 10*time.Millisecond)
	close(stop)
	n := <-churned
	t.Logf("limits changed %d times; bulk %d (peak %d), small %d (peak %d)", n, bulk.executions.Load(), bulk.peakNow(), small.executions.Load(), small.peakNow())
	require.True(t, ok, "not every task ran")
	require.LessOrEqual(t, bulk.peakNow(), 2, "bulk ran %d at once under a concurrency of 2", bulk.peakNow())
}
