package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/ax-mesh/ax/kv"
	"go.uber.org/zap"
)

// abandonAfter is how long a handler that ignores its cancelled context is
// waited for before its attempt is failed and its slot reused.
const abandonAfter = time.Second

// process takes one delivery from claim to settled outcome.
func (w *Worker) process(d *delivery) {
	if d.meta == nil {
		_, err := d.msg.Metadata()
		w.log.Warn("bad_delivery", zap.Error(err))
		_ = d.settle(d.msg.Term)
		return
	}
	env := w.parse(d, d.meta)
	if w.deferDelayed(d, env) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	rec, rev, ok := w.claim(ctx, d, env)
	cancel()
	if !ok {
		return
	}
	w.stats.Started.Add(1)
	switch {
	case env.bad != nil:
		w.fail(d, env, rec, rev, Permanent(env.bad))
		return
	case rec.Deadline != nil && time.Now().After(*rec.Deadline):
		w.fail(d, env, rec, rev, Permanent(fmt.Errorf("%w (%s)", ErrDeadlinePassed, rec.Deadline.Format(time.RFC3339))))
		return
	}
	runErr, cause := w.run(env, rec, d)
	switch {
	case runErr == nil:
		w.succeed(d, env, rec, rev)
	case errors.Is(cause, ErrClaimLapsed):
		w.lapsed(d, env)
	case errors.Is(cause, ErrLeaseLost):
		w.putBack(d, env, rec, rev, "membership_lost")
	case errors.Is(cause, ErrStop):
		w.putBack(d, env, rec, rev, "worker_stopped")
	case errors.Is(cause, ErrCancelled):
		w.cancelled(d, env, rec, rev)
	case errors.Is(cause, ErrTimeout):
		w.fail(d, env, rec, rev, fmt.Errorf("%w after %s: %w", ErrTimeout, rec.Timeout, runErr))
	default:
		w.fail(d, env, rec, rev, runErr)
	}
}

// run calls the handler under the task's timeout and returns its error and
// the cause of its context's end, if it ended.
func (w *Worker) run(env *envelope, rec *kv.Record, d *delivery) (error, error) {
	base, cancelBase := context.WithCancelCause(w.runCtx)
	defer cancelBase(nil)
	stopWatch := w.watchClaim(d, cancelBase)
	defer stopWatch()
	ctx, cancel := context.WithTimeoutCause(base, time.Duration(rec.Timeout), ErrTimeout)
	defer cancel()
	w.track(rec.ID, cancelBase)
	defer w.running.Delete(rec.ID)

	task := &Task{
		ID: rec.ID, Type: rec.Type, Tenant: rec.Tenant, Key: rec.Key, Priority: rec.Priority,
		Payload: d.msg.Data(), Attempt: rec.Attempt, Delivery: d.meta.NumDelivered, MaxAttempts: rec.MaxAttempts,
		Headers: d.msg.Headers(), Worker: w.cfg.ID, EnqueuedAt: env.published,
	}
	if rec.Deadline != nil {
		task.Deadline = *rec.Deadline
	}
	done := make(chan error, 1)
	go func() { done <- w.call(ctx, env.handler.fn, task) }()
	select {
	case err := <-done:
		return err, context.Cause(ctx)
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		if err == nil {
			err = context.Cause(ctx)
		}
		return err, context.Cause(ctx)
	case <-time.After(abandonAfter):
		w.log.Error("handler_ignores_context", zap.String("task_id", rec.ID), zap.String("type", rec.Type))
		return fmt.Errorf("handler did not return within %s of its context ending: %w", abandonAfter, context.Cause(ctx)), context.Cause(ctx)
	}
}

// call runs fn, turning a panic into a permanent error.
func (w *Worker) call(ctx context.Context, fn HandlerFunc, task *Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			w.log.Error("handler_panic", zap.String("task_id", task.ID), zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
			err = Permanent(fmt.Errorf("handler panicked: %v", r))
		}
	}()
	return fn(ctx, task)
}

// finalCtx bounds the writes that settle an outcome; they must happen even
// while the worker stops.
func finalCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

func (w *Worker) succeed(d *delivery, env *envelope, rec *kv.Record, rev uint64) {
	ctx, cancel := finalCtx()
	defer cancel()
	_, _, err := w.store.Apply(ctx, rec, rev, kv.StateSucceeded, kv.Actor{Worker: w.cfg.ID, Action: "complete"}, func(r *kv.Record) error {
		now := time.Now().UTC()
		r.FinishedAt = &now
		r.LastError = ""
		return nil
	})
	if err != nil {
		w.settleFailedWrite(d, env, err)
		return
	}
	w.stats.Succeeded.Add(1)
	w.observe(rec, OutcomeSucceeded)
	_ = d.settle(d.msg.Ack)
}

