package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// ranOn records which worker ran each task.
type ranOn struct {
	mu  sync.Mutex
	ran map[string][]string // task id -> worker ids, one per execution
}

// registry returns a registry of types whose handlers record their runs.
func (r *ranOn) registry(t *testing.T, types ...string) *worker.Registry {
	reg := worker.NewRegistry()
	for _, typ := range types {
		require.NoError(t, reg.Handle(typ, func(_ context.Context, task *worker.Task) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.ran[task.ID] = append(r.ran[task.ID], task.Worker+"/"+task.Type)
			return nil
		}, nil))
	}
	return reg
}

func (r *ranOn) runs(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ran[id]...)
}

// On a pools deployment each worker receives only the types it registers;
// a worker serving two types is in both rings; a type no worker serves
// waits in its bucket (never dead-lettered) and runs once a worker for it
// starts.
func TestPoolsRouteByType(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{Layout: streams.LayoutPools})
	ctx := context.Background()
	r := &ranOn{ran: map[string][]string{}}
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: r.registry(t, "email")})
	b.StartWorker(t, worker.Config{ID: "B", MemberTTL: memberTTL, Registry: r.registry(t, "resize")})
	b.StartWorker(t, worker.Config{ID: "C", MemberTTL: memberTTL, Registry: r.registry(t, "email", "resize")})

	var ids []string
	submit := func(typ string, n int) {
		for i := range n {
			info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: typ, Tenant: "acme", Priority: ax.PriorityOf(i % streams.Priorities),
				ID: fmt.Sprintf("%s-%d", typ, i), Key: fmt.Sprintf("k%d", i)})
			require.NoError(t, err)
			ids = append(ids, info.ID)
		}
	}
	submit("email", 100)
	submit("resize", 100)
	submit("report", 20)
	for _, id := range ids[:200] {
		b.WaitState(t, id, kv.StateSucceeded)
	}
	for _, id := range ids[:200] {
		runs := r.runs(id)
		require.Len(t, runs, 1, "task %s", id)
	}
	byWorker := map[string]int{}
	for _, id := range ids[:200] {
		run := r.runs(id)[0]
		byWorker[run]++
		switch run {
		case "A/email", "B/resize", "C/email", "C/resize":
		default:
			t.Fatalf("task %s ran as %s: a worker ran a type it does not register", id, run)
		}
	}
	require.Positive(t, byWorker["C/email"]+byWorker["C/resize"], "C is in both rings")

	// The report tasks wait: READY, still in their buckets, never run.
	for _, id := range ids[200:] {
		rec, _, err := b.Store.Get(ctx, kv.Ref{Tenant: "acme", ID: id})
		require.NoError(t, err)
		require.Equal(t, kv.StateReady, rec.State, "task %s", id)
		require.Empty(t, r.runs(id))
	}
	b.StartWorker(t, worker.Config{ID: "D", MemberTTL: memberTTL, Registry: r.registry(t, "report")})
	for _, id := range ids[200:] {
		b.WaitState(t, id, kv.StateSucceeded)
		require.Equal(t, []string{"D/report"}, r.runs(id))
	}

	// Members announce their types and the shards they own per type: the
	// two members of each ring split its 32 shards.
	require.Eventually(t, func() bool {
		ms, err := kv.ListMembers(ctx, b.JS, streams.Names{})
		if err != nil || len(ms) != 4 {
			return false
		}
		owned := map[string]int{}
		for _, m := range ms {
			for typ, shards := range m.Pools {
				owned[typ] += len(shards)
			}
		}
		return owned["email"] == streams.Shards && owned["resize"] == streams.Shards && owned["report"] == streams.Shards
	}, 30*time.Second, 50*time.Millisecond)
}

// A worker narrowed to part of its types (Registry.Only, what `ax worker
// --types` builds) refuses to start on the default layout, where it would
// receive every type and dead-letter the others; a pools deployment routes
// it only its types (TestPoolsRouteByType).
func TestNarrowedWorkerRefusedOnDefaultLayout(t *testing.T) {
	t.Parallel()
	b := setup(t, nil) // the default layout
	ctx := context.Background()
	full := (&ranOn{ran: map[string][]string{}}).registry(t, "a", "b")
	narrowed, err := full.Only("a")
	require.NoError(t, err)
	_, js := b.Server.Connect()
	w, err := worker.New(ctx, js, &worker.Config{ID: "only-a", MemberTTL: memberTTL, Registry: narrowed})
	require.NoError(t, err)
	err = w.Start(ctx)
	require.ErrorIs(t, err, worker.ErrConfigMismatch)
	require.ErrorContains(t, err, "serves only a")
	require.ErrorContains(t, err, "ax provision --pools")

	// The full registry starts there as before.
	b.StartWorker(t, worker.Config{ID: "full", MemberTTL: memberTTL, Registry: full})
}
