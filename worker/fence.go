package worker

import (
	"context"
	"time"

	"github.com/ax-mesh/ax/kv"
	"go.uber.org/zap"
)

// watchClaim cancels a running task's context with [ErrClaimLapsed] once its
// message has gone without an in-progress heartbeat for five sixths of the
// ack wait: past the ack wait JetStream redelivers the message and another
// worker may take the task over, so this handler must stop before that.
// The margin covers the time between the server's delivery and the
// worker's receipt. It returns a function that stops the watch.
func (w *Worker) watchClaim(d *delivery, cancel context.CancelCauseFunc) (stop func() bool) {
	lapse := w.cfg.AckWait * 5 / 6
	deadline := func() time.Time {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.lastBeat.Add(lapse)
	}
	var timer *time.Timer
	var check func()
	check = func() {
		if left := time.Until(deadline()); left > 0 {
			timer.Reset(left)
			return
		}
		cancel(ErrClaimLapsed)
	}
	timer = time.AfterFunc(time.Until(deadline()), check)
	return timer.Stop
}

// lapsed settles a task whose claim lapsed while its handler ran: the
// record may already belong to another worker, so nothing is written and
// the message is not answered (it is redelivered, or already was).
func (w *Worker) lapsed(d *delivery, env *envelope) {
	w.drop(d, env, ErrClaimLapsed.Error(), false)
}

// leaseLost settles a task cancelled because the worker left the mesh: back
// to READY if the record still says it runs here, without counting the
// attempt; if the compare-and-set fails, the claim was lost and the message
// is left alone.
func (w *Worker) leaseLost(d *delivery, env *envelope, rec *kv.Record, rev uint64) {
	ctx, cancel := finalCtx()
	defer cancel()
	_, _, err := w.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Worker: w.cfg.ID, Action: "membership_lost"}, func(r *kv.Record) error {
		r.Attempt--
		return nil
	})
	if err != nil {
		w.log.Warn("put_back_failed", zap.String("task_id", rec.ID), zap.Error(err))
		w.settleFailedWrite(d, env, err)
		return
	}
	_ = d.settle(d.msg.Nak)
}
