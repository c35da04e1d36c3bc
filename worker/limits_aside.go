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

// Stepping aside: a delivery held back by a limit waits parked on its
// worker while there is room (gate_park.go). A parked or naked message
// stays in its shard consumer's ack pending, and a consumer at its
// MaxAckPending delivers nothing new: a limited backlog that outgrew the
// parking room would hold back every other task of its shard. So a
// delivery that cannot be parked leaves its consumer instead: its READY
// record goes to PENDING with a run time, a schedule of it goes to
// AX_DELAYED, and its message is acked. The leader releases it at its run
// time, as it releases any delayed task (a copy at the tail of its
// bucket, docs/ARCHITECTURE.md, "The move protocol"), and its admission
// tries the limit again.

// ActionSteppedAside is the trail action of a READY task held back by a
// limit that its worker had no room to park: moved to PENDING, its message
// to AX_DELAYED until its run time, out of its shard consumer's pending
// ([kv.ActionSteppedAside]).
const ActionSteppedAside = kv.ActionSteppedAside

const (
	// asideMin and asideMax bound how long a task waits in AX_DELAYED
	// when it steps aside: about as long as the deliveries parked ahead
	// of it here take to start ([gate.asideWait]), so that it comes
	// back as the parking room empties, neither while it is still full
	// (another move) nor long after (the limit idle while it waits).
	asideMin = 100 * time.Millisecond
	asideMax = 30 * time.Second
	// asideFirst is the wait when no start of the limit was seen here
	// yet: doubled each time the same task stepped aside before.
	asideFirst = time.Second
)

// stepAsideMove is the move aside of a delivery held back by limit b (its
// next start due after wait, for a rate) that its worker has no room to
// park: it waits in AX_DELAYED about as long as the deliveries parked
// ahead of it take to start ([gate.asideWait]).
func stepAsideMove(cfg *Config, g *gate, b boundLimit, wait time.Duration) asideMove {
	return asideMove{action: ActionSteppedAside, held: HeldSteppedAside, target: b.target, retry: true,
		wait: func(rec *kv.Record) time.Duration {
			return max(g.asideWait(b, steppedAside(rec, ActionSteppedAside)), wait)
		},
		reason: func(runAt time.Time) string {
			return fmt.Sprintf("limit %s full, no room to wait on worker %s: waits in %s until %s",
				b.target, cfg.ID, cfg.Names.DelayedStream(), runAt.Format(time.RFC3339Nano))
		}}
}

// asideMove says why and for how long a READY task leaves its consumer
// for AX_DELAYED: held back by a limit ([stepAsideMove]) or by a pause
// of its type or tenant ([pauseAsideMove]).
type asideMove struct {
	action string                             // the trail action
	held   string                             // the held-back reason the metrics count
	target string                             // the limit or pause that holds it back
	retry  bool                               // a RETRYING task on its message moves too
	mark   string                             // the schedule's [streams.HeaderAside], if any
	wait   func(rec *kv.Record) time.Duration // how long it waits, from its record
	reason func(runAt time.Time) string       // the move's error in the trail
}

// movedAside does the move aside and reports whether it
// took the delivery. The schedule is written before the record, so that a
// PENDING record always has its schedule: a worker stopped between the two
// leaves a READY task on its message and a schedule the leader drops when
// it fires (it releases PENDING tasks only). A compare-and-set that fails
// leaves the same; one whose reply is lost may have landed: the message is
// then naked, and its next delivery finds the task PENDING, which the
// schedule releases (worker/claim.go, claimFrom).
func (rn *runner) movedAside(d *delivery, env *envelope, aside asideMove) bool {
	if env.bad != nil || streams.CheckDelayedSize(d.msg.Data(), d.msg.Headers(), rn.delayedLimit()) != nil {
		return false // checked again by the move, once the run time is known
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	rec, rev, err := rn.store.Get(ctx, env.ref)
	if errors.Is(err, kv.ErrNotFound) && env.opts.Gen == 0 && (!env.recorded || env.delivered > 1) {
		// A raw publish's first sight: its record is born READY on this
		// message, as a Go submit's is (the claim would create it). A
		// message that says its record is written at submit (Ax-Gen)
		// gets a delivery's nak for the Go client's write to land; after
		// that its producer is publish-only (or its write failed), and
		// the worker writes it, as the claim would.
		rec, rev, err = rn.store.Create(ctx, readyRecord(env), kv.Actor{Worker: rn.cfg.ID, Action: "publish"})
		if errors.Is(err, kv.ErrExists) {
			rec, rev, err = rn.store.Get(ctx, env.ref)
		}
	}
	movable := rec != nil && (rec.State == kv.StateReady || aside.retry && rec.State == kv.StateRetrying)
	if err != nil || !movable || !rec.Names(rn.cfg.Names, env.stream, env.seq) || rn.claimer.foreign(rec, env) != "" {
		return false
	}
	runAt := time.Now().Add(aside.wait(rec)).UTC()
	s := env.stored
	submit := nats.NewMsg(rn.cfg.Names.SubmitSubject(s.Priority, s.Tenant, s.Type, s.Key))
	submit.Data = d.msg.Data()
	submit.Header = streams.KeptHeaders(d.msg.Headers())
	submit.Header.Set(streams.HeaderRunAt, runAt.Format(time.RFC3339Nano))
	err = move.StepAside(ctx, rn.js, rn.store, move.Aside{Record: rec, Revision: rev,
		Actor: kv.Actor{Worker: rn.cfg.ID, Action: aside.action, Error: aside.reason(runAt)},
		Schedule: move.Schedule{Names: rn.cfg.Names, Tenant: s.Tenant, ID: env.id, Submit: submit, RunAt: runAt,
			Aside: aside.mark, Limit: rn.delayedLimit()}})
	if err != nil {
		rn.log.Warn("step_aside_failed", zap.String("task_id", env.id), zap.Error(err))
		return false
	}
	rn.stats.SteppedAside.Add(1)
	rn.gate.reportHeldBack(env.stored.Type, env.stored.Tenant, aside.held)
	rn.log.Debug("task_stepped_aside", zap.String("task_id", env.id), zap.String("held_by", aside.target), zap.Time("run_at", runAt))
	d.ack()
	return true
}

// steppedAside counts the times rec's trail, as kept, shows its task
// moved aside with action.
func steppedAside(rec *kv.Record, action string) int {
	n := 0
	for _, m := range rec.Trail {
		if m.Action == action {
			n++
		}
	}
	return n
}
