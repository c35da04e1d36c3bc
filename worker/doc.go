// Package worker runs tasks: it pulls from the (priority, shard) consumers
// of the shards it serves, always starting the highest-priority task it holds
// first, claims each task by a compare-and-set on its record before running
// it, enforces the task's timeout, and settles the outcome: ack on success,
// nak with exponential backoff and jitter on failure, dead letter and term
// when attempts run out or the error is permanent.
//
// Safety: a task runs only after this worker moved its record to RUNNING at
// the revision it read, so two workers never both start one delivery. A
// worker whose claim lapsed (its message was redelivered, or its record moved
// on) loses its final compare-and-set, records the lost claim in its log and
// does not ack the message.
//
// Liveness: every message the worker holds, queued or running, gets an
// in-progress heartbeat before its ack wait runs out; when the worker dies
// the heartbeats stop and JetStream redelivers its messages to another
// worker, which takes the task over.
//
// Cancellation: a worker listens on "ax.worker.<id>.cancel"; an operator
// who moved a running task to CANCELLED sends its id there and the handler's
// context ends with [ErrCancelled]. A lost notice only delays the end: the
// handler's final write fails and the redelivered message finds CANCELLED.
package worker
