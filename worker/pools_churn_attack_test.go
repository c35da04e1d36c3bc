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
	"github.com/stretchr/testify/require"
)

// Attack (held up): workers with overlapping type sets join and leave
// quickly while tasks run. A serves {a}, C serves {b}; six workers serving
// {a, b} each join and leave after 700 ms, one after another, while 300
// tasks of each type that take 20 ms are submitted. Every task must
// succeed, run once, never two executions at once, each on a worker that
// serves its type.
func TestAttackPoolsOverlappingChurn(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{Layout: streams.LayoutPools})
	ctx := context.Background()
	var mu sync.Mutex
	ran := map[string][]string{}
	var running sync.Map // task id -> *atomic.Int32
	var overlaps atomic.Int32
	registry := func(types ...string) *worker.Registry {
		reg := worker.NewRegistry()
		for _, typ := range types {
			require.NoError(t, reg.Handle(typ, func(ctx context.Context, task *worker.Task) error {
				n, _ := running.LoadOrStore(task.ID, new(atomic.Int32))
				if n.(*atomic.Int32).Add(1) > 1 {
					overlaps.Add(1)
				}
				defer n.(*atomic.Int32).Add(-1)
				mu.Lock()
				ran[task.ID] = append(ran[task.ID], task.Worker+"/"+task.Type)
				mu.Unlock()
				select {
				case <-time.After(20 * time.Millisecond):
				case <-ctx.Done():
				}
				return nil
			}, nil))
		}
		return reg
	}
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: registry("a")})
	b.StartWorker(t, worker.Config{ID: "C", MemberTTL: memberTTL, Registry: registry("b")})

	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := range 6 {
			_, js := b.Server.Connect()
			w, err := worker.New(ctx, js, &worker.Config{ID: fmt.Sprintf("X%d", i), MemberTTL: memberTTL, Registry: registry("a", "b")})
			if err == nil {
				err = w.Start(ctx)
			}
			if err != nil {
				t.Errorf("churn worker %d: %v", i, err)
				return
			}
			time.Sleep(700 * time.Millisecond)
			stop, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := w.Stop(stop); err != nil {
				t.Errorf("stop churn worker %d: %v", i, err)
			}
			cancel()
		}
	}()
	var ids []string
	for i := range 300 {
		for _, typ := range []string{"a", "b"} {
			info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: typ, Tenant: "acme", Priority: ax.PriorityOf(i % streams.Priorities),
				ID: fmt.Sprintf("%s-%d", typ, i), Key: fmt.Sprintf("k%d", i)})
			require.NoError(t, err)
			ids = append(ids, info.ID)
		}
		time.Sleep(5 * time.Millisecond)
	}
	<-churned
	for _, id := range ids {
		b.WaitState(t, id, kv.StateSucceeded)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		runs := ran[id]
		require.Len(t, runs, 1, "task %s ran %v", id, runs)
		typ := id[:1]
		switch runs[0] {
		case "A/a", "C/b":
		default:
			require.Regexp(t, `^X\d/`+typ+`$`, runs[0], "task %s ran on a worker not serving its type", id)
		}
	}
	require.Zero(t, overlaps.Load(), "overlapping executions")
}

// Attack (held up): four workers of a type that has no consumers yet start
// at the same moment, each creating the type's 160 consumers; all start,
// and the type's tasks run once each.
func TestAttackPoolsConcurrentFirstWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{Layout: streams.LayoutPools})
	ctx := context.Background()
	r := &ranOn{ran: map[string][]string{}}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			_, js := b.Server.Connect()
			w, err := worker.New(ctx, js, &worker.Config{ID: fmt.Sprintf("N%d", i), MemberTTL: memberTTL, Registry: r.registry(t, "fresh")})
			if err == nil {
				err = w.Start(ctx)
			}
			if errs[i] = err; err == nil {
				t.Cleanup(func() {
					stop, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					_ = w.Stop(stop)
				})
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "worker N%d", i)
	}
	var ids []string
	for i := range 50 {
		info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "fresh", Tenant: "acme", Priority: ax.PriorityOf(i % streams.Priorities), Key: fmt.Sprintf("k%d", i)})
		require.NoError(t, err)
		ids = append(ids, info.ID)
	}
	for _, id := range ids {
		b.WaitState(t, id, kv.StateSucceeded)
		require.Len(t, r.runs(id), 1, "task %s", id)
	}
}
