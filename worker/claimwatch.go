package worker

import (
	"context"
	"time"
)

// watchClaim cancels a running task's context with [ErrClaimLapsed] once its
// message has gone without an answered in-progress heartbeat for five
// sixths of the ack wait: past the ack wait JetStream redelivers the
// message and another worker may take the task over, so this handler must
// stop before that. The margin covers the time between the server's
// delivery and the worker's receipt. It returns a function that stops the
// watch.
//
// The cancel runs on a timer goroutine, which a frozen process may run
// late; it is a courtesy to the handler. What fences is synchronous:
// [delivery.holds] marks the claim lapsed for good the first time anyone
// observes the lapse time passed, and [Task.Held] and every final write
// check it.
func (w *Worker) watchClaim(d *delivery, cancel context.CancelCauseFunc) (stop func() bool) {
	lapse := w.lapse()
	var timer *time.Timer
	check := func() {
		d.mu.Lock()
		holds := d.holds(time.Now(), lapse)
		left := time.Until(d.lastBeat.Add(lapse))
		d.mu.Unlock()
		if holds {
			timer.Reset(left)
			return
		}
		cancel(ErrClaimLapsed)
	}
	timer = time.AfterFunc(time.Hour, check)
	d.mu.Lock()
	left := time.Until(d.lastBeat.Add(lapse))
	d.mu.Unlock()
	timer.Reset(left)
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

// fenced reports whether d's claim has lapsed, checked synchronously right
// before a final write; if so it settles d as lapsed, and the caller must
// write nothing.
func (w *Worker) fenced(d *delivery, env *envelope) bool {
	if d.alive(w.lapse()) {
		return false
	}
	w.log.Warn("final_write_fenced", env.logID())
	w.lapsed(d, env)
	return true
}
