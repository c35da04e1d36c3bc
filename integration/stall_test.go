package integration

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
)

// TestStalledWorkerLeavesNoPullBacklog freezes a worker a few times, each
// time long enough for every consume context to miss its idle heartbeats.
// nats.go then asks again without withdrawing the open request and, from
// then on, keeps both open; the worker replaces such a context instead. The
// open pull requests must come back to one per context: before the
// replacement they stayed at five per context for good (4 stalls), each
// heartbeating once a second, and on a loaded machine they piled up until
// the process could not keep up.
func TestStalledWorkerLeavesNoPullBacklog(t *testing.T) {
	t.Parallel()
	m := newMesh(t)
	id := m.spawn()
	m.waitTable(id)
	// One worker serving all 32 shards: one consume context per (priority,
	// shard), one open request each.
	const contexts = streams.Priorities * streams.Shards
	require.Eventually(t, func() bool { return m.waitingPulls() == contexts }, 30*time.Second, 100*time.Millisecond)

	w := m.workers[id]
	for range 4 {
		w.signal(t, syscall.SIGSTOP)
		time.Sleep(5 * time.Second) // two heartbeats (worker/shards.go) and more
		w.signal(t, syscall.SIGCONT)
		time.Sleep(time.Second)
	}
	peak := m.waitingPulls()
	start := time.Now()
	require.Eventually(t, func() bool { return m.waitingPulls() <= contexts }, 20*time.Second, 200*time.Millisecond,
		"open pull requests: %d before the stalls, %d right after, %d now", contexts, peak, m.waitingPulls())
	t.Logf("open pull requests: %d before, %d right after 4 stalls of 5 s, %d again %s later",
		contexts, peak, contexts, time.Since(start).Round(100*time.Millisecond))
}

// waitingPulls returns the pull requests open on every shard consumer.
func (m *mesh) waitingPulls() int {
	m.t.Helper()
	ctx := context.Background()
	n := 0
	for p := range streams.Priorities {
		s, err := m.js.Stream(ctx, streams.DefaultNames().PriorityStream(p))
		require.NoError(m.t, err)
		list := s.ListConsumers(ctx)
		for info := range list.Info() {
			n += info.NumWaiting
		}
		require.NoError(m.t, list.Err())
	}
	return n
}
