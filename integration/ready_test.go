package integration

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `ax worker` says "ready" once it serves its shards, and the tasks
// submitted from then on start in priority order: P0, P2 and P4, each
// submitted after the one before was acknowledged, to a
// worker of one slot, three times with a fresh worker (issue 36.6).
func TestWorkerReadyFirstTasksInPriorityOrder(t *testing.T) {
	t.Parallel()
	dev := startDev(t, "--workers", "0")
	client, err := ax.NewClient(context.Background(), dev.js, nil)
	require.NoError(t, err)
	for round := range 3 {
		w := startAx(t, "worker", "--server", dev.url, "--concurrency", "1")
		require.Eventually(t, func() bool { return strings.Contains(w.output(), " ready") || w.exited() }, 60*time.Second, 10*time.Millisecond)
		require.False(t, w.exited(), "ax worker exited:\n%s", w.output())
		var ids []string
		for _, p := range []ax.Priority{ax.P0, ax.P2, ax.P4} {
			info, err := client.Submit(context.Background(), ax.TaskSpec{Type: "sleep", Priority: p, Payload: []byte(`{"ms":50}`)})
			require.NoError(t, err)
			ids = append(ids, info.ID)
			time.Sleep(10 * time.Millisecond) // the server's delivery from different consumers is not ordered within a few ms (worker.Worker.Ready)
		}
		started := make([]time.Time, len(ids))
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			for i, id := range ids {
				rec, _, err := storeGet(context.Background(), client.Store(), id)
				if assert.NoError(c, err) && assert.Equal(c, kv.StateSucceeded, rec.State, id) && assert.NotNil(c, rec.StartedAt) {
					started[i] = *rec.StartedAt
				}
			}
		}, 30*time.Second, 50*time.Millisecond)
		require.True(t, started[0].Before(started[1]) && started[1].Before(started[2]),
			"round %d: P0 started %s, P2 %s, P4 %s", round, started[0].Format(time.StampMicro), started[1].Format(time.StampMicro), started[2].Format(time.StampMicro))
		w.signal(t, os.Interrupt)
		select {
		case <-w.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("ax worker did not stop:\n%s", w.output())
		}
	}
}
