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
)

// On a pools deployment with the types in turn and a heavy weight on the
// backlog's type, strict priority holds: P0 tasks of the light type
// submitted while both P4 backlogs wait all start before any P4 task that
// had not started when they were submitted (but the slots' in flight).
func TestAttackPoolsStrictPriorityWithWeights(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{Layout: streams.LayoutPools})
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"bulk": {Weight: kv.MaxWeight}}})
	ctx := context.Background()
	var mu sync.Mutex
	var starts []int
	reg := worker.NewRegistry()
	for _, typ := range []string{"bulk", "small"} {
		require.NoError(t, reg.Handle(typ, func(ctx context.Context, task *worker.Task) error {
			mu.Lock()
			starts = append(starts, levelOf(task.Priority))
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
			return nil
		}, nil))
	}
	for _, typ := range []string{"bulk", "small"} {
		backlog := make([]ax.TaskSpec, 400)
		for i := range backlog {
			backlog[i] = ax.TaskSpec{Type: typ, Priority: ax.P4}
		}
		_, err := b.Client.SubmitBatch(ctx, backlog)
		require.NoError(t, err)
	}
	const concurrency = 2
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: concurrency})
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(starts) >= 20 }, 30*time.Second, 5*time.Millisecond)
	urgent := make([]ax.TaskSpec, 10)
	for i := range urgent {
		urgent[i] = ax.TaskSpec{Type: "small", Priority: ax.P0}
	}
	_, err := b.Client.SubmitBatch(ctx, urgent)
	require.NoError(t, err)
	mu.Lock()
	submitted := len(starts)
	mu.Unlock()
	last := lastP0Start(t, &mu, &starts, 10)
	require.LessOrEqual(t, last, submitted+10+concurrency-1, "last P0 at %d, %d started at the submit", last, submitted)
}

// A concurrency limit beside a weight on the same type still bounds it on
// a pools deployment: "bulk" {concurrency 2, weight 3} never runs more
// than 2 at once, while "small" runs beside it.
func TestAttackPoolsWeightWithConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{Layout: streams.LayoutPools})
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"bulk": {Concurrency: 2, Weight: 3}}})
	ctx := context.Background()
	bulk, small := &gauge{}, &gauge{}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("bulk", bulk.handler(20*time.Millisecond), nil))
	require.NoError(t, reg.Handle("small", small.handler(20*time.Millisecond), nil))
	for _, typ := range []string{"bulk", "small"} {
		specs := make([]ax.TaskSpec, 100)
		for i := range specs {
			specs[i] = ax.TaskSpec{Type: typ, Priority: ax.P2}
		}
		_, err := b.Client.SubmitBatch(ctx, specs)
		require.NoError(t, err)
	}
	w, _ := b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 8})
	require.Eventually(t, func() bool { return bulk.executions.Load() == 100 && small.executions.Load() == 100 },
		60*time.Second, 10*time.Millisecond)
	require.LessOrEqual(t, bulk.peakNow(), 2, "bulk ran %d at once under a concurrency of 2", bulk.peakNow())
	require.Greater(t, small.peakNow(), 2)
	require.Positive(t, w.Stats().Limited)
}

// The same on a fair deployment: tenant:acme {concurrency 2, weight 3}.
func TestAttackFairTenantWeightWithConcurrency(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{Layout: streams.LayoutFair, Tenants: []string{"acme", "other"}})
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"tenant:acme": {Concurrency: 2, Weight: 3}}})
	ctx := context.Background()
	var mu sync.Mutex
	now, peak := map[string]int{}, map[string]int{}
	done := map[string]int{}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("job", func(ctx context.Context, task *worker.Task) error {
		mu.Lock()
		now[task.Tenant]++
		peak[task.Tenant] = max(peak[task.Tenant], now[task.Tenant])
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		now[task.Tenant]--
		done[task.Tenant]++
		mu.Unlock()
		return nil
	}, nil))
	for _, tenant := range []string{"acme", "other"} {
		specs := make([]ax.TaskSpec, 100)
		for i := range specs {
			specs[i] = ax.TaskSpec{Type: "job", Tenant: tenant, Priority: ax.P2}
		}
		_, err := b.Client.SubmitBatch(ctx, specs)
		require.NoError(t, err)
	}
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 8})
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return done["acme"] == 100 && done["other"] == 100 },
		60*time.Second, 10*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.LessOrEqual(t, peak["acme"], 2, "acme ran %d at once under a concurrency of 2", peak["acme"])
	require.Greater(t, peak["other"], 2)
}

// A weight alone holds nothing back: with "bulk" {weight 5} (a type on a
// pools deployment) and tenant:acme {weight 5}, the worker counts no
// limited delivery and runs all its slots at once.
func TestAttackWeightAloneHoldsNothingBack(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{Layout: streams.LayoutPools})
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"bulk": {Weight: 5}, "tenant:acme": {Weight: 5}}})
	ctx := context.Background()
	g := &gauge{}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("bulk", g.handler(50*time.Millisecond), nil))
	specs := make([]ax.TaskSpec, 200)
	for i := range specs {
		specs[i] = ax.TaskSpec{Type: "bulk", Tenant: "acme", Priority: ax.P2}
	}
	_, err := b.Client.SubmitBatch(ctx, specs)
	require.NoError(t, err)
	start := time.Now()
	w, _ := b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 16})
	require.Eventually(t, func() bool { return g.executions.Load() == 200 }, 30*time.Second, 5*time.Millisecond)
	t.Logf("200 tasks of 50ms on 16 slots in %s, peak %d", time.Since(start), g.peakNow())
	require.Equal(t, int64(0), w.Stats().Limited)
	require.Equal(t, int64(0), w.Stats().Paused)
	require.Equal(t, 16, g.peakNow())
}