// fail settles a failed attempt: retry with backoff while attempts remain
// and the error is not permanent, else dead-letter the task.
func (w *Worker) fail(d *delivery, env *envelope, rec *kv.Record, rev uint64, cause error) {
	var permanent *PermanentError
	if errors.As(cause, &permanent) || rec.Attempt >= rec.MaxAttempts {
		w.bury(d, env, rec, rev, cause)
		return
	}
	delay := env.handler.cfg.Backoff.withDefaultsFrom(w.cfg.Backoff).Delay(rec.Attempt)
	var after *RetryAfterError
	if errors.As(cause, &after) {
		delay = after.Delay
	}
	ctx, cancel := finalCtx()
	defer cancel()
	_, _, err := w.store.Apply(ctx, rec, rev, kv.StateRetrying, kv.Actor{Worker: w.cfg.ID, Action: "retry", Error: cause.Error()}, func(r *kv.Record) error {
		r.LastError = cause.Error()
		return nil
	})
	if err != nil {
		w.settleFailedWrite(d, env, err)
		return
	}
	w.stats.Retried.Add(1)
	w.observe(rec, OutcomeRetry)
	w.log.Debug("task_retry", zap.String("task_id", rec.ID), zap.Int("attempt", rec.Attempt), zap.Duration("delay", delay), zap.Error(cause))
	_ = d.settle(func() error { return d.msg.NakWithDelay(delay) })
}

// bury sends the task to the dead-letter stream, marks it DEAD and terms
// its message.
func (w *Worker) bury(d *delivery, env *envelope, rec *kv.Record, rev uint64, cause error) {
	ctx, cancel := finalCtx()
	defer cancel()
	dlqSeq, err := w.deadLetter(ctx, d, env, rec, cause)
	if err != nil {
		w.log.Error("dead_letter_failed", zap.String("task_id", rec.ID), zap.Error(err))
		_ = d.settle(func() error { return d.msg.NakWithDelay(time.Second) })
		return
	}
	_, _, err = w.store.Apply(ctx, rec, rev, kv.StateDead, kv.Actor{Worker: w.cfg.ID, Action: "dead", Error: cause.Error()}, func(r *kv.Record) error {
		now := time.Now().UTC()
		r.FinishedAt = &now
		r.LastError = cause.Error()
		r.DLQSeq = dlqSeq
		return nil
	})
	if err != nil {
		w.deleteDeadLetter(ctx, dlqSeq) // not ours to bury
		w.settleFailedWrite(d, env, err)
		return
	}
	w.stats.Dead.Add(1)
	w.observe(rec, OutcomeDead)
	w.log.Info("task_dead", zap.String("task_id", rec.ID), zap.String("type", rec.Type), zap.Int("attempt", rec.Attempt), zap.Error(cause))
	_ = d.settle(func() error { return d.msg.TermWithReason(truncate(cause.Error(), 256)) })
}

// putBack returns a task interrupted by Stop or by a lost membership
// (action): READY again, the attempt not counted, its message redelivered at
// once. If the compare-and-set fails the claim was lost: the message is not
// ours to answer.
func (w *Worker) putBack(d *delivery, env *envelope, rec *kv.Record, rev uint64, action string) {
	ctx, cancel := finalCtx()
	defer cancel()
	_, _, err := w.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Worker: w.cfg.ID, Action: action}, func(r *kv.Record) error {
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

// cancelled settles a task whose handler was cancelled by an operator: the
// operator's write made it CANCELLED; the message is acked, never retried.
func (w *Worker) cancelled(d *delivery, env *envelope, rec *kv.Record, rev uint64) {
	ctx, cancel := finalCtx()
	defer cancel()
	_, _, err := w.store.Apply(ctx, rec, rev, kv.StateCancelled, kv.Actor{Worker: w.cfg.ID, Action: "cancel"}, nil)
	if err != nil && !errors.Is(err, kv.ErrConflict) {
		w.settleFailedWrite(d, env, err)
		return
	}
	w.observe(rec, OutcomeCancelled)
	_ = d.settle(d.msg.Ack)
}

// settleFailedWrite handles a final write that did not land. A conflict
// means the claim was lost (fenced): the message is not ours to answer. Any
// other error leaves the record RUNNING; the message is redelivered after
// its ack wait and taken over.
func (w *Worker) settleFailedWrite(d *delivery, env *envelope, err error) {
	if errors.Is(err, kv.ErrConflict) {
		w.drop(d, env, "final write lost the compare-and-set: "+err.Error(), false)
		return
	}
	w.log.Error("final_write_failed", zap.String("task_id", env.id), zap.Error(err))
	_ = d.settle(func() error { return nil })
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
