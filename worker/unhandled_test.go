package worker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// registryOf returns a registry whose types all succeed at once.
func registryOf(t *testing.T, types ...string) *worker.Registry {
	t.Helper()
	reg := worker.NewRegistry()
	for _, typ := range types {
		require.NoError(t, reg.Handle(typ, func(context.Context, *worker.Task) error { return nil }, nil))
	}
	return reg
}

// keysOn returns n task keys whose shards are among shards.
func keysOn(shards []int, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if k := fmt.Sprintf("k%d", i); slices.Contains(shards, streams.Shard(k)) {
			out = append(out, k)
		}
	}
	return out
}

// On every priority policy of the default layout, a task whose shard is
// owned by a worker without its type's handler is not dead-lettered: that
// worker puts it back (READY, the attempt not counted, a no_handler move
// in its trail) and a worker with the handler runs it. Fails before the
// fix: the tasks on A's shards end DEAD ("no handler registered").
func TestUnhandledTypeReachesAWorkerWithIt(t *testing.T) {
	t.Parallel()
	for _, policy := range []string{"overflow", "pinned_client", "none"} {
		t.Run(policy, func(t *testing.T) {
			t.Parallel()
			b := setup(t, &streams.Config{PriorityPolicy: policy, PinnedTTL: 2 * time.Second})
			ctx := context.Background()
			wA, _ := b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: registryOf(t, "email")})
			b.StartWorker(t, worker.Config{ID: "B", MemberTTL: memberTTL, Registry: registryOf(t, "email", "charge")})
			var onA []int
			for _, m := range waitMembers(t, b.JS, "A", "B") {
				if m.ID == "A" {
					onA = m.Shards
					require.Equal(t, []string{"email"}, m.Handles)
				} else {
					require.Equal(t, []string{"charge", "email"}, m.Handles)
				}
			}
			var ids []string
			for i, key := range keysOn(onA, 8) {
				info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "charge", Key: key, Priority: ax.PriorityOf(i % 5)})
				require.NoError(t, err)
				ids = append(ids, info.ID)
			}
			for _, id := range ids {
				var rec *kv.Record
				require.Eventually(t, func() bool {
					r, _, err := b.Store.Get(ctx, kv.Ref{Tenant: ax.DefaultTenant, ID: id})
					require.NoError(t, err)
					require.NotEqual(t, kv.StateDead, r.State, "task %s dead: %s", id, r.LastError)
					rec = r
					return r.State == kv.StateSucceeded
				}, 30*time.Second, 20*time.Millisecond, "task %s: %+v", id, rec)
				require.Equal(t, "B", rec.Worker)
				require.Equal(t, 1, rec.Attempt)
				for _, mv := range rec.Trail {
					if mv.Action == worker.ActionNoHandler {
						require.Equal(t, "A", mv.Worker)
						require.Equal(t, kv.StateReady, mv.To)
						require.Contains(t, mv.Error, `worker A has no handler for task type "charge" (it handles email)`)
					}
				}
			}
			require.Zero(t, wA.Stats().Dead)
			t.Logf("%s: A put %d deliveries back", policy, wA.Stats().Unhandled)
		})
	}
}

// With no live worker that has the handler, the task waits READY (its
// attempt not counted, no write per redelivery after the first put-back),
// and its type is in the worker's member record (Unhandled) and in the
// unserved types; a worker with the handler that joins runs it.
func TestUnhandledTypeWaitsForItsWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: registryOf(t, "email")})
	waitMembers(t, b.JS, "A")
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "charge"})
	require.NoError(t, err)
	var rec *kv.Record
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		r, _, err := b.Store.Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
		if assert.NoError(c, err) {
			rec = r
			assert.Equal(c, worker.ActionNoHandler, r.LastMove().Action)
		}
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, kv.StateReady, rec.State)
	require.Zero(t, rec.Attempt)
	require.Zero(t, rec.MaxAttempts, "the defaults are the handler's to set")
	_, rev, err := b.Store.Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		members, err := kv.ListMembers(ctx, b.JS, streams.Names{})
		if assert.NoError(c, err) && assert.Len(c, members, 1) {
			assert.Equal(c, []string{"charge"}, members[0].Unhandled)
		}
		unserved, err := kv.UnservedTypes(ctx, b.JS, streams.Names{})
		if assert.NoError(c, err) && assert.Len(c, unserved, 1) {
			assert.Equal(c, "charge", unserved[0].Type)
			assert.EqualValues(c, 1, unserved[0].Depth)
		}
	}, 30*time.Second, 50*time.Millisecond)
	time.Sleep(2 * time.Second) // redeliveries (250 ms, 500 ms, 1 s) write nothing
	r, rev2, err := b.Store.Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
	require.NoError(t, err)
	require.Equal(t, rev, rev2, "no write per redelivery: %v", axtest.Moves(r))

	b.StartWorker(t, worker.Config{ID: "B", MemberTTL: memberTTL, Registry: registryOf(t, "email", "charge")})
	rec = b.WaitState(t, info.ID, kv.StateSucceeded)
	require.Equal(t, "B", rec.Worker)
	require.Equal(t, 1, rec.Attempt)
}
