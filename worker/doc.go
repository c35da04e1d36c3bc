// Package worker runs tasks: it pulls from the (priority, shard) consumers
// of the shards it serves, always starting the highest-priority task it holds
// first, claims each task by a compare-and-set on its record before running
// it, enforces the task's timeout, and settles the outcome: ack on success,
// nak with exponential backoff and jitter on failure, dead letter and term
// when attempts run out or the error is permanent.
//
// Workers form a mesh: each holds a membership lease on AX_WORKERS/<id>
// (its [kv.Member] record), and all follow one shard table in AX_CONTROL
// ([ShardTable]) that any member rewrites by compare-and-set, with
// [Rebalance], when the live members change. A worker consumes the shards
// the table gives it and, under the overflow policy, steals from the
// backlog of the others.
//
// Pools: on a deployment provisioned with [streams.LayoutPools] each task
// type has its own consumers, and a worker consumes only those of the types
// its [Registry] holds when it starts (creating them if they do not exist).
// The workers of a type form its ring and split its shards as above, with
// one table per type in AX_CONTROL ([PoolTable]). A task whose type no live
// worker serves waits in its bucket. Safety and liveness are as below, per
// type: a type's consumers never change, whichever workers serve it.
//
// Safety: a task runs only after this worker moved its record to RUNNING at
// the revision it read, so two workers never both start one delivery. A
// worker whose claim lapsed (its message was redelivered, or its record moved
// on) loses its final compare-and-set, records the lost claim in its log and
// does not ack the message. A message that went without an answered
// heartbeat for five sixths of the ack wait is lapsed for good, checked
// synchronously: [Task.Held] is false, no final write is made for it, and
// its handler's context is cancelled ([ErrClaimLapsed]) before another
// worker can take the task over. A handler that ignores its context keeps
// its claim and slot until it returns, at most [Config.AbandonAfter], and
// is then abandoned and its task dead-lettered. Side effects that must not
// be repeated by a stale execution carry [Task.Fence]. A worker that cannot renew
// its membership within the TTL stops consuming and cancels its handlers
// ([ErrLeaseLost]). Shard ownership itself is not a safety mechanism: two
// workers may briefly consume one shard while the table changes, and the
// claim keeps that harmless.
//
// Liveness: every message the worker holds, queued or running, gets an
// in-progress heartbeat before its ack wait runs out; when the worker dies
// the heartbeats stop and JetStream redelivers its messages to another
// worker, which takes the task over. A dead worker's lease expires after its
// TTL and the survivors split its shards.
//
// Flow control: every worker watches the mesh's pauses and limits
// ([kv.Limits], AX_CONTROL key "limits") and checks them before it claims a
// task. A paused type's or tenant's task is naked with a delay and stays
// READY. A concurrency limit's slots are kept in AX_LIMITS ([kv.LimitUse])
// by compare-and-set, so no more than the limit are held at once; a slot is
// taken before the claim and handed on or given back once its handler has
// returned, and it expires unless its worker renews it within its member
// TTL, so a dead worker's slots come back within that TTL. A rate limit's
// start is taken from a token bucket in AX_LIMITS once the task is claimed.
// A task held back uses no attempt and no slot of the worker: it is parked
// on its worker (at most 1,024 per limit, 64 MiB of messages in all) until a slot is handed on or given
// back, or naked with a delay; it is never dead-lettered for a limit. With
// nothing configured the check does no I/O.
//
// Cancellation: a worker listens on "ax.worker.<id>.cancel"; an operator
// who moved a running task to CANCELLED sends its id there and the handler's
// context ends with [ErrCancelled]. A lost notice only delays the end: the
// handler's final write fails and the redelivered message finds CANCELLED.
//
// Results, progress, middleware: a handler hands back a result with
// [Task.SetResult] (stored by the compare-and-set that writes SUCCEEDED,
// bounded by [Config.MaxResultBytes]) and reports progress with
// [Task.Progress] (written at most once per [Config.ProgressEvery], fenced
// like the outcome, the last report folded into the outcome's write).
// Every task runs in one chain of middleware, outermost first: [Recover]
// (a panic fails the attempt permanently), [Trace] (the "ax.run" span,
// with [Config.TracerProvider] only), [TaskContext] (the task in the
// context, [TaskFromContext]), then [Config.Middleware], the first
// outermost, then the handler ([Middleware]). Outcome logging and metrics
// ([Observer]) are not middleware: they report the settled outcome, which
// is decided after the chain returns.
package worker
