package worker

import (
	"context"
	"time"

	"go.uber.org/zap"
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
func (cl *claimer) watchClaim(d *delivery, cancel context.CancelCauseFunc) (stop func() bool) {
	lapse := cl.lapse()
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
func (cl *claimer) lapse() time.Duration { return cl.cfg.AckWait * 5 / 6 }

// lapsed settles a task whose claim lapsed while its handler ran: the
// record may already belong to another worker, so nothing is written and
// the message is not answered (it is redelivered, or already was).
func (cl *claimer) lapsed(d *delivery, env *envelope) {
	cl.drop(d, env, ErrClaimLapsed.Error(), false)
}

// fenced reports whether d's claim has lapsed, checked synchronously right
// before a final write; if so it settles d as lapsed, and the caller must
// write nothing.
func (cl *claimer) fenced(d *delivery, env *envelope) bool {
	if d.alive(cl.lapse()) {
		return false
	}
	cl.log.Warn("final_write_fenced", env.logID())
	cl.lapsed(d, env)
	return true
}

// expired gives up a queued delivery whose heartbeats went unconfirmed for
// the claim-lapse time: JetStream may have redelivered it, so it must not
// be claimed. It is left unanswered to its ack wait.
func (cl *claimer) expired(d *delivery) bool {
	d.mu.Lock()
	late := !d.holds(time.Now(), cl.lapse())
	if late {
		d.settled = true
	}
	d.mu.Unlock()
	if late {
		cl.stats.Dropped.Add(1)
		cl.log.Warn("delivery_expired", zap.Int("priority", d.priority), zap.Int("shard", d.shard))
	}
	return late
}
