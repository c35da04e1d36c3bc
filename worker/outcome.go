package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"go.uber.org/zap"
)

// succeed writes SUCCEEDED with the handler's result in one
// compare-and-set.
func (rn *runner) succeed(d *delivery, env *envelope, rec *kv.Record, rev uint64, result []byte) {
	if rn.claimer.fenced(d, env) {
		return
	}
	ctx, cancel := rn.finalCtx()
	defer cancel()
	_, _, err := rn.store.Apply(ctx, rec, rev, kv.StateSucceeded, kv.Actor{Worker: rn.cfg.ID, Action: "complete"}, func(r *kv.Record) error {
		now := time.Now().UTC()
		r.FinishedAt = &now
		r.LastError = ""
		r.Result = result
		return nil
	})
	if err != nil {
		rn.settleFailedWrite(d, env, err)
		return
	}
	rn.stats.Succeeded.Add(1)
	rn.observe(rec, OutcomeSucceeded)
	d.ack()
}

// fail settles a failed attempt: retry with backoff while attempts remain
// and the error is not permanent, else dead-letter the task.
func (rn *runner) fail(d *delivery, env *envelope, rec *kv.Record, rev uint64, cause error) {
	var permanent *PermanentError
	if errors.As(cause, &permanent) || rec.Attempt >= rec.MaxAttempts {
		rn.bury(d, env, rec, rev, retriesExhausted(cause, rec.Attempt, rec.MaxAttempts))
		return
	}
	if rn.claimer.fenced(d, env) {
		return
	}
	delay := env.handler.cfg.Backoff.withDefaultsFrom(rn.cfg.Backoff).Delay(rec.Attempt)
	var after *RetryAfterError
	if errors.As(cause, &after) {
		delay = after.Delay
	}
	ctx, cancel := rn.finalCtx()
	defer cancel()
	_, _, err := rn.store.Apply(ctx, rec, rev, kv.StateRetrying, kv.Actor{Worker: rn.cfg.ID, Action: "retry", Error: cause.Error(), TimedOut: errors.Is(cause, ErrTimeout)}, func(r *kv.Record) error {
		r.LastError = cause.Error()
		return nil
	})
	if err != nil {
		rn.settleFailedWrite(d, env, err)
		return
	}
	rn.stats.Retried.Add(1)
	rn.observe(rec, OutcomeRetry)
	rn.log.Debug("task_retry", env.logID(), zap.Int("attempt", rec.Attempt), zap.Duration("delay", delay), zap.Error(cause))
	d.nakAfter(delay)
}

// bury sends the task to the dead-letter stream, marks it DEAD and terms
// its message. If the dead letter cannot be written (AX_DLQ deleted, full,
// electing), the decision is kept in the record ([kv.Record.Burying]) and
// the message comes back after a backoff to be buried, not run again.
func (rn *runner) bury(d *delivery, env *envelope, rec *kv.Record, rev uint64, cause error) {
	if rn.claimer.fenced(d, env) {
		return
	}
	ctx, cancel := rn.finalCtx()
	defer cancel()
	dlqSeq, err := rn.deadLetter(ctx, d, env, rec, cause)
	if err != nil {
		rn.decideBurial(ctx, d, env, rec, rev, cause, err)
		return
	}
	if rn.claimer.fenced(d, env) {
		return // the dead letter stays: only a definite conflict deletes it
	}
	_, _, err = rn.store.Apply(ctx, rec, rev, kv.StateDead, kv.Actor{Worker: rn.cfg.ID, Action: "dead", Error: cause.Error(), TimedOut: errors.Is(cause, ErrTimeout)}, func(r *kv.Record) error {
		now := time.Now().UTC()
		r.FinishedAt = &now
		r.LastError = cause.Error()
		r.Burying = ""
		r.DLQSeq = dlqSeq
		return nil
	})
	if err != nil {
		if errors.Is(err, kv.ErrConflict) {
			rn.orphanDeadLetter(rec.ID, dlqSeq) // definitely not ours to bury
		} else {
			// The write may have landed: the letter stays (at worst an
			// orphan, which names its task), never a DEAD record whose
			// dlq_seq names a deleted letter.
			rn.log.Warn("dead_letter_kept", env.logID(), zap.Uint64("dlq_seq", dlqSeq), zap.Error(err))
		}
		rn.settleFailedWrite(d, env, err)
		return
	}
	rn.stats.Dead.Add(1)
	rn.observe(rec, OutcomeDead)
	rn.log.Info("task_dead", env.logID(), zap.String("type", rec.Type), zap.Int("attempt", rec.Attempt), zap.Error(cause))
	d.term(cause)
}

// decideBurial keeps a decided burial whose dead letter could not be
// written (dlqErr) in the record: RUNNING -> RETRYING with Burying set and
// the dead-letter failure in the trail; the message is naked with a
// backoff, and its next delivery buries the task without running it.
func (rn *runner) decideBurial(ctx context.Context, d *delivery, env *envelope, rec *kv.Record, rev uint64, cause, dlqErr error) {
	rn.log.Error("dead_letter_failed", env.logID(), zap.Error(dlqErr))
	actor := kv.Actor{Worker: rn.cfg.ID, Action: "burying", Error: "dead-letter stream unavailable: " + dlqErr.Error()}
	_, _, err := rn.store.Apply(ctx, rec, rev, kv.StateRetrying, actor, func(r *kv.Record) error {
		r.Burying = cause.Error()
		r.LastError = cause.Error()
		return nil
	})
	if err != nil {
		rn.settleFailedWrite(d, env, err)
		return
	}
	delay := buryRetryDelay(env.delivered)
	rn.log.Warn("task_burying", env.logID(), zap.Duration("delay", delay), zap.Error(cause))
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
func (rn *runner) putBack(d *delivery, env *envelope, rec *kv.Record, rev uint64, action string) {
	if rn.claimer.fenced(d, env) {
		return
	}
	ctx, cancel := rn.finalCtx()
	defer cancel()
	_, _, err := rn.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Worker: rn.cfg.ID, Action: action}, func(r *kv.Record) error {
		r.Attempt--
		return nil
	})
	if err != nil {
		rn.log.Warn("put_back_failed", env.logID(), zap.Error(err))
		rn.settleFailedWrite(d, env, err)
		return
	}
	d.nak()
}

// cancelled settles a task whose handler was cancelled by an operator: the
// operator's write made it CANCELLED; the message is acked, never retried.
func (rn *runner) cancelled(d *delivery, env *envelope, rec *kv.Record, rev uint64) {
	ctx, cancel := rn.finalCtx()
	defer cancel()
	_, _, err := rn.store.Apply(ctx, rec, rev, kv.StateCancelled, kv.Actor{Worker: rn.cfg.ID, Action: "cancel"}, nil)
	if err != nil && !errors.Is(err, kv.ErrConflict) {
		rn.settleFailedWrite(d, env, err)
		return
	}
	rn.observe(rec, OutcomeCancelled)
	d.ack()
}

// settleFailedWrite handles a final write that did not land. A conflict
// means the claim was lost (fenced): the message is not ours to answer. Any
// other error leaves the record RUNNING; the message is redelivered after
// its ack wait and taken over.
func (rn *runner) settleFailedWrite(d *delivery, env *envelope, err error) {
	if errors.Is(err, kv.ErrConflict) {
		rn.claimer.drop(d, env, "final write lost the compare-and-set: "+err.Error(), false)
		return
	}
	rn.log.Error("final_write_failed", env.logID(), zap.Error(err))
	d.leave()
}
