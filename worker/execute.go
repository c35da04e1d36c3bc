package worker

import (
	"context"
	"errors"
	"fmt"
	"github.com/ax-mesh/ax/axtype"
	"sync"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// inFlightRetry is when a delivery of a task already in flight on this
// worker is looked at again.
const inFlightRetry = 250 * time.Millisecond

// runner is the run stage: it takes a delivery from the claim to its
// settled outcome ([runner.process]): the middleware chain and the
// handler under its timeout, the fence, operator cancels (cancel.go), the
// outcome writes (outcome.go), delayed and dead-lettered tasks (delayed.go,
// dlq.go) and the tasks it has no handler for (unhandled.go). It owns the
// executions running here. It is given the config, JetStream, the store,
// the logger, the counters, the task path's contexts, the claim stage, the
// intake (for the membership and the peers) and the gate, whose verdicts
// it carries out before the claim (limits.go, limits_aside.go).
type runner struct {
	cfg       *Config
	js        jetstream.JetStream
	store     *kv.Store
	log       *zap.Logger
	stats     *counters
	ops       *opContexts // the shared context of the task path's operations
	maxRecord int         // the largest record the server takes (its max_payload); zero: unknown
	claimer   *claimer
	intake    *intake
	// gate admits a delivery under the pauses and limits; the runner
	// carries out its verdicts ([runner.admit], limits.go) and takes the
	// starts of its rate limits ([runner.startRated]).
	gate *gate

	tracer     trace.Tracer // nil: no spans
	chains     *chains      // the handlers in their middleware
	runCtx     context.Context
	runCancel  context.CancelCauseFunc // cancels handlers after the grace period
	running    sync.Map                // *delivery -> execution: the handlers running now
	processing inFlight                // task ids between claim and settled outcome here
	cancels    cancelNotes             // operator cancel notices
	unhandled  unhandledTypes          // types put back lately for want of a handler
}

// process takes one delivery from claim to settled outcome.
func (rn *runner) process(d *delivery) {
	if d.meta == nil {
		_, err := d.msg.Metadata()
		rn.log.Warn("bad_delivery", zap.Error(err))
		d.term(nil)
		return
	}
	env := rn.claimer.parse(d, d.meta)
	env.trace = rn.traceTask(d, env)
	defer env.trace.end()
	if !rn.processing.enter(env.key) {
		// An execution of this task is still in flight here: wait for it
		// to settle rather than run a second one beside it.
		rn.stats.Dropped.Add(1)
		d.nakAfter(inFlightRetry)
		return
	}
	defer rn.processing.leave(env.key)
	if rn.deferDelayed(d, env) {
		return
	}
	if env.unhandled && env.bad == nil && rn.stillUnhandled(d, env) {
		return
	}
	adm, admitted := rn.admit(d, env) // paused or over a limit: it waits (the gate, gate.go)
	if !admitted {
		return
	}
	defer adm.done()
	claimed := env.trace.step("ax.claim")
	rec, rev, ok := rn.claimer.claim(rn.ops.get(), d, env)
	if !ok {
		endSpan(claimed, errNotClaimed)
		return
	}
	endSpan(claimed, nil)
	deadlinePassed := rec.Deadline != nil && time.Now().After(*rec.Deadline)
	if env.unhandled && env.bad == nil && rec.Burying == "" && !deadlinePassed {
		rn.decline(d, env, rec, rev)
		return
	}
	if !rn.startRated(adm, d, env, rec, rev) {
		return
	}
	rn.stats.Started.Add(1)
	switch {
	case rec.Burying != "":
		// The outcome was decided by an earlier delivery, whose dead letter
		// could not be written: bury it without running the handler again.
		rn.bury(d, env, rec, rev, &decidedError{reason: rec.Burying})
		return
	case env.bad != nil:
		rn.fail(d, env, rec, rev, Permanent(env.bad))
		return
	case deadlinePassed:
		rn.fail(d, env, rec, rev, Permanent(fmt.Errorf("%w (%s)", ErrDeadlinePassed, rec.Deadline.Format(time.RFC3339))))
		return
	case rec.Attempt > rec.MaxAttempts:
		// Only lost attempts (their worker crashed, froze or was cut off)
		// take a task past its last attempt: the handler may be what kills
		// its worker, so it does not run again.
		rn.bury(d, env, rec, rev, abandoned(rec))
		return
	}
	if !adm.holdsSlots() {
		// A slot of its limits was lost between the admission and now
		// (the worker or the server froze): it starts on no slot but one
		// AX_LIMITS confirms, so it goes back to take one afresh.
		rn.stats.SlotLost.Add(1)
		rn.putBack(d, env, rec, rev, ActionSlotLost)
		return
	}
	exec := &attemptRecord{rn: rn, rec: rec, rev: rev}
	task, runErr, cause := rn.run(env, exec, d, adm)
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
		runErr = checkResult(rec, task.result, rn.cfg.MaxResultBytes, rn.maxRecord)
	}
	settling := env.trace.step("ax.settle")
	defer endSpan(settling, nil)
	switch {
	case errors.Is(runErr, ErrHandlerStuck) && errors.Is(cause, ErrCancelled):
		rn.cancelled(d, env, rec, rev)
	case errors.Is(runErr, ErrHandlerStuck) && !errors.Is(cause, ErrClaimLapsed):
		rn.bury(d, env, rec, rev, runErr)
	case runErr == nil:
		rn.succeed(d, env, rec, rev, task.result)
	case errors.Is(cause, ErrClaimLapsed):
		rn.claimer.lapsed(d, env)
	case errors.Is(cause, ErrLeaseLost):
		rn.putBack(d, env, rec, rev, "membership_lost")
	case errors.Is(cause, ErrLimitSlotLost):
		rn.stats.SlotLost.Add(1)
		rn.putBack(d, env, rec, rev, ActionSlotLost)
	case errors.Is(cause, ErrStop):
		rn.putBack(d, env, rec, rev, "worker_stopped")
	case errors.Is(cause, ErrCancelled):
		rn.cancelled(d, env, rec, rev)
	case errors.Is(cause, ErrTimeout):
		rn.fail(d, env, rec, rev, fmt.Errorf("%w after %s: %w", ErrTimeout, rec.Timeout, runErr))
	default:
		rn.fail(d, env, rec, rev, runErr)
	}
}

