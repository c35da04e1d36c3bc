package worker_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// recordWrites watches a task's record key and returns a function that
// gives the revisions seen, once the task reached a final state. The
// bucket keeps one revision per key and the watch is an ordered consumer,
// which starts over after the last revision it got when it falls behind
// (a missed heartbeat on a loaded machine): a revision overwritten
// meanwhile is not seen. Tests hold what they see to be in order, with
// nothing repeated ([requireWrittenInOrder]): a lost revision hides a
// write, an extra one still shows.
func recordWrites(t *testing.T, b *testBundle, ref kv.Ref) func() []*kv.Record {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := b.Store.Bucket().Watch(ctx, ref.Key(), jetstream.UpdatesOnly())
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Stop() })
	return func() []*kv.Record {
		var out []*kv.Record
		timeout := time.After(30 * time.Second)
		for {
			select {
			case e := <-w.Updates():
				if e == nil || e.Operation() != jetstream.KeyValuePut {
					continue
				}
				var rec kv.Record
				require.NoError(t, rec.UnmarshalJSON(e.Value()))
				out = append(out, &rec)
				if rec.State == kv.StateSucceeded || rec.State == kv.StateDead {
					return out
				}
			case <-timeout:
				t.Fatalf("task %s did not end: %d writes seen", ref, len(out))
			}
		}
	}
}

// A handler's result is stored by the compare-and-set that makes the task
// SUCCEEDED: no other write, and Client.Result reads it.
func TestResultStoredWithSuccess(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("sum", func(ctx context.Context, task *worker.Task) error {
		return task.SetResultJSON(map[string]int{"sum": 42})
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL})
	writes := recordWrites(t, b, kv.Ref{Tenant: "acme", ID: "sum-1"})
	info, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "sum-1", Type: "sum", Tenant: "acme"})
	require.NoError(t, err)
	rec := b.WaitState(t, info.ID, kv.StateSucceeded)
	require.JSONEq(t, `{"sum":42}`, string(rec.Result))
	result, err := b.Client.Result(ctx, "acme", info.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"sum":42}`, string(result))

	var states []kv.State
	for _, r := range writes() {
		states = append(states, r.State)
	}
	requireWrittenInOrder(t, []kv.State{kv.StateReady, kv.StateRunning, kv.StateSucceeded}, states, "the result costs no write of its own")
}

// A result above MaxResultBytes fails the attempt permanently, naming the
// bound; a failed attempt's result is not stored.
func TestResultTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("big", func(ctx context.Context, task *worker.Task) error {
		task.SetResult([]byte(strings.Repeat("x", 11)))
		return nil
	}, &worker.TypeConfig{MaxAttempts: 3}))
	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL, MaxResultBytes: 10})
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "big"})
	require.NoError(t, err)
	rec := b.WaitState(t, info.ID, kv.StateDead)
	require.Equal(t, 1, rec.Attempt, "permanent: not retried")
	require.Contains(t, rec.LastError, worker.ErrResultTooLarge.Error())
	require.Contains(t, rec.LastError, "11 bytes, above the worker's MaxResultBytes (10 bytes)")
	require.Empty(t, rec.Result)

	_, err = worker.New(ctx, b.JS, &worker.Config{Registry: reg, MaxResultBytes: 1 << 20})
	require.ErrorContains(t, err, "MaxResultBytes 1048576")
	require.ErrorContains(t, err, "max_payload")
}

// Progress is written at most once per ProgressEvery, fenced, and the last
// report is folded into the outcome's write.
func TestProgressThrottledAndFolded(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	reg := worker.NewRegistry()
	var ref kv.Ref
	seen := make(chan error, 1)
	require.NoError(t, reg.Handle("long", func(ctx context.Context, task *worker.Task) error {
		ref = kv.Ref{Tenant: task.Tenant, ID: task.ID}
		for i := 1; i <= 5; i++ {
			if err := task.Progress(ctx, float64(i*10), "step"); err != nil {
				return err
			}
		}
		// The first report was written; the others wait for the next write.
		rec, _, err := b.Store.Get(ctx, ref)
		if err == nil && (rec.Progress == nil || rec.Progress.Percent != 10) {
			err = errors.New("first report not written")
		}
		seen <- err
		return task.Progress(ctx, 101, "too far") // refused, not written
	}, &worker.TypeConfig{MaxAttempts: 1}))
	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL, ProgressEvery: time.Hour})
	all := recordWrites(t, b, kv.Ref{Tenant: ax.DefaultTenant, ID: "long-1"})
	info, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "long-1", Type: "long"})
	require.NoError(t, err)
	require.NoError(t, <-seen)
	rec := b.WaitState(t, info.ID, kv.StateDead) // percent 101 is an error
	require.Contains(t, rec.LastError, "percent 101 is not 0..100")
	require.NotNil(t, rec.Progress)
	require.Equal(t, 50.0, rec.Progress.Percent, "the last report is folded into the outcome")
	require.Equal(t, "step", rec.Progress.Note)
	var writes []float64
	for _, r := range all() {
		if r.Progress != nil {
			writes = append(writes, r.Progress.Percent)
		}
	}
	requireWrittenInOrder(t, []float64{10, 50}, writes, "one progress write, then the outcome")
}

// A handler whose claim lapsed cannot write progress: Progress returns
// the cause and writes nothing, and nothing is folded into a later write.
func TestProgressFencedAfterLapse(t *testing.T) {
	t.Parallel()
	const ackWait = 3 * time.Second
	b := setup(t, &streams.Config{AckWait: ackWait})
	ctx := context.Background()
	reg := worker.NewRegistry()
	var once sync.Once
	lapsed := make(chan error, 1)
	require.NoError(t, reg.Handle("slow", func(ctx context.Context, task *worker.Task) error {
		first := false
		once.Do(func() { first = true })
		if !first {
			return nil // the redelivery completes it
		}
		<-ctx.Done() // no heartbeats: the claim lapses
		lapsed <- task.Progress(ctx, 50, "late")
		return ctx.Err()
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, AckWait: ackWait, MemberTTL: memberTTL, Shards: axtest.AllShards(),
		Test: worker.TestConfig{DisableHeartbeats: true}})
	all := recordWrites(t, b, kv.Ref{Tenant: ax.DefaultTenant, ID: "slow-1"})
	info, err := b.Client.Submit(ctx, ax.TaskSpec{ID: "slow-1", Type: "slow"})
	require.NoError(t, err)
	require.ErrorIs(t, <-lapsed, worker.ErrClaimLapsed)
	rec := b.WaitState(t, info.ID, kv.StateSucceeded)
	require.Nil(t, rec.Progress)
	for _, r := range all() {
		require.Nil(t, r.Progress, "revision in %s", r.State)
	}
}

// requireWrittenInOrder requires the revisions seen by [recordWrites] to
// be want, or want with some left out (revisions the watch missed), and
// the last one seen to be want's last.
func requireWrittenInOrder[T comparable](t *testing.T, want, seen []T, msg string) {
	t.Helper()
	require.NotEmpty(t, seen, msg)
	require.Equal(t, want[len(want)-1], seen[len(seen)-1], "%s: the last write, in %v", msg, seen)
	i := 0
	for _, v := range seen {
		for i < len(want) && want[i] != v {
			i++
		}
		require.Less(t, i, len(want), "%s: %v written, want %v in this order (some may be missed)", msg, seen, want)
		i++
	}
}
