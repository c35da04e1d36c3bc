// Package scheduler is ax's client side and control plane: [Client.Submit]
// and [Client.SubmitBatch] put tasks into their priority buckets following
// the v1 wire contract, so that any NATS client can do the same by hand.
//
// Guarantees: a nil error from Submit means the task is durable in its
// bucket (the JetStream publish ack) and its READY record exists, so it can
// be inspected and cancelled by id at once. Every publish carries the task
// id as Nats-Msg-Id, so a retried submit within the de-duplication window
// (2 minutes by default) never creates a second task.
//
// [Admin] is the management API (docs/API.md): a NATS micro service on
// "ax.admin.<verb>". Safety: every action is one compare-and-set on the
// task's record through the transition table, so an action never overwrites
// a move it did not read; a re-dispatched message carries the next
// generation and is published before the record names it, so a crash
// between the steps leaves at most a copy that workers drop. Liveness: an
// action that keeps losing the race gives up with a 409 after a few tries.
package scheduler
