// Package ax is what a service imports to submit tasks: [Client.Submit],
// [Client.SubmitBatch] and [Client.SubmitJSON] put tasks into their priority
// buckets following the wire contract (docs/WIRE.md), so that any NATS
// client can do the same by hand. [TaskSpec] describes a task, [Args] types
// its payload, [CronJob] a periodic one; [Priority] names the buckets P0..P4
// ([DefaultPriority] is P2).
//
// Guarantees: a nil error from Submit means the task is durable in its
// bucket (the JetStream publish ack) and its READY record exists, so it can
// be inspected and cancelled by id at once. Every publish carries the task
// id as Nats-Msg-Id, so a retried submit within the de-duplication window
// (2 minutes by default) never creates a second task.
//
// The leader's control loops are in package scheduler, the management API in
// package admin, task handling in package worker; the reports they share
// through AX_CONTROL ([Pressure], [control.ReconcilerReport], [control.RejectsReport]) are
// here, next to the client that reads the pressure report.
package ax
