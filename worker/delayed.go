package worker

import (
	"context"
	"errors"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// deferDelayed handles a raw publish whose Ax-Run-At is in the future: it
// writes the task's PENDING record, moves the message to AX_DELAYED as a
// schedule (the same one a Go submit with RunAt writes) and acks it, so that
// the leader releases it at its time and it holds no consumer slot
// meanwhile. It reports whether it took the delivery. A copy the leader
// released (Ax-Released-At) runs at once. The record is written first so
// that a message never replaces the schedule of another task with its id:
// when the id has a record that is not this task's PENDING one, the
// delivery goes on to the claim, which drops it.
func (w *Worker) deferDelayed(d *delivery, env *envelope) bool {
	runAt := env.opts.RunAt
	if runAt.IsZero() || env.bad != nil || !runAt.After(time.Now()) || env.released {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s := env.stored
	want := &kv.Record{
		ID: env.id, Type: s.Type, Tenant: s.Tenant, Key: s.Key, Priority: s.Priority, State: kv.StatePending,
		MaxAttempts: env.opts.MaxAttempts, Timeout: kv.Duration(env.opts.Timeout), Gen: 1,
		CreatedAt: env.published,
	}
	at := runAt.UTC()
	want.RunAt = &at
	if !env.opts.Deadline.IsZero() {
		dl := env.opts.Deadline.UTC()
		want.Deadline = &dl
	}
	_, _, err := w.store.Create(ctx, want, kv.Actor{Worker: w.cfg.ID, Action: "publish"})
	if errors.Is(err, kv.ErrExists) {
		var rec *kv.Record
		if rec, _, err = w.store.Get(ctx, env.id); err == nil && !rec.SamePending(want) {
			return false // another task's id, or already released: the claim decides
		}
	}
	if err != nil {
		w.log.Warn("defer_failed", zap.String("task_id", env.id), zap.Error(err))
		d.retryLater()
		return true
	}
	submit := nats.NewMsg(w.cfg.Names.SubmitSubject(s.Priority, s.Tenant, s.Type, s.Key))
	submit.Data = d.msg.Data()
	submit.Header = d.msg.Headers()
	sched := w.cfg.Names.DelayedMsg(env.id, submit, runAt.Add(-streams.DefaultScheduleEarly))
	if _, err := w.js.PublishMsg(ctx, sched); err != nil {
		w.log.Warn("defer_failed", zap.String("task_id", env.id), zap.Error(err))
		d.retryLater()
		return true
	}
	w.log.Debug("task_deferred", zap.String("task_id", env.id), zap.Time("run_at", runAt))
	_ = d.settle(d.msg.Ack)
	return true
}
