package scheduler_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"
)

// starts records when each task started, counted in the handler.
type starts struct {
	mu sync.Mutex
	at map[string]time.Time // task id -> first start
	n  map[string]int       // tenant -> starts
}

func newStarts() *starts { return &starts{at: map[string]time.Time{}, n: map[string]int{}} }

func (s *starts) handler(delay time.Duration) worker.HandlerFunc {
	return func(ctx context.Context, t *worker.Task) error {
		s.mu.Lock()
		if _, ok := s.at[t.Tenant+"/"+t.ID]; !ok {
			s.at[t.Tenant+"/"+t.ID] = time.Now()
			s.n[t.Tenant]++
		}
		s.mu.Unlock()
		time.Sleep(delay)
		return nil
	}
}

func (s *starts) count(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[tenant]
}

func (s *starts) startedAt(tenant, id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.at[tenant+"/"+id]
	return at, ok
}

func submitJobs(t *testing.T, c *ax.Client, tenant string, n int) []string {
	t.Helper()
	specs := make([]ax.TaskSpec, n)
	for i := range specs {
		specs[i] = ax.TaskSpec{Type: "job", Tenant: tenant, Priority: ax.P2}
	}
	infos, err := c.SubmitBatch(context.Background(), specs)
	require.NoError(t, err)
	ids := make([]string, len(infos))
	for i, info := range infos {
		ids[i] = info.ID
	}
	return ids
}

// On a fair deployment a tenant's backlog does not hold back another
// tenant's tasks of the same priority: "small" submits one task every 20 ms
// while "bulk" has 3,000 waiting, and each small task starts within 2 s
// (by the handler's clock; 0.03 s on a quiet machine), long before bulk's
// backlog drains (about 4 s of work). On a deployment without fair shares
// the small tasks wait behind the backlog, 8 s (set layout to
// streams.LayoutShared to see it fail).
func TestFairSharesBetweenTenants(t *testing.T) {
	t.Parallel()
	const layout = streams.LayoutFair
	b := setupLoops(t, 1, &streams.Config{Layout: layout}, scheduler.Config{Logger: zaptest.NewLogger(t)})
	s := newStarts()
	b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "job", s.handler(5*time.Millisecond)), Concurrency: 4})
	// Both tenants known first (the first task of a new tenant waits for
	// its consumers).
	for _, tenant := range []string{"bulk", "small"} {
		id := submitJobs(t, b.Client, tenant, 1)[0]
		require.Eventually(t, func() bool { _, ok := s.startedAt(tenant, id); return ok }, 30*time.Second, 10*time.Millisecond, tenant)
	}
	bulk := submitJobs(t, b.Client, "bulk", 3000)
	require.Eventually(t, func() bool { return s.count("bulk") > 20 }, 30*time.Second, 10*time.Millisecond)
	submitted := map[string]time.Time{}
	var small []string
	for range 20 {
		at := time.Now()
		id := submitJobs(t, b.Client, "small", 1)[0]
		submitted[id] = at
		small = append(small, id)
		time.Sleep(20 * time.Millisecond)
	}
	require.Eventually(t, func() bool { return s.count("small") == 21 }, 60*time.Second, 10*time.Millisecond)
	var waits []time.Duration
	for _, id := range small {
		at, _ := s.startedAt("small", id)
		waits = append(waits, at.Sub(submitted[id]))
	}
	slices.Sort(waits)
	left := len(bulk) + 1 - s.count("bulk")
	t.Logf("small's waits %v; bulk tasks not started when small's last started: %d", waits, left)
	require.Greater(t, left, 500, "bulk's backlog had drained: the test proves nothing")
	require.Less(t, waits[len(waits)-1], 2*time.Second, "a small task waited behind bulk's backlog")
}

