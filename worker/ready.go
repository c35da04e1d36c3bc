package worker

import (
	"context"
	"time"

	"go.uber.org/zap"
)

// readyWait bounds how long the worker waits for the first requests of its
// pullers and the connection's flush before it takes itself for ready.
const readyWait = 10 * time.Second

// Ready returns a channel closed once the worker serves every shard the
// mesh gave it when it joined (or its fixed [Config.Shards]): the first
// pull request of each of their consumers, one per priority, has been
// sent and the connection flushed, so the server has read them all. From
// then on a task submitted to those shards is delivered to this worker as
// it is stored, so the tasks submitted after Ready start here in priority
// order (strict within a worker: docs/RELIABILITY.md), as far as the
// server delivers them in the order it stored them: it delivers each
// consumer's messages on a goroutine of its own, and on a loaded machine
// tasks stored a few milliseconds apart can reach the worker swapped (a
// P0 task delivered 5.7 ms after its store, a P2 one stored 1 ms later in
// 2.7 ms, under the race detector); an idle slot takes what came first.
//
// [Worker.Start] returns once the worker is ready, unless joining the mesh
// took longer than the member TTL (Start then logs mesh_join_slow and
// Ready closes later). A program that runs the worker in a goroutine
// (go in.Run(ctx)) waits for Ready before it counts on the worker:
//
//	go func() { done <- in.Run(ctx) }()
//	select {
//	case <-in.Ready():
//	case err := <-done: // Start failed
//		return err
//	}
//
// Shards that come to the worker later (a member leaving, or one that died
// without leaving, whose membership runs out after its TTL) are not waited
// for. Ready never closes for a worker that fails to start.
func (w *Worker) Ready() <-chan struct{} { return w.intake.ready }

// awaitPulls waits until every puller of the worker's sets has handed its
// first request to the connection, then flushes the connection so that the
// server has read them, for at most readyWait.
func (in *intake) awaitPulls(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, readyWait)
	defer cancel()
	for _, s := range in.shardSets() {
		for shard := range s.pullers {
			s.locks[shard].Lock()
			pullers := s.pullers[shard]
			s.locks[shard].Unlock()
			for _, pl := range pullers {
				select {
				case <-pl.asked:
				case <-ctx.Done():
					return
				}
			}
		}
	}
	if err := in.js.Conn().FlushWithContext(ctx); err != nil && ctx.Err() == nil {
		in.log.Debug("ready_flush_failed", zap.Error(err))
	}
}

// markReady closes in.ready once the worker serves its first shards: at
// once if it does (fixed shards, or the mesh served them within Start),
// else when the mesh loop first serves them, unless the worker stops first.
func (in *intake) markReady() {
	if in.serving == nil {
		close(in.ready)
		return
	}
	select {
	case <-in.serving:
		close(in.ready)
		return
	default:
	}
	in.loops.Go(func() {
		select {
		case <-in.serving:
			close(in.ready)
		case <-in.stopCh:
		}
	})
}
