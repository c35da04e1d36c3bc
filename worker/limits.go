package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Flow board: the mesh's pauses and limits ([kv.Limits] in AX_CONTROL)
// are watched by every worker and checked before a task's claim, so that a
// task held back writes nothing and uses none of its attempts: its message
// is naked with a delay and waits in its bucket, and the slot that took it
// takes the next message. With nothing configured the check reads one
// pointer and does no I/O.
const (
	// limitedPoll is how often a worker tries again to take slots for the
	// deliveries parked for each concurrency limit, and the oldest parked
	// for each rate limit (besides when a slot of the limit is given back,
	// here or elsewhere).
	limitedPoll = 50 * time.Millisecond
	// pausedFirstDelay is the nak delay of a paused task's first
	// delivery; it doubles with each delivery up to pausedMaxDelay, which
	// bounds how long a resumed task waits to start.
	pausedFirstDelay = 500 * time.Millisecond
	pausedMaxDelay   = 5 * time.Second
	// limitedFirstDelay is the nak delay of a task over a limit; it
	// doubles with each delivery up to limitedMaxDelay (plus up to half
	// of it at random, so that waiting tasks spread out).
	limitedFirstDelay = 50 * time.Millisecond
	limitedMaxDelay   = time.Second
	// limitsRetry is how long the watch of the limits waits after a
	// failure before it watches again.
	limitsRetry = time.Second
	// limitsFirstWait bounds how long Start waits for the limits.
	limitsFirstWait = 5 * time.Second
	// reservedFor is how long a start of a rate limit stays reserved
	// for a task being claimed (it is taken, or dropped, as soon as the
	// claim is decided).
	reservedFor = 5 * time.Second
	// maxParked bounds the deliveries a worker parks per limit, and
	// maxParkedBytes their messages' bytes, all limits together. A
	// delivery beyond them is naked, which frees nothing on the server (a
	// naked message stays in its consumer's ack pending) but takes a
	// delivery and a nak per retry: parking more costs memory only.
	maxParked      = 1024
	maxParkedBytes = 64 << 20
)

// ActionRateLimited is the trail action of a claimed task put back READY,
// its attempt not counted, because another worker took the last start its
// rate limit had to give between its admission and its claim.
const ActionRateLimited = "rate_limited"

// ActionSlotLost is the trail action of a task put back READY, its attempt
// not counted, because a slot of a concurrency limit it was to start or
// ran on was lost ([ErrLimitSlotLost]).
const ActionSlotLost = "limit_slot_lost"

// Reasons a task is held back, as a [HoldObserver] hears them.
const (
	HeldPaused  = "paused"
	HeldLimited = "limited"
	// HeldSteppedAside is a delivery held back by a limit that its worker
	// had no room to park: moved to AX_DELAYED for a while.
	HeldSteppedAside = "stepped_aside"
)

// HoldObserver, when the [Config.Observer] implements it too, hears about
// every delivery held back by a pause or a limit (reason [HeldPaused],
// [HeldLimited] or [HeldSteppedAside]). It must not block.
type HoldObserver interface {
	TaskHeldBack(taskType, tenant, reason string)
}

// admit runs d through the gate ([gate.admit]) before its claim and
// carries out its verdict: a paused task is naked with a delay, or moved
// aside once its pause lasts ([pauseAsideMove]); a limited one is parked
// (its record read ahead), stepped aside ([stepAsideMove]) or naked with a
// delay. It reports whether the task may be claimed, under the ticket
// returned.
func (rn *runner) admit(d *delivery, env *envelope) (*ticket, bool) {
	task := flowTask{id: env.id, exempt: env.bad != nil || env.unhandled}
	if !task.exempt {
		task.typ, task.tenant, task.key = env.stored.Type, env.stored.Tenant, env.stored.Key
	}
	tk, v := rn.gate.admit(d, task)
	switch v.kind {
	case admitRun:
		return tk, true
	case admitPaused:
		if env.delivered >= pausedAsideAfter && rn.movedAside(d, env, pauseAsideMove(rn.cfg, v.by)) {
			return nil, false
		}
		rn.gate.reportHeldBack(task.typ, task.tenant, HeldPaused)
		d.nakAfter(pausedDelay(env.delivered))
	case admitParked:
		rn.readAhead(d, env)
	case admitStepAside:
		rn.stepAside(d, env, task, v.limit, v.wait)
	case admitHoldBack:
		d.nakAfter(rn.gate.limitedNakDelay(task, env.delivered, v.wait))
	}
	return nil, false
}

