package worker

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// The settle stage: every answer the worker gives JetStream for a message
// it was delivered (an ack, a nak, a term) is sent here, and a delivery is
// answered at most once ([delivery.settle]); TestOnlySettleAnswers holds
// that no other file of the package answers a message. The in-progress
// heartbeats (heartbeat.go) reset a message's ack wait and are not
// answers.

// writeFailedRetry is when a delivery comes back after the worker could not
// write what it decides (a claim, a deferral to AX_DELAYED) or lost to
// contention: long enough not to spin against a failing server, short next
// to the ack wait.
const writeFailedRetry = time.Second

// maxTermReason bounds the reason a term carries (the server keeps it in
// its advisory).
const maxTermReason = 256

// settle marks d as answered, under its lock, and runs answer once. An
// answer that fails (an ack, nak or term the connection could not send) is
// logged here, once for every caller: the message then comes back after
// its ack wait, and the record, already written, decides what that
// delivery does.
func (d *delivery) settle(answer func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return nil
	}
	d.settled = true
	err := answer()
	if err != nil && d.log != nil {
		var stream string
		var seq uint64
		if d.meta != nil {
			stream, seq = d.meta.Stream, d.meta.Sequence.Stream
		}
		d.log.Warn("settle_failed", zap.String("stream", stream), zap.Uint64("stream_seq", seq), zap.Error(err))
	}
	return err
}

// ack acknowledges d: the stream is done with its message (the task is
// settled in its record, or its message is owned elsewhere now).
func (d *delivery) ack() { _ = d.settle(d.msg.Ack) }

// nak gives d back to its consumer for redelivery at once.
func (d *delivery) nak() { _ = d.settle(d.msg.Nak) }

// nakAfter gives d back to its consumer, to be delivered again after
// delay.
func (d *delivery) nakAfter(delay time.Duration) {
	_ = d.settle(func() error { return d.msg.NakWithDelay(delay) })
}

// retryLater gives d back to JetStream, to be delivered again after
// [writeFailedRetry].
func (d *delivery) retryLater() { d.nakAfter(writeFailedRetry) }

// term ends d's message for good, with cause as the reason the server
// records (nil: no reason).
func (d *delivery) term(cause error) {
	if cause == nil {
		_ = d.settle(d.msg.Term)
		return
	}
	_ = d.settle(func() error { return d.msg.TermWithReason(truncate(cause.Error(), maxTermReason)) })
}

// leave marks d settled without answering it: its message is not the
// worker's to answer any more (its claim lapsed, or the write that decides
// it failed), and comes back after its ack wait.
func (d *delivery) leave() { _ = d.settle(func() error { return nil }) }

// refuse naks a message the worker will not hold (it is stopping, or the
// request that brought it belongs to a shard it no longer pulls): it is
// not a delivery, nothing else answers it.
func refuse(msg jetstream.Msg) { _ = msg.Nak() }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// DefaultAckDelay is how long the ack of a succeeded task's message waits
// before it is sent, with the others due by then ([TestConfig.AckDelay]),
// when its consumer had nothing more to deliver after it (the task was the
// last of its shard's backlog, or the mesh is idle); behind a backlog the
// ack goes at once.
//
// Acking the last message of a priority bucket drains it, and a JetStream
// file store that drains its last block makes a new one, writes a tombstone
// and deletes the old file. BenchmarkWorkQueueAck (an embedded server, on
// the project's 2-core machine under load) measured an ack that drains at
// 1.9–3.4 ms against 0.17 ms for one that leaves a message behind, and the
// next publish into the drained stream at 0.63–0.98 ms against 0.14–0.16 ms
// (docs/BENCHMARKS.md, "Issue 39"). On an idle mesh each task drains its
// bucket; in a workflow's chain that drain came as the leader released the
// child into the same bucket, so the release waited behind it. Sent 5 ms
// later, the parent's ack finds the child's message stored (a link of a
// chain takes about 1.5–2 ms), and nothing drains until the chain ends.
//
// The record says SUCCEEDED before the ack waits: a worker that dies in
// between leaves a message that comes back after its ack wait and is
// dropped on its record (the claim acks a task that has ended), as it is
// when a worker dies between the write and an ack sent at once.
const DefaultAckDelay = 5 * time.Millisecond

// lateAcks sends the acks of succeeded tasks' messages delivered with
// nothing behind them delay after the first of them is due, all together
// ([DefaultAckDelay]). Its timer runs
// only while an ack waits: an idle worker pays nothing. After stop it
// acks at once. It is safe for concurrent use.
type lateAcks struct {
	delay time.Duration // <= 0: every ack is sent at once

	mu      sync.Mutex
	due     []*delivery // settled, their ack not yet sent (mu)
	timer   *time.Timer // armed while due is not empty (mu)
	stopped bool        // (mu)
}

// ack settles d now and sends its ack within delay, or at once when its
// consumer had more messages to deliver after it (a backlog: its ack does
// not drain the bucket, and acks go as they always did).
func (q *lateAcks) ack(d *delivery) {
	_ = d.settle(func() error {
		q.mu.Lock()
		if q.delay <= 0 || q.stopped || d.meta != nil && d.meta.NumPending > 0 {
			q.mu.Unlock()
			return d.msg.Ack() // settle logs a failure
		}
		q.due = append(q.due, d)
		if len(q.due) == 1 {
			if q.timer == nil {
				q.timer = time.AfterFunc(q.delay, q.flush)
			} else {
				q.timer.Reset(q.delay)
			}
		}
		q.mu.Unlock()
		return nil
	})
}

// flush sends every ack due. A failed ack is logged; its message comes
// back after its ack wait and is dropped on its SUCCEEDED record.
func (q *lateAcks) flush() {
	q.mu.Lock()
	due := q.due
	q.due = nil
	q.mu.Unlock()
	for _, d := range due {
		if err := d.msg.Ack(); err != nil && d.log != nil {
			var stream string
			var seq uint64
			if d.meta != nil {
				stream, seq = d.meta.Stream, d.meta.Sequence.Stream
			}
			d.log.Warn("settle_failed", zap.String("stream", stream), zap.Uint64("stream_seq", seq), zap.Error(err))
		}
	}
}

// stop sends every ack due now; later acks are sent at once. The worker's
// Stop calls it once no handler runs, so that no message of a task that
// succeeded here waits out its ack wait.
func (q *lateAcks) stop() {
	q.mu.Lock()
	q.stopped = true
	if q.timer != nil {
		q.timer.Stop()
	}
	q.mu.Unlock()
	q.flush()
}
