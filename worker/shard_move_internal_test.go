package worker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/streams"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// A shard that moves away and back while its tasks flow loses no delivery
// to a move: a message the server sent to a request the move ended, in
// flight at that moment, is handed back at once instead of waiting out its
// ack wait. The ack wait here is a minute, so a task that waits 20 s has
// had a delivery lost; before, the first task a worker was sent as the
// mesh split its shards at start could wait the whole ack wait (30 s by
// default), which is how TestOperatorCLIWithWorkers once failed.
func TestShardMovesLoseNoDelivery(t *testing.T) {
	t.Parallel()
	const tasks = 3000
	srv := natstest.Start(t, natstest.Options{})
	_, js := srv.Connect()
	natstest.Provision(t, js, &streams.Config{AckWait: time.Minute, PriorityPolicy: "none"})
	ctx := context.Background()

	var mu sync.Mutex
	ran := map[string]bool{}
	reg := NewRegistry()
	require.NoError(t, reg.Handle("job", func(_ context.Context, task *Task) error {
		mu.Lock()
		ran[string(task.Payload)] = true
		mu.Unlock()
		return nil
	}, nil))
	w, err := New(ctx, js, &Config{Registry: reg, Shards: []int{0}, Concurrency: 8, Logger: zap.NewNop()})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })

	moved := make(chan struct{})
	go func() { // the shard moves away and back every few milliseconds while tasks flow
		defer close(moved)
		set := w.sets[0]
		for i := 0; i < 400; i++ {
			mode := shardOwned
			if i%2 == 0 {
				mode = shardIdle
			}
			if err := w.setShard(ctx, set, 0, mode); err != nil {
				t.Errorf("move %d: %v", i, err)
				return
			}
			time.Sleep(time.Duration(2+i%7) * time.Millisecond)
		}
		if err := w.setShard(ctx, set, 0, shardOwned); err != nil {
			t.Errorf("last move: %v", err)
		}
	}()
	atkPublish(t, js, 0, tasks) // on keys of shard 0, at P2
	<-moved
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ran)
	}
	require.Eventually(t, func() bool { return count() == tasks }, 20*time.Second, 20*time.Millisecond,
		"%d of %d tasks ran within 20 s of the last move; the others wait out the ack wait", count(), tasks)
}
