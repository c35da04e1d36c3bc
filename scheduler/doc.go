// Package scheduler is ax's client side and control plane: [Client.Submit]
// and [Client.SubmitBatch] put tasks into their priority buckets following
// the v1 wire contract, so that any NATS client can do the same by hand.
//
// Guarantees: a nil error from Submit means the task is durable in its
// bucket (the JetStream publish ack) and its READY record exists, so it can
// be inspected and cancelled by id at once. Every publish carries the task
// id as Nats-Msg-Id, so a retried submit within the de-duplication window
// (2 minutes by default) never creates a second task.
package scheduler
