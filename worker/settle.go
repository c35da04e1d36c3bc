package worker

import (
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