// A tenant whose tasks were submitted while no leader ran is found by the
// leader's scan of the buckets when one is elected: its consumers are made
// and its tasks run. A tenant the leader hears gets its consumers too.
func TestTenantsFoundWithoutALeader(t *testing.T) {
	t.Parallel()
	b := &loopsBundle{Bundle: axtest.Setup(t, axtest.Options{Streams: &streams.Config{Layout: streams.LayoutFair}})}
	js, client := b.JS, b.Client
	early := submitJobs(t, client, "early", 30)
	b.contenders = append(b.contenders, startContender(t, b.Bundle, scheduler.Config{}))
	b.leader = waitLeader(t, b.contenders...)
	s := newStarts()
	b.StartWorker(t, worker.Config{Registry: axtest.Registry(t, "job", s.handler(0)), Concurrency: 4})
	require.Eventually(t, func() bool { return s.count("early") == len(early) }, 30*time.Second, 10*time.Millisecond)
	late := submitJobs(t, client, "late", 5)
	require.Eventually(t, func() bool { return s.count("late") == len(late) }, 30*time.Second, 10*time.Millisecond)

	board, err := control.Open(context.Background(), js, streams.Names{})
	require.NoError(t, err)
	listed, _, err := control.ReadTenants(context.Background(), board)
	require.NoError(t, err)
	require.Equal(t, []string{"early", "late"}, listed.Tenants)
	stream, err := js.Stream(context.Background(), "AX_P2")
	require.NoError(t, err)
	names := stream.ConsumerNames(context.Background())
	var consumers []string
	for n := range names.Name() {
		consumers = append(consumers, n)
	}
	require.NoError(t, names.Err())
	require.Len(t, consumers, 2*streams.Shards, "one consumer per shard and tenant: %v", consumers)
	require.Contains(t, consumers, fmt.Sprintf("p2-s%02d-n-early", 7))
}

// Workers of a fair deployment split the shards of every tenant as the
// mesh splits the catch-all shards: a worker that joins takes its share of
// each tenant's consumers (the tenants listed before it started), one that
// leaves hands its share back, and every task runs once.
func TestFairMeshSplitsEveryTenant(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, &streams.Config{Layout: streams.LayoutFair, Tenants: []string{"a", "b"}}, scheduler.Config{Logger: zaptest.NewLogger(t)})
	var mu sync.Mutex
	runs := map[string]int{}
	handle := func(ctx context.Context, task *worker.Task) error {
		mu.Lock()
		runs[task.Tenant+"/"+task.ID]++
		mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		return nil
	}
	ctx := context.Background()
	start := func() *worker.Worker {
		reg := worker.NewRegistry()
		require.NoError(t, reg.Handle("job", handle, nil))
		w, _ := b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 4})
		return w
	}
	first := start()
	ids := map[string][]string{}
	for _, tenant := range []string{"a", "b", "c"} {
		ids[tenant] = submitJobs(t, b.Client, tenant, 300)
	}
	second := start()
	board, err := control.Open(ctx, b.JS, streams.Names{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		e, err := board.Get(ctx, control.ShardTableKey)
		if err != nil {
			return false
		}
		var table worker.ShardTable
		return json.Unmarshal(e.Value(), &table) == nil && len(table.Members) == 2 &&
			len(table.Owners.Shards(first.ID())) > 0 && len(table.Owners.Shards(second.ID())) > 0
	}, 30*time.Second, 20*time.Millisecond, "the two workers split the shards")
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, first.Stop(sctx))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == 900
	}, 60*time.Second, 20*time.Millisecond, "every task runs")
	mu.Lock()
	defer mu.Unlock()
	for tenant, list := range ids {
		for _, id := range list {
			require.Equal(t, 1, runs[tenant+"/"+id], "task %s/%s", tenant, id)
		}
	}
}

// A submit that no bucket stored makes no consumers: the leader hears it
// but finds none of the tenant's tasks (here the bucket is full).
func TestRefusedSubmitMakesNoTenant(t *testing.T) {
	t.Parallel()
	b := setupLoops(t, 1, &streams.Config{Layout: streams.LayoutFair, Capacity: 2}, scheduler.Config{Logger: zaptest.NewLogger(t)})
	ctx := context.Background()
	submitJobs(t, b.Client, "filler", 2)
	board, err := control.Open(ctx, b.JS, streams.Names{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		listed, _, err := control.ReadTenants(ctx, board)
		return err == nil && slices.Contains(listed.Tenants, "filler")
	}, 30*time.Second, 20*time.Millisecond, "a stored tenant gets its consumers")
	_, err = b.JS.Publish(ctx, "ax.submit.p2.ghost.job.k", nil)
	require.Error(t, err, "the full bucket refuses it")
	time.Sleep(3 * time.Second) // the leader looks for the tenant's tasks for 2 s
	listed, _, err := control.ReadTenants(ctx, board)
	require.NoError(t, err)
	require.Equal(t, []string{"filler"}, listed.Tenants)
	_, err = b.JS.Consumer(ctx, "AX_P2", "p2-s00-n-ghost")
	require.ErrorIs(t, err, jetstream.ErrConsumerNotFound)
}
