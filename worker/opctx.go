package worker

import (
	"context"
	"sync/atomic"
	"time"
)

// The task path bounds each of its operations (the claim, the writes that
// settle an outcome) by opTimeout. A context with its own deadline per
// operation costs a runtime timer and three allocations, twice per task; the
// operations' contexts are never cancelled early, only by time, so they can
// share one. opContexts hands out a context made at most opShare ago whose
// deadline is opTimeout + opShare after it was made: each operation is
// bounded by at least opTimeout and at most opTimeout + opShare, and a busy
// worker makes one such context per opShare instead of two per task.

// opShare is how long one operation context is handed out.
const opShare = time.Second

// sharedOp is one shared operation context.
type sharedOp struct {
	ctx    context.Context
	cancel context.CancelFunc // never called early: the deadline ends it
	until  time.Time          // when it stops being handed out (monotonic)
}

// opContexts holds a worker's current shared operation context.
type opContexts struct {
	current atomic.Pointer[sharedOp]
}

// get returns a context that ends between opTimeout and opTimeout+opShare
// from now, never earlier: not a child of any other (it outlives a stopping
// worker, as the writes that settle an outcome must).
func (o *opContexts) get() context.Context {
	now := time.Now()
	if op := o.current.Load(); op != nil && now.Before(op.until) {
		return op.ctx
	}
	ctx, cancel := context.WithDeadline(context.Background(), now.Add(opTimeout+opShare))
	op := &sharedOp{ctx: ctx, cancel: cancel, until: now.Add(opShare)}
	o.current.Store(op) // a racing caller's context is as good
	return ctx
}
