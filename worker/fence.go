package worker

import (
	"context"
	"time"
)

// watchClaim cancels a running task's context with [ErrClaimLapsed] once its
// message has gone without an in-progress heartbeat for five sixths of the
// ack wait: past the ack wait JetStream redelivers the message and another
// worker may take the task over, so this handler must stop before that.
// The margin covers the time between the server's delivery and the
// worker's receipt. It returns a function that stops the watch.
func (w *Worker) watchClaim(d *delivery, cancel context.CancelCauseFunc) (stop func() bool) {
	lapse := w.lapse()
	deadline := func() time.Time {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.lastBeat.Add(lapse)
	}
	var timer *time.Timer
	check := func() {
		if left := time.Until(deadline()); left > 0 {
			timer.Reset(left)
			return
		}
		cancel(ErrClaimLapsed)
	}
	timer = time.AfterFunc(time.Until(deadline()), check)
	return timer.Stop
}

// lapse is how long a held message may go without a confirmed heartbeat
// before its claim is given up: five sixths of the ack wait.
func (w *Worker) lapse() time.Duration { return w.cfg.AckWait * 5 / 6 }

// lapsed settles a task whose claim lapsed while its handler ran: the
// record may already belong to another worker, so nothing is written and
// the message is not answered (it is redelivered, or already was).
func (w *Worker) lapsed(d *delivery, env *envelope) {
	w.drop(d, env, ErrClaimLapsed.Error(), false)
}
