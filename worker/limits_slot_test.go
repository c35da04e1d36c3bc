package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
)

// A slot that a renewal finds gone (it expired unrenewed and another
// worker took it, as after a freeze of the worker or a stall of the
// server) is lost for good: the handler running on it sees Held() false
// and its context cancelled with ErrLimitSlotLost; the slot is not handed
// on to the task parked behind it, which starts only once AX_LIMITS gives
// it a slot; and the cancelled task is put back (trail action
// limit_slot_lost, its attempt not counted) and runs again. Here the
// other holder is written into AX_LIMITS by hand. Fails before the fix:
// the renewal only logged the loss, the handler ran on held, and the slot
// went to the parked task beside the other holder.
func TestLostSlotIsNeverHandedOnAndFencesItsHandler(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"partner": {Concurrency: 1}}})

	type run struct {
		id    string
		start time.Time
	}
	var mu sync.Mutex
	var runs []run
	var firstCause error
	firstRunning := make(chan *worker.Task, 1)
	firstEnded := make(chan struct{})
	handler := func(ctx context.Context, task *worker.Task) error {
		mu.Lock()
		runs = append(runs, run{id: task.ID, start: time.Now()})
		first := len(runs) == 1
		mu.Unlock()
		if !first {
			return nil
		}
		firstRunning <- task
		<-ctx.Done()
		mu.Lock()
		firstCause = context.Cause(ctx)
		mu.Unlock()
		close(firstEnded)
		return context.Cause(ctx)
	}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("partner", handler, nil))
	w, _ := b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 4})

	first, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", ID: "first", Key: "k1"})
	require.NoError(t, err)
	var task *worker.Task
	select {
	case task = <-firstRunning:
	case <-time.After(10 * time.Second):
		t.Fatal("the first task did not start")
	}
	require.True(t, task.Held())
	second, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", ID: "second", Key: "k2"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.Stats().Limited > 0 }, 5*time.Second, 10*time.Millisecond,
		"the second task did not wait for the slot")

	// Another holder takes the slot, as another worker does once it has
	// expired unrenewed.
	bucket, err := b.JS.KeyValue(ctx, streams.Names{}.LimitsBucket())
	require.NoError(t, err)
	intruder := func(until time.Time) []byte {
		data, err := json.Marshal(kv.Slots{Target: "partner", Holders: map[string]int64{"B/other": until.UnixMilli()}})
		require.NoError(t, err)
		return data
	}
	_, err = bucket.Put(ctx, kv.SlotsKey("partner"), intruder(time.Now().Add(time.Hour)))
	require.NoError(t, err)
	lostAt := time.Now()

	select {
	case <-firstEnded:
	case <-time.After(memberTTL / 2):
		// The next renewal (every third of the TTL) finds it gone; the
		// slot's trust alone would end it only later (TTL - margin after
		// the last confirmed renewal: at least half the TTL from now).
		t.Fatal("the handler on the lost slot was not cancelled at the next renewal")
	}
	t.Logf("handler cancelled %s after the slot was taken", time.Since(lostAt).Round(time.Millisecond))
	mu.Lock()
	require.True(t, errors.Is(firstCause, worker.ErrLimitSlotLost), "cause: %v", firstCause)
	mu.Unlock()
	require.False(t, task.Held(), "Held() true on a lost slot")

	// Nothing of the limit starts while the other holder has the slot.
	time.Sleep(memberTTL / 2)
	mu.Lock()
	require.Len(t, runs, 1, "a task started beside the slot's other holder: %v", runs)
	mu.Unlock()

	// The other holder gives it back: both tasks run, one at a time.
	_, err = bucket.Put(ctx, kv.SlotsKey("partner"), intruder(time.Now()))
	require.NoError(t, err)
	for _, id := range []string{first.ID, second.ID} {
		rec := b.WaitState(t, id, kv.StateSucceeded)
		require.Equal(t, 1, rec.Attempt, "%s: a lost slot used up an attempt", id)
	}
	rec := b.WaitState(t, first.ID, kv.StateSucceeded)
	actions := []string{}
	for _, e := range rec.Trail {
		actions = append(actions, e.Action)
	}
	require.Contains(t, actions, worker.ActionSlotLost)
	require.Positive(t, w.Stats().SlotLost)
}
