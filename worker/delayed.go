package worker

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// deferDelayed handles a raw publish whose Ax-Run-At is in the future: it
// moves the task to AX_DELAYED as a schedule (the same one a Go submit with
// RunAt writes), writes its PENDING record and acks the message, so that
// the leader releases it at its time and it holds no consumer slot
// meanwhile. It reports whether it took the delivery. A copy the leader
// released (Ax-Released-At) runs at once.
func (w *Worker) deferDelayed(d *delivery, env *envelope) bool {
	runAt := env.opts.RunAt
	if runAt.IsZero() || env.bad != nil || !runAt.After(time.Now()) || d.msg.Headers().Get(streams.HeaderReleasedAt) != "" {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s := env.stored
	submit := nats.NewMsg(w.cfg.Names.SubmitSubject(s.Priority, s.Tenant, s.Type, s.Key))
	submit.Data = d.msg.Data()
	submit.Header = d.msg.Headers()
	gen := max(env.opts.Gen, 1)
	sched := w.cfg.Names.DelayedMsg(env.id, submit, runAt.Add(-streams.DefaultScheduleEarly))
	sched.Header.Set(streams.HeaderGen, strconv.FormatUint(gen, 10))
	if _, err := w.js.PublishMsg(ctx, sched); err != nil {
		w.log.Warn("defer_failed", zap.String("task_id", env.id), zap.Error(err))
		_ = d.settle(func() error { return d.msg.NakWithDelay(time.Second) })
		return true
	}
	rec := &kv.Record{
		ID: env.id, Type: s.Type, Tenant: s.Tenant, Key: s.Key, Priority: s.Priority, State: kv.StatePending,
		Core: env.opts.Core, MaxAttempts: env.opts.MaxAttempts, Timeout: kv.Duration(env.opts.Timeout), Gen: gen,
		CreatedAt: env.published,
	}
	at := runAt.UTC()
	rec.RunAt = &at
	if !env.opts.Deadline.IsZero() {
		dl := env.opts.Deadline.UTC()
		rec.Deadline = &dl
	}
	if _, _, err := w.store.Create(ctx, rec, kv.Actor{Worker: w.cfg.ID, Action: "publish"}); err != nil && !errors.Is(err, kv.ErrExists) {
		w.log.Warn("defer_failed", zap.String("task_id", env.id), zap.Error(err))
		_ = d.settle(func() error { return d.msg.NakWithDelay(time.Second) })
		return true
	}
	w.log.Debug("task_deferred", zap.String("task_id", env.id), zap.Time("run_at", runAt))
	_ = d.settle(d.msg.Ack)
	return true
}