// run calls the handler in the worker's chain of middleware (Recover,
// Trace, TaskContext, then [Config.Middleware]; see [Middleware]) under the
// task's timeout and returns the task, its error and the cause of its
// context's end, if it ended. A handler that ignores its
// ended context keeps its claim (heartbeats go on) and its slot until it
// returns, for at most [Config.AbandonAfter]; then run gives up on it with
// [ErrHandlerStuck] and leaves its goroutine running.
func (rn *runner) run(env *envelope, exec *attemptRecord, d *delivery, adm *ticket) (*Task, error, error) {
	rec, rev := exec.rec, exec.rev
	base, cancelBase := context.WithCancelCause(rn.runCtx)
	defer cancelBase(nil)
	stopWatch := rn.claimer.watchClaim(d, cancelBase)
	defer stopWatch()
	stopSlots := adm.watchSlots(cancelBase)
	defer stopSlots()
	ctx, cancel := context.WithTimeoutCause(base, time.Duration(rec.Timeout), ErrTimeout)
	defer cancel()
	ctx = env.trace.enterRun(ctx, rec.Attempt)
	epoch := rn.intake.memberEpoch.Load()
	rn.track(d, env.key, cancelBase) // rec.Ref() is env.ref (the store checks it)
	defer rn.untrack(d)

	lapse := rn.claimer.lapse()
	task := &Task{
		ID: rec.ID, Type: rec.Type, Tenant: rec.Tenant, Key: rec.Key, Priority: axtype.PriorityOf(rec.Priority),
		Payload: d.msg.Data(), Attempt: rec.Attempt, MaxAttempts: rec.MaxAttempts,
		Headers: d.msg.Headers(), Worker: rn.cfg.ID, EnqueuedAt: env.published,
		fence: Fence{Tenant: rec.Tenant, Task: rec.ID, Revision: rev, Delivery: env.delivered},
		held: func() bool {
			return ctx.Err() == nil && d.alive(lapse) && rn.intake.member(epoch) && adm.holdsSlots()
		},
		exec: exec, resultLimit: rn.cfg.MaxResultBytes,
	}
	if rec.Deadline != nil {
		task.Deadline = *rec.Deadline
	}
	done := make(chan error, 1)
	fn := rn.chains.of(env.stored.Type, env.handler.fn) // the type env.handler was looked up by; Recover is the outermost link
	go func() { done <- fn(ctx, task) }()
	select {
	case err := <-done:
		return task, err, context.Cause(ctx)
	case <-ctx.Done():
	}
	bound := time.NewTimer(rn.cfg.AbandonAfter)
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
	rn.stats.Abandoned.Add(1)
	rn.log.Error("handler_abandoned", env.logID(), zap.String("type", rec.Type),
		zap.Duration("waited", rn.cfg.AbandonAfter), zap.NamedError("cause", cause))
	after := fmt.Sprintf("after its context ended (%s)", cause)
	if errors.Is(cause, ErrTimeout) {
		after = fmt.Sprintf("after its timeout (%s)", rec.Timeout)
	}
	return task, fmt.Errorf("%w: handler did not return within %s %s; its goroutine was abandoned", ErrHandlerStuck, rn.cfg.AbandonAfter, after), cause
}

// finalCtx bounds the writes that settle an outcome by opTimeout (up to
// opShare more, [opContexts]); they must happen even while the worker
// stops. Its cancel function does nothing: the context is shared.
func (rn *runner) finalCtx() (context.Context, context.CancelFunc) {
	return rn.ops.get(), func() {}
}
