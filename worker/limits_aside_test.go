package worker_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
)

// A limited backlog larger than its shard consumer's ack-pending room does
// not hold back the shard's other tasks: the worker parks at most half of
// the consumer's MaxAckPending and steps the rest aside into AX_DELAYED,
// out of the consumer's pending, so the unlimited tasks behind them on the
// same key are delivered and run while the limited backlog still waits.
// Each limited task still runs once, never two at a time. Fails without the
// step aside: with MaxAckPending 20, the 10 unlimited tasks wait until 40
// of the 60 limited ones have run. Half the limited tasks are raw
// publishes, whose records a worker creates.
func TestLimitedBacklogLeavesItsShardFree(t *testing.T) {
	t.Parallel()
	b := setup(t, &streams.Config{MaxAckPending: 20})
	b.StartLeader(t, scheduler.Config{})
	ctx := context.Background()
	var limited, free gauge
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("partner", limited.handler(100*time.Millisecond), nil))
	require.NoError(t, reg.Handle("email", free.handler(0), nil))
	holds := &holdCounter{}
	w, _ := b.StartWorker(t, worker.Config{ID: "A", MemberTTL: memberTTL, Registry: reg, Concurrency: 8, Observer: holds})
	setLimits(t, b.JS, kv.Limits{Limits: map[string]kv.Limit{"partner": {Concurrency: 1}}})
	time.Sleep(200 * time.Millisecond) // the watch delivers the change

	var partners, emails []string
	for i := range 60 {
		id := fmt.Sprintf("partner-%d", i)
		partners = append(partners, id)
		if i%2 == 0 { // a raw publish: its record is born when a worker first sees it
			msg := nats.NewMsg("ax.submit.p2.default.partner.k")
			msg.Header.Set("Nats-Msg-Id", id)
			_, err := b.JS.PublishMsg(ctx, msg)
			require.NoError(t, err)
			continue
		}
		_, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "partner", Key: "k", ID: id, Priority: ax.P2})
		require.NoError(t, err)
	}
	for i := range 10 {
		info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "email", Key: "k", ID: fmt.Sprintf("email-%d", i), Priority: ax.P2})
		require.NoError(t, err)
		emails = append(emails, info.ID)
	}
	for _, id := range emails {
		b.WaitState(t, id, kv.StateSucceeded)
	}
	ranBefore := limited.executions.Load()
	require.LessOrEqual(t, ranBefore, int64(20), "the unlimited tasks waited behind the limited backlog")

	aside, rawAside := 0, 0
	for i, id := range partners {
		rec := b.WaitState(t, id, kv.StateSucceeded)
		require.Equal(t, 1, rec.Attempt)
		if slices.ContainsFunc(rec.Trail, func(m kv.Move) bool { return m.Action == worker.ActionSteppedAside }) {
			aside++
			if i%2 == 0 {
				rawAside++
			}
		}
	}
	require.Equal(t, int64(60), limited.executions.Load())
	require.Equal(t, 1, limited.peakNow())
	require.Positive(t, aside, "no limited task was stepped aside")
	require.Positive(t, rawAside, "no raw publish was stepped aside")
	require.Positive(t, w.Stats().SteppedAside)
	require.Equal(t, w.Stats().SteppedAside, holds.count(worker.HeldSteppedAside), "the observer hears each step aside")
	t.Logf("limited tasks run before the last unlimited one ended: %d of 60; stepped aside: %d", ranBefore, aside)
}

// holdCounter counts the holds a worker reports, by reason.
type holdCounter struct {
	mu       sync.Mutex
	byReason map[string]int64
}

func (h *holdCounter) TaskFinished(string, string, int, worker.Outcome, time.Duration) {}

func (h *holdCounter) TaskHeldBack(_, _, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byReason == nil {
		h.byReason = map[string]int64{}
	}
	h.byReason[reason]++
}

func (h *holdCounter) count(reason string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.byReason[reason]
}
