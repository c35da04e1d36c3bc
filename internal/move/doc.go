// Package move owns the move protocol: how ax makes a task's record name
// another message (docs/decisions/move-protocol.md). Every move of
// a task to a new message goes through [Mover.Move]: the leader's aging,
// delayed release and reconciler, and the operator's resume, reprioritize
// and replay. Every wait of a task in AX_DELAYED goes through [Schedule]:
// a delayed submit, a raw publish a worker defers, a task stepped aside.
//
// A move has three steps:
//
//  1. publish a copy of the task's message to its bucket's control subject,
//     with the record's generation + 1 (Ax-Gen) and a Nats-Msg-Id unique to
//     the move;
//  2. the guard ([Request.Guard], the leader's lease check), then one
//     compare-and-set of the record, at the revision that was read, that
//     names the copy ([kv.Record.Bind]) and moves the state;
//  3. depending on the write's outcome ([Outcome]):
//     [Landed], the record names the copy: the superseded message is
//     deleted (best effort: a worker drops a message of an older
//     generation anyway);
//     [Lost], the compare-and-set failed for certain (or the guard stopped
//     it): the copy is deleted, unless a worker may have bound it (a
//     release of a PENDING task), in which case it is kept;
//     [Unclear], the write's reply was lost or timed out: the copy is kept,
//     and the record decides.
//
// Safety: a worker runs a task only from the message its record names, so
// no outcome runs a task twice or strands it. After [Landed] the old message
// is behind the record's generation and is dropped. After [Lost] the record
// still names the old message, which is not touched. After [Unclear] either
// the write landed (the copy runs, the old message is stale) or it did not
// (the copy's generation is ahead of the record's: a worker looks at it
// again for a while and then drops it as an orphan, writing the record
// first so that a late compare-and-set fails: worker/claim.go, claimFrom
// and aheadGrace). A copy is never deleted on a timeout, since the write may
// have landed and the copy be the task's only message. A bucket that refuses
// the copy because it is full stops the move before anything is written
// ([ErrBucketFull]): nothing changed, and the caller retries when the bucket
// drains.
//
// Liveness: a move makes a bounded number of round trips (publish, guard,
// compare-and-set, delete); a caller that loses the race reads the record
// again and decides anew.
package move
