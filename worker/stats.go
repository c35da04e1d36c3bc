package worker

import "sync/atomic"

// Stats counts outcomes since the worker started: a snapshot, read by
// [Worker.Stats].
type Stats struct {
	Started   int64 // attempts started
	Succeeded int64
	Retried   int64 // attempts failed and scheduled again
	Dead      int64 // tasks sent to the dead-letter stream
	Dropped   int64 // deliveries dropped: stale, duplicate or lost claim
	// Abandoned counts handlers that did not return within AbandonAfter of
	// their context's end: their goroutines still run (leaked).
	Abandoned int64
	// Unhandled counts deliveries put back because the worker has no
	// handler for their type (they wait for a worker that has one).
	Unhandled int64
	// Paused counts deliveries held back because their type or tenant is
	// paused, Limited those held back by a concurrency or rate limit.
	Paused, Limited int64
	// HandedOn counts slots of a concurrency limit passed from a finished
	// task straight to a task waiting here for the limit, without a round
	// trip to the limits bucket.
	HandedOn int64
	// SteppedAside counts deliveries held back by a limit that the worker
	// had no room to park, or by a pause that lasted (paused aside): moved
	// to AX_DELAYED until a run time or the pause's end, out of their shard
	// consumer's pending (they count in Limited or Paused too).
	SteppedAside int64
	// SlotLost counts tasks put back because a slot of a concurrency limit
	// they were to start or ran on was lost (not renewed within its TTL,
	// or found given to another task): their handlers, if running, were
	// cancelled with [ErrLimitSlotLost].
	SlotLost int64
}

// counters are the live outcome counters behind [Stats].
type counters struct {
	Started, Succeeded, Retried, Dead, Dropped, Abandoned, Unhandled, Paused, Limited, HandedOn, SteppedAside, SlotLost atomic.Int64
}

// Stats returns a snapshot of the worker's outcome counters. Each counter is
// read atomically; the snapshot as a whole is not (a task may finish between
// two reads).
func (w *Worker) Stats() Stats {
	c := &w.stats
	return Stats{Started: c.Started.Load(), Succeeded: c.Succeeded.Load(), Retried: c.Retried.Load(),
		Dead: c.Dead.Load(), Dropped: c.Dropped.Load(), Abandoned: c.Abandoned.Load(), Unhandled: c.Unhandled.Load(),
		Paused: c.Paused.Load(), Limited: c.Limited.Load(), HandedOn: c.HandedOn.Load(),
		SteppedAside: c.SteppedAside.Load(), SlotLost: c.SlotLost.Load()}
}
