package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/move"
	"github.com/ax-mesh/ax/internal/streams"
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
//
// A message that would not fit the schedule or the copy that releases it
// ([streams.CheckDelayedSize]) is marked bad before any write, and the claim
// dead-letters it. A move that AX_DELAYED refuses for what the message is
// ([streams.Refused]) buries the task ([runner.unschedulable]); any other
// failure is retried, and never releases the task early: once its time
// has come, the claim runs it from this message ([claimer.claimFrom]).
func (rn *runner) deferDelayed(d *delivery, env *envelope) bool {
	runAt := env.opts.RunAt
	if runAt.IsZero() || env.bad != nil || !runAt.After(time.Now()) || env.released {
		return false
	}
	s := env.stored
	submit := nats.NewMsg(rn.cfg.Names.SubmitSubject(s.Priority, s.Tenant, s.Type, s.Key))
	submit.Data = d.msg.Data()
	submit.Header = d.msg.Headers()
	sched := move.Schedule{Names: rn.cfg.Names, Tenant: s.Tenant, ID: env.id, Submit: submit, RunAt: runAt, Limit: rn.delayedLimit()}
	if err := sched.Check(); err != nil {
		env.bad = fmt.Errorf("%w: %w", ErrMalformed, err)
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	want := &kv.Record{
		ID: env.id, Type: s.Type, Tenant: s.Tenant, Key: s.Key, Priority: s.Priority, State: kv.StatePending,
		MaxAttempts: env.opts.MaxAttempts, Timeout: kv.Duration(env.opts.Timeout),
		CreatedAt: env.published,
	}
	want.Bind(1, "", 0)
	at := runAt.UTC()
	want.RunAt = &at
	if !env.opts.Deadline.IsZero() {
		dl := env.opts.Deadline.UTC()
		want.Deadline = &dl
	}
	created, err := move.CreatePending(ctx, rn.js, rn.store, move.Pending{
		Record: want, Actor: kv.Actor{Worker: rn.cfg.ID, Action: "publish"}, Schedule: sched,
		// Another task's id, or already released, or a READY task a
		// worker stepped aside (no message of it carries its run time):
		// the claim decides.
		Existing: func(rec *kv.Record) bool { return rec.SamePending(want) && !rec.WaitsSteppedAside() },
	})
	switch {
	case err == nil && !created.Scheduled:
		return false
	case err != nil && created.Record != nil && streams.Refused(err):
		rn.unschedulable(ctx, d, env, created.Record, created.Revision, err)
		return true
	case err != nil:
		rn.log.Warn("defer_failed", zap.String("task_id", env.id), zap.Error(err))
		d.retryLater()
		return true
	}
	rn.log.Debug("task_deferred", zap.String("task_id", env.id), zap.Time("run_at", runAt))
	d.ack()
	return true
}

// delayedLimit is the largest delayed task ([move.DelayedLimit]): from the
// server's max_payload and the buckets' MaxMsgSize.
func (rn *runner) delayedLimit() int {
	return move.DelayedLimit(rn.js.Conn().MaxPayload(), rn.intake.maxMsgSize)
}

// unschedulable buries a delayed task whose schedule AX_DELAYED refused
// for what it is (refusal): a retry would be refused again, and the task
// would wait PENDING with nothing to release it. Its message goes to the
// dead-letter stream and its PENDING record to DEAD, with the refusal as
// the reason. Should the dead letter or the record write fail, the
// delivery comes back and the move is tried again.
func (rn *runner) unschedulable(ctx context.Context, d *delivery, env *envelope, rec *kv.Record, rev uint64, refusal error) {
	cause := fmt.Errorf("%w: %s refused its schedule: %w", ErrUnschedulable, rn.cfg.Names.DelayedStream(), refusal)
	seq, err := rn.deadLetter(ctx, d, env, rec, cause)
	if err != nil {
		rn.log.Warn("defer_refused_dead_letter_failed", zap.String("task_id", env.id), zap.Error(err))
		d.retryLater()
		return
	}
	_, _, err = rn.store.Apply(ctx, rec, rev, kv.StateDead, kv.Actor{Worker: rn.cfg.ID, Action: "dead", Error: cause.Error()}, func(r *kv.Record) error {
		now := time.Now().UTC()
		r.FinishedAt, r.LastError, r.DLQSeq = &now, cause.Error(), seq
		return nil
	})
	if err != nil {
		if errors.Is(err, kv.ErrConflict) {
			rn.orphanDeadLetter(rec.ID, seq) // moved meanwhile: its next delivery decides
		}
		rn.log.Warn("defer_refused_write_failed", zap.String("task_id", env.id), zap.Error(err))
		d.retryLater()
		return
	}
	rn.stats.Dead.Add(1)
	rn.observe(rec, OutcomeDead)
	rn.log.Info("task_dead", zap.String("task_id", rec.ID), zap.String("type", rec.Type), zap.Error(cause))
	d.term(cause)
}

// dueOwn reports whether a delivery is the raw message a PENDING record
// was written from (its tenant, type and key are checked before: foreign),
// now due: the record names no message yet, this message is the
// producer's (not a copy), at the record's priority, with the record's
// run time, and that time has come. Its move to AX_DELAYED never succeeded
// (or its ack was lost): it becomes the task's message, so that the task
// runs at its time, not never. A schedule of it that fires as well is
// dropped by the leader: its record is no longer PENDING. A task a worker
// stepped aside has no such message (its run time is the worker's): a
// message carrying that time is another's.
func dueOwn(rec *kv.Record, env *envelope, now time.Time) bool {
	return rec.State == kv.StatePending && rec.StreamSeq == 0 && !env.stored.Copy && env.stored.Priority == rec.Priority &&
		rec.RunAt != nil && env.opts.RunAt.Equal(*rec.RunAt) && !rec.RunAt.After(now) && !rec.WaitsSteppedAside()
}
