package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/kv"
	"go.uber.org/zap"
)

// inFlightRetry is when a delivery of a task already in flight on this
// worker is looked at again.
const inFlightRetry = 250 * time.Millisecond

// process takes one delivery from claim to settled outcome.
func (w *Worker) process(d *delivery) {
	if d.meta == nil {
		_, err := d.msg.Metadata()
		w.log.Warn("bad_delivery", zap.Error(err))
		d.term(nil)
		return
	}
	env := w.claimer.parse(d, d.meta)
	env.trace = w.traceTask(d, env)
	defer env.trace.end()
	if !w.processing.enter(env.key) {
		// An execution of this task is still in flight here: wait for it
		// to settle rather than run a second one beside it.
		w.stats.Dropped.Add(1)
		d.nakAfter(inFlightRetry)
		return
	}
	defer w.processing.leave(env.key)
	if w.deferDelayed(d, env) {
		return
	}
	if env.unhandled && env.bad == nil && w.stillUnhandled(d, env) {
		return
	}
	adm, admitted := w.admit(d, env) // paused or over a limit: naked, it waits (limits.go)
	if !admitted {
		return
	}
	defer adm.done()
	claimed := env.trace.step("ax.claim")
	rec, rev, ok := w.claimer.claim(w.ops.get(), d, env)
	if !ok {
		endSpan(claimed, errNotClaimed)
		return
	}
	endSpan(claimed, nil)
	deadlinePassed := rec.Deadline != nil && time.Now().After(*rec.Deadline)
	if env.unhandled && env.bad == nil && rec.Burying == "" && !deadlinePassed {
		w.decline(d, env, rec, rev)
		return
	}
	if !w.startRated(adm, d, env, rec, rev) {
		return
	}
	w.stats.Started.Add(1)
	switch {
	case rec.Burying != "":
		// The outcome was decided by an earlier delivery, whose dead letter
		// could not be written: bury it without running the handler again.
		w.bury(d, env, rec, rev, &decidedError{reason: rec.Burying})
		return
	case env.bad != nil:
		w.fail(d, env, rec, rev, Permanent(env.bad))
		return
	case deadlinePassed:
		w.fail(d, env, rec, rev, Permanent(fmt.Errorf("%w (%s)", ErrDeadlinePassed, rec.Deadline.Format(time.RFC3339))))
		return
	case rec.Attempt > rec.MaxAttempts:
		// Only lost attempts (their worker crashed, froze or was cut off)
		// take a task past its last attempt: the handler may be what kills
		// its worker, so it does not run again.
		w.bury(d, env, rec, rev, abandoned(rec))
		return
	}
	if !adm.holdsSlots() {
		// A slot of its limits was lost between the admission and now
		// (the worker or the server froze): it starts on no slot but one
		// AX_LIMITS confirms, so it goes back to take one afresh.
		w.stats.SlotLost.Add(1)
		w.putBack(d, env, rec, rev, ActionSlotLost)
		return
	}
	exec := &attemptRecord{w: w, rec: rec, rev: rev}
	task, runErr, cause := w.run(env, exec, d, adm)
	if !errors.Is(runErr, ErrHandlerStuck) {
		// The handler has returned: its slots go on to the next tasks of
		// their limits while this one's outcome is written.
		adm.done()
	}
	// Progress writes moved the record: the outcome is written from their
	// last revision, with the last report not yet written folded in.
	rec, rev, pending := exec.end()
	if pending != nil {
		folded := *rec
		folded.Progress = pending
		rec = &folded
	}
	if runErr == nil {
		runErr = checkResult(rec, task.result, w.cfg.MaxResultBytes, w.maxRecord)
	}
	settling := env.trace.step("ax.settle")
	defer endSpan(settling, nil)
	switch {
	case errors.Is(runErr, ErrHandlerStuck) && errors.Is(cause, ErrCancelled):
		w.cancelled(d, env, rec, rev)
	case errors.Is(runErr, ErrHandlerStuck) && !errors.Is(cause, ErrClaimLapsed):
		w.bury(d, env, rec, rev, runErr)
	case runErr == nil:
		w.succeed(d, env, rec, rev, task.result)
	case errors.Is(cause, ErrClaimLapsed):
		w.claimer.lapsed(d, env)
	case errors.Is(cause, ErrLeaseLost):
		w.putBack(d, env, rec, rev, "membership_lost")
	case errors.Is(cause, ErrLimitSlotLost):
		w.stats.SlotLost.Add(1)
		w.putBack(d, env, rec, rev, ActionSlotLost)
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

// run calls the handler in the worker's chain of middleware (Recover,
// Trace, TaskContext, then [Config.Middleware]; see [Middleware]) under the
// task's timeout and returns the task, its error and the cause of its
// context's end, if it ended. A handler that ignores its
// ended context keeps its claim (heartbeats go on) and its slot until it
// returns, for at most [Config.AbandonAfter]; then run gives up on it with
// [ErrHandlerStuck] and leaves its goroutine running.
func (w *Worker) run(env *envelope, exec *attemptRecord, d *delivery, adm *admission) (*Task, error, error) {
	rec, rev := exec.rec, exec.rev
	base, cancelBase := context.WithCancelCause(w.runCtx)
	defer cancelBase(nil)
	stopWatch := w.claimer.watchClaim(d, cancelBase)
	defer stopWatch()
	stopSlots := adm.watchSlots(cancelBase)
	defer stopSlots()
	ctx, cancel := context.WithTimeoutCause(base, time.Duration(rec.Timeout), ErrTimeout)
	defer cancel()
	ctx = env.trace.enterRun(ctx, rec.Attempt)
	epoch := w.intake.memberEpoch.Load()
	w.track(d, env.key, cancelBase) // rec.Ref() is env.ref (the store checks it)
	defer w.untrack(d)

	lapse := w.claimer.lapse()
	task := &Task{
		ID: rec.ID, Type: rec.Type, Tenant: rec.Tenant, Key: rec.Key, Priority: rec.Priority,
		Payload: d.msg.Data(), Attempt: rec.Attempt, MaxAttempts: rec.MaxAttempts,
		Headers: d.msg.Headers(), Worker: w.cfg.ID, EnqueuedAt: env.published,
		fence: Fence{Tenant: rec.Tenant, Task: rec.ID, Revision: rev, Delivery: env.delivered},
		held: func() bool {
			return ctx.Err() == nil && d.alive(lapse) && w.intake.member(epoch) && adm.holdsSlots()
		},
		exec: exec, resultLimit: w.cfg.MaxResultBytes,
	}
	if rec.Deadline != nil {
		task.Deadline = *rec.Deadline
	}
	done := make(chan error, 1)
	fn := w.chains.of(env.stored.Type, env.handler.fn) // the type env.handler was looked up by; Recover is the outermost link
	go func() { done <- fn(ctx, task) }()
	select {
	case err := <-done:
		return task, err, context.Cause(ctx)
	case <-ctx.Done():
	}
	bound := time.NewTimer(w.cfg.AbandonAfter)
	defer bound.Stop()
	select {
	case err := <-done:
		if err == nil {
			err = context.Cause(ctx)
		}
		return task, err, context.Cause(ctx)
	case <-bound.C:
	}
	cause := context.Cause(ctx)
	w.stats.Abandoned.Add(1)
	w.log.Error("handler_abandoned", env.logID(), zap.String("type", rec.Type),
		zap.Duration("waited", w.cfg.AbandonAfter), zap.NamedError("cause", cause))
	after := fmt.Sprintf("after its context ended (%s)", cause)
	if errors.Is(cause, ErrTimeout) {
		after = fmt.Sprintf("after its timeout (%s)", rec.Timeout)
	}
	return task, fmt.Errorf("%w: handler did not return within %s %s; its goroutine was abandoned", ErrHandlerStuck, w.cfg.AbandonAfter, after), cause
}

// finalCtx bounds the writes that settle an outcome by opTimeout (up to
// opShare more, [opContexts]); they must happen even while the worker
// stops. Its cancel function does nothing: the context is shared.
func (w *Worker) finalCtx() (context.Context, context.CancelFunc) {
	return w.ops.get(), func() {}
}

// succeed writes SUCCEEDED with the handler's result in one
// compare-and-set.
func (w *Worker) succeed(d *delivery, env *envelope, rec *kv.Record, rev uint64, result []byte) {
	if w.claimer.fenced(d, env) {
		return
	}
	ctx, cancel := w.finalCtx()
	defer cancel()
	_, _, err := w.store.Apply(ctx, rec, rev, kv.StateSucceeded, kv.Actor{Worker: w.cfg.ID, Action: "complete"}, func(r *kv.Record) error {
		now := time.Now().UTC()
		r.FinishedAt = &now
		r.LastError = ""
		r.Result = result
		return nil
	})
	if err != nil {
		w.settleFailedWrite(d, env, err)
		return
	}
	w.stats.Succeeded.Add(1)
	w.observe(rec, OutcomeSucceeded)
	d.ack()
}

// fail settles a failed attempt: retry with backoff while attempts remain
// and the error is not permanent, else dead-letter the task.
func (w *Worker) fail(d *delivery, env *envelope, rec *kv.Record, rev uint64, cause error) {
	var permanent *PermanentError
	if errors.As(cause, &permanent) || rec.Attempt >= rec.MaxAttempts {
		w.bury(d, env, rec, rev, retriesExhausted(cause, rec.Attempt, rec.MaxAttempts))
		return
	}
	if w.claimer.fenced(d, env) {
		return
	}
	delay := env.handler.cfg.Backoff.withDefaultsFrom(w.cfg.Backoff).Delay(rec.Attempt)
	var after *RetryAfterError
	if errors.As(cause, &after) {
		delay = after.Delay
	}
	ctx, cancel := w.finalCtx()
	defer cancel()
	_, _, err := w.store.Apply(ctx, rec, rev, kv.StateRetrying, kv.Actor{Worker: w.cfg.ID, Action: "retry", Error: cause.Error(), TimedOut: errors.Is(cause, ErrTimeout)}, func(r *kv.Record) error {
		r.LastError = cause.Error()
		return nil
	})
	if err != nil {
		w.settleFailedWrite(d, env, err)
		return
	}
	w.stats.Retried.Add(1)
	w.observe(rec, OutcomeRetry)
	w.log.Debug("task_retry", env.logID(), zap.Int("attempt", rec.Attempt), zap.Duration("delay", delay), zap.Error(cause))
	d.nakAfter(delay)
}

// bury sends the task to the dead-letter stream, marks it DEAD and terms
// its message. If the dead letter cannot be written (AX_DLQ deleted, full,
// electing), the decision is kept in the record ([kv.Record.Burying]) and
// the message comes back after a backoff to be buried, not run again.
func (w *Worker) bury(d *delivery, env *envelope, rec *kv.Record, rev uint64, cause error) {
	if w.claimer.fenced(d, env) {
		return
	}
	ctx, cancel := w.finalCtx()
	defer cancel()
	dlqSeq, err := w.deadLetter(ctx, d, env, rec, cause)
	if err != nil {
		w.decideBurial(ctx, d, env, rec, rev, cause, err)
		return
	}
	if w.claimer.fenced(d, env) {
		return // the dead letter stays: only a definite conflict deletes it
	}
	_, _, err = w.store.Apply(ctx, rec, rev, kv.StateDead, kv.Actor{Worker: w.cfg.ID, Action: "dead", Error: cause.Error(), TimedOut: errors.Is(cause, ErrTimeout)}, func(r *kv.Record) error {
		now := time.Now().UTC()
		r.FinishedAt = &now
		r.LastError = cause.Error()
		r.Burying = ""
		r.DLQSeq = dlqSeq
		return nil
	})
	if err != nil {
		if errors.Is(err, kv.ErrConflict) {
			w.orphanDeadLetter(rec.ID, dlqSeq) // definitely not ours to bury
		} else {
			// The write may have landed: the letter stays (at worst an
			// orphan, which names its task), never a DEAD record whose
			// dlq_seq names a deleted letter.
			w.log.Warn("dead_letter_kept", env.logID(), zap.Uint64("dlq_seq", dlqSeq), zap.Error(err))
		}
		w.settleFailedWrite(d, env, err)
		return
	}
	w.stats.Dead.Add(1)
	w.observe(rec, OutcomeDead)
	w.log.Info("task_dead", env.logID(), zap.String("type", rec.Type), zap.Int("attempt", rec.Attempt), zap.Error(cause))
	d.term(cause)
}

// decideBurial keeps a decided burial whose dead letter could not be
// written (dlqErr) in the record: RUNNING -> RETRYING with Burying set and
// the dead-letter failure in the trail; the message is naked with a
// backoff, and its next delivery buries the task without running it.
func (w *Worker) decideBurial(ctx context.Context, d *delivery, env *envelope, rec *kv.Record, rev uint64, cause, dlqErr error) {
	w.log.Error("dead_letter_failed", env.logID(), zap.Error(dlqErr))
	actor := kv.Actor{Worker: w.cfg.ID, Action: "burying", Error: "dead-letter stream unavailable: " + dlqErr.Error()}
	_, _, err := w.store.Apply(ctx, rec, rev, kv.StateRetrying, actor, func(r *kv.Record) error {
		r.Burying = cause.Error()
		r.LastError = cause.Error()
		return nil
	})
	if err != nil {
		w.settleFailedWrite(d, env, err)
		return
	}
	delay := buryRetryDelay(env.delivered)
	w.log.Warn("task_burying", env.logID(), zap.Duration("delay", delay), zap.Error(cause))
	d.nakAfter(delay)
}

// buryRetryDelay is how long a task whose dead letter could not be written
// waits before the next try: 2s after the first delivery, doubling, at
// most a minute.
func buryRetryDelay(delivered uint64) time.Duration {
	return min(time.Second<<min(max(delivered, 1), 6), time.Minute)
}

// decidedError is a burial decided by an earlier delivery ([kv.Record.Burying]).
type decidedError struct{ reason string }

func (e *decidedError) Error() string { return e.reason }

// abandoned is the reason a task whose attempts were lost with their
// workers is buried.
func abandoned(rec *kv.Record) error {
	last := rec.LastError
	if last == "" {
		last = "worker unknown"
	}
	return (fmt.Errorf("%w: %d of its %d attempts were lost with their worker (crash, freeze or cut-off); last: %s",
		ErrAbandoned, rec.Lost, rec.MaxAttempts, last))
}

// putBack returns a task interrupted by Stop or by a lost membership
// (action): READY again, the attempt not counted, its message redelivered at
// once. If the compare-and-set fails the claim was lost: the message is not
// ours to answer.
func (w *Worker) putBack(d *delivery, env *envelope, rec *kv.Record, rev uint64, action string) {
	if w.claimer.fenced(d, env) {
		return
	}
	ctx, cancel := w.finalCtx()
	defer cancel()
	_, _, err := w.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Worker: w.cfg.ID, Action: action}, func(r *kv.Record) error {
		r.Attempt--
		return nil
	})
	if err != nil {
		w.log.Warn("put_back_failed", env.logID(), zap.Error(err))
		w.settleFailedWrite(d, env, err)
		return
	}
	d.nak()
}

// cancelled settles a task whose handler was cancelled by an operator: the
// operator's write made it CANCELLED; the message is acked, never retried.
func (w *Worker) cancelled(d *delivery, env *envelope, rec *kv.Record, rev uint64) {
	ctx, cancel := w.finalCtx()
	defer cancel()
	_, _, err := w.store.Apply(ctx, rec, rev, kv.StateCancelled, kv.Actor{Worker: w.cfg.ID, Action: "cancel"}, nil)
	if err != nil && !errors.Is(err, kv.ErrConflict) {
		w.settleFailedWrite(d, env, err)
		return
	}
	w.observe(rec, OutcomeCancelled)
	d.ack()
}

// settleFailedWrite handles a final write that did not land. A conflict
// means the claim was lost (fenced): the message is not ours to answer. Any
// other error leaves the record RUNNING; the message is redelivered after
// its ack wait and taken over.
func (w *Worker) settleFailedWrite(d *delivery, env *envelope, err error) {
	if errors.Is(err, kv.ErrConflict) {
		w.claimer.drop(d, env, "final write lost the compare-and-set: "+err.Error(), false)
		return
	}
	w.log.Error("final_write_failed", env.logID(), zap.Error(err))
	d.leave()
}
