package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/stretchr/testify/require"
)

// A worker whose handler freezes past the task's claim (heartbeats
// disabled, so the ack wait lapses) while its shard moves to a newcomer:
// the newcomer takes the task over and completes it; when the frozen
// handler wakes, its context is cancelled (ErrClaimLapsed), so the side
// effect — one key per execution in a KV bucket — exists once, the record
// is SUCCEEDED exactly once, and the trail shows the hand-over from A to B.
func TestFrozenWorkerIsFenced(t *testing.T) {
	t.Parallel()
	const ackWait = 3 * time.Second
	b := setup(t, &streams.Config{AckWait: ackWait})
	ctx := context.Background()
	effects, err := b.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "EFFECTS"})
	require.NoError(t, err)

	frozen := make(chan string, 1)
	unfreeze := make(chan struct{})
	woke := make(chan error, 1)
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("charge", func(ctx context.Context, task *worker.Task) error {
		if task.Worker == "A" {
			frozen <- task.ID
			<-unfreeze // a stop-the-world pause: no heartbeats, no ack
			defer func() { woke <- context.Cause(ctx) }()
		}
		if err := ctx.Err(); err != nil {
			return err // a handler checks its context before its side effect
		}
		_, err := effects.Create(ctx, task.ID+"."+nuid.Next(), []byte(task.Worker))
		return err
	}, nil))

	wA, _ := b.StartWorker(t, worker.Config{ID: "A", Registry: reg, AckWait: ackWait, MemberTTL: memberTTL,
		Concurrency: 2, Test: worker.TestConfig{DisableHeartbeats: true}})
	waitMembers(t, b.JS, "A")

	// A key on a shard that B will own once it joins.
	var all worker.Assignment
	for s := range all {
		all[s] = "A"
	}
	toB := worker.Rebalance(all, []string{"A", "B"}).Shards("B")
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("k%d", i); streams.Shard(k) == toB[0] {
			key = k
		}
	}
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "charge", Key: key})
	require.NoError(t, err)
	require.Equal(t, info.ID, <-frozen)

	b.StartWorker(t, worker.Config{ID: "B", Registry: reg, AckWait: ackWait, MemberTTL: memberTTL})
	rec := b.WaitState(t, info.ID, kv.StateSucceeded)
	require.Equal(t, "B", rec.Worker)

	close(unfreeze)
	require.ErrorIs(t, <-woke, worker.ErrClaimLapsed)

	// The side effect happened once, by B.
	keys, err := effects.ListKeys(ctx)
	require.NoError(t, err)
	var runs []string
	for k := range keys.Keys() {
		if strings.HasPrefix(k, info.ID+".") {
			e, err := effects.Get(ctx, k)
			require.NoError(t, err)
			runs = append(runs, string(e.Value()))
		}
	}
	require.Equal(t, []string{"B"}, runs)

	// SUCCEEDED exactly once, after a takeover of A's lapsed claim.
	rec, _, err = b.Store.Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
	require.NoError(t, err)
	require.Equal(t, kv.StateSucceeded, rec.State)
	require.Equal(t, []string{">READY", "READY>RUNNING", "RUNNING>READY", "READY>RUNNING", "RUNNING>SUCCEEDED"}, axtest.Moves(rec))
	require.Equal(t, "A", rec.Trail[1].Worker)
	require.Equal(t, "takeover", rec.Trail[2].Action)
	require.Contains(t, rec.Trail[2].Error, "worker A")
	require.Equal(t, "B", rec.Trail[3].Worker)
	require.Equal(t, 2, rec.Attempt, "the lost attempt counts")
	require.Equal(t, 1, rec.Lost)
	require.Eventually(t, func() bool { return wA.Stats().Dropped >= 1 }, 10*time.Second, 20*time.Millisecond,
		"A records its lost claim")
}

// A worker whose membership lease is taken from it (here: deleted, as an
// expiry during a partition would) stops: its running handler is cancelled
// with ErrLeaseLost (which is also a kv.ErrLeaseLost) and the task goes back to READY without counting the
// attempt; the worker joins again and the task then succeeds.
func TestLostMembershipStopsWork(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	causes := make(chan error, 1)
	var first atomic.Bool
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("job", func(ctx context.Context, task *worker.Task) error {
		if first.CompareAndSwap(false, true) {
			<-ctx.Done()
			causes <- context.Cause(ctx)
			return ctx.Err()
		}
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{ID: "A", Registry: reg, MemberTTL: memberTTL})
	waitMembers(t, b.JS, "A")
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "job"})
	require.NoError(t, err)
	b.WaitState(t, info.ID, kv.StateRunning)

	members, err := b.JS.KeyValue(ctx, "AX_WORKERS")
	require.NoError(t, err)
	require.NoError(t, members.Delete(ctx, "A"))
	cause := <-causes
	require.ErrorIs(t, cause, worker.ErrLeaseLost)
	require.ErrorIs(t, cause, kv.ErrLeaseLost, "the worker's sentinel wraps the lease's")

	rec := b.WaitState(t, info.ID, kv.StateSucceeded)
	require.Equal(t, []string{">READY", "READY>RUNNING", "RUNNING>READY", "READY>RUNNING", "RUNNING>SUCCEEDED"}, axtest.Moves(rec))
	require.Equal(t, "membership_lost", rec.Trail[2].Action)
	require.Equal(t, 1, rec.Attempt)
	waitMembers(t, b.JS, "A") // it joined again
}
