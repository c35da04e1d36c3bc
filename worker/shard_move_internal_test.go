package worker

import (
	"context"
	"testing"
	"time"
)

// A shard that moves away and back while its tasks flow loses no delivery
// to a move: a message the server sent to a request the move ended, in
// flight at that moment, is handed back at once instead of waiting out its
// ack wait. The ack wait here is a minute, so a task that waits 20 s has
// had a delivery lost (831 of 3,000 ran in time when a move ended its
// requests); before, the first task a worker was sent as the mesh split
// its shards at start could wait the whole ack wait (30 s by default),
// which is how TestOperatorCLIWithWorkers once failed.
func TestShardMovesLoseNoDelivery(t *testing.T) {
	t.Parallel()
	const tasks = 3000
	srv := atkServer(t, "none", 0)
	_, jsW := srv.Connect()
	_, js := srv.Connect()
	runs := newAtkRuns()
	w := atkStart(t, jsW, "w", atkRegistry(t, runs, 0))
	ctx := context.Background()
	moved := make(chan struct{})
	go func() { // the shard moves away and back every few milliseconds while tasks flow
		defer close(moved)
		for i := range 400 {
			mode := shardOwned
			if i%2 == 0 {
				mode = shardIdle
			}
			if err := w.intake.setShard(ctx, w.intake.sets[0], 0, mode); err != nil {
				t.Errorf("move %d: %v", i, err)
				return
			}
			time.Sleep(time.Duration(2+i%7) * time.Millisecond)
		}
		if err := w.intake.setShard(ctx, w.intake.sets[0], 0, shardOwned); err != nil {
			t.Errorf("last move: %v", err)
		}
	}()
	atkPublish(t, js, 0, tasks) // on keys of shard 0, at P2
	<-moved
	atkAwaitAll(t, runs, tasks, "through 400 moves")
}