// stepAside moves d, held back by limit b (its next start due after wait,
// for a rate), out of its consumer into AX_DELAYED ([stepAsideMove]);
// where it cannot (the task is not READY on this message, its record could
// not be read or written, AX_DELAYED refused the schedule), it naks d with
// a delay.
func (rn *runner) stepAside(d *delivery, env *envelope, task flowTask, b boundLimit, wait time.Duration) {
	if rn.movedAside(d, env, stepAsideMove(rn.cfg, rn.gate, b, wait)) {
		rn.stats.Limited.Add(1)
		return
	}
	d.nakAfter(rn.gate.limitedNakDelay(task, env.delivered, wait))
}

// readAhead reads the record of d's task when d is to park, unless it was
// read at an earlier park: once a slot is handed to d, its claim is then
// one compare-and-set ([claimer.readAheadClaimable]), and the limit's slot
// waits one round trip less for its next task. A failed read is left to
// the claim.
func (rn *runner) readAhead(d *delivery, env *envelope) {
	if d.flow.readAhead != nil || env.bad != nil || (env.opts.Gen == 0 && !env.recorded) {
		return // a raw publish's record may not exist yet: the claim creates it
	}
	if rec, rev, err := rn.store.Get(rn.ops.get(), env.ref); err == nil {
		d.flow.readAhead = &recordRead{rec: rec, rev: rev}
	}
}

// readAheadClaimable takes the record read ahead for d, if any, and returns
// it if the claim can start from it: READY or RETRYING, bound to d's
// message, so that all the claim does with it is its compare-and-set to
// RUNNING. Any other state is read again: the claim's other decisions
// (drop, wait) are made on a fresh read only.
func (cl *claimer) readAheadClaimable(d *delivery, env *envelope) *recordRead {
	r := d.flow.readAhead
	d.flow.readAhead = nil
	if r == nil || (r.rec.State != kv.StateReady && r.rec.State != kv.StateRetrying) || !r.rec.Names(cl.cfg.Names, env.stream, env.seq) {
		return nil
	}
	return r
}

// startRated takes, for a claimed task, a start of each rate limit its
// ticket names ([ticket.takeStarts]). If one has none left (another worker
// took it since the admission), the task is put back READY, its attempt
// not counted, and its message parked or naked with a delay; it reports
// false.
func (rn *runner) startRated(tk *ticket, d *delivery, env *envelope, rec *kv.Record, rev uint64) bool {
	over, wait, takeErr := tk.takeStarts()
	if takeErr == nil && wait == 0 {
		return true
	}
	if takeErr != nil {
		rn.log.Warn("limit_check_failed", zap.String("task_id", rec.ID), zap.Error(takeErr))
	}
	if rn.claimer.fenced(d, env) {
		return false
	}
	ctx, cancel := rn.finalCtx()
	defer cancel()
	_, _, err := rn.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Worker: rn.cfg.ID, Action: ActionRateLimited}, func(r *kv.Record) error {
		r.Attempt--
		return nil
	})
	if err != nil {
		rn.log.Warn("put_back_failed", zap.String("task_id", rec.ID), zap.Error(err))
		rn.settleFailedWrite(d, env, err)
		return false
	}
	task := flowTask{id: env.id, typ: env.stored.Type, tenant: env.stored.Tenant, key: env.stored.Key}
	if takeErr != nil {
		// The rate's bucket could not be read or written: naked with a
		// delay (a limit is never exceeded for want of a check), not
		// parked for a start that may never be seen.
		d.nakAfter(rn.gate.limitedNakDelay(task, env.delivered, wait))
		return false
	}
	if rn.gate.park(d, task, over, wait).kind == admitStepAside {
		rn.stepAside(d, env, task, over, wait)
	}
	return false
}

// watchLimits starts a watch of the limits key in js's AX_CONTROL, named
// by names.
func watchLimits(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyWatcher, error) {
	bctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	board, err := control.Open(bctx, js, names)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", names.ControlBucket(), err)
	}
	watch, err := board.Watch(ctx, control.LimitsKey)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", control.LimitsKey, err)
	}
	return watch, nil
}
