package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// opTimeout bounds each KV and stream operation of the task path (up to
// opShare more: the claim and the final writes share contexts, [opContexts]).
const opTimeout = 10 * time.Second

// claimer is the claim stage: it reads what a delivery says ([claimer.parse]),
// moves the task's record to RUNNING for it ([claimer.claim]), watches the
// claim while the handler runs ([claimer.watchClaim]) and fences the final
// writes of a claim that lapsed ([claimer.fenced]). A delivery that waited
// parked starts from the record read when it parked
// ([claimer.readAheadClaimable]). It keeps the claims of every delivery
// held here alive with heartbeats ([claimer.heartbeats]) and gives up a
// queued one whose claim lapsed ([claimer.expired]). It is given the config,
// the store, the logger, the counters, the connection and the held set.
type claimer struct {
	cfg   *Config
	store *kv.Store
	log   *zap.Logger
	stats *counters
	conn  *nats.Conn // the heartbeats' requests
	held  *heldSet   // the deliveries held here: the heartbeats' messages
}

// claim moves the task to RUNNING for this delivery. It returns false when
// the delivery must not run; the delivery is then settled or left to lapse.
func (cl *claimer) claim(ctx context.Context, d *delivery, env *envelope) (*kv.Record, uint64, bool) {
	const maxTries = 8
	waits := 0
	ahead := cl.readAheadClaimable(d, env)
	for try := 0; try < maxTries; try++ {
		var rec *kv.Record
		var rev uint64
		var err error
		if ahead != nil {
			// Read while the delivery waited for a slot of its limit: the
			// claim's compare-and-set fails if the record moved since, and
			// the next try reads it again.
			rec, rev, ahead = ahead.rec, ahead.rev, nil
		} else {
			if env.opts.Gen == 0 && try == 0 && !env.recorded {
				// A raw publish has no record yet: its first sight creates it.
				rec, rev, err = cl.store.Create(ctx, cl.newRecord(env), kv.Actor{Worker: cl.cfg.ID, Action: "claim", Released: env.release})
				if err == nil {
					return rec, rev, true
				}
			}
			if err == nil || errors.Is(err, kv.ErrExists) {
				rec, rev, err = cl.store.Get(ctx, env.ref)
			}
		}
		if errors.Is(err, kv.ErrNotFound) && env.recorded && waits < recordWaits {
			// A Go client publishes, then creates the record: give its
			// create a moment rather than racing it (which costs a failed
			// create and a second read). The first look again is at once:
			// the create is most often a round trip behind the message,
			// and a timer shorter than a millisecond takes about one in an
			// idle process.
			waits++
			try--
			if waits == 1 {
				continue
			}
			select {
			case <-time.After(recordWait << (waits - 2)):
				continue
			case <-ctx.Done():
			}
		}
		if errors.Is(err, kv.ErrNotFound) {
			rec, rev, err = cl.store.Create(ctx, cl.newRecord(env), kv.Actor{Worker: cl.cfg.ID, Action: "claim", Released: env.release})
			if err == nil {
				return rec, rev, true
			}
			if errors.Is(err, kv.ErrExists) {
				continue
			}
		}
		var foreign *kv.ForeignError
		if errors.As(err, &foreign) && cl.repair(ctx, env, foreign) {
			continue // rebuilt: claim it as any READY task
		}
		if err != nil {
			cl.log.Warn("claim_failed", env.logID(), zap.Error(err))
			d.retryLater()
			return nil, 0, false
		}
		next, nextRev, done, err := cl.claimFrom(ctx, d, env, rec, rev)
		if errors.Is(err, kv.ErrConflict) {
			continue // someone moved it; look again
		}
		if err != nil {
			// The write may have landed with its reply lost: if the record
			// says this worker claimed this delivery, it did.
			if rec, rev, ok := cl.claimLanded(ctx, env); ok {
				return rec, rev, true
			}
			cl.log.Warn("claim_failed", env.logID(), zap.Error(err))
			d.retryLater()
			return nil, 0, false
		}
		if next != nil {
			return next, nextRev, true
		}
		if done {
			return nil, 0, false
		}
	}
	cl.log.Warn("claim_contended", env.logID())
	d.retryLater()
	return nil, 0, false
}

// recordWait and recordWaits shape how long a worker waits for the record of
// a message a Go client submitted (Ax-Gen set) before creating it itself: it
// reads again at once, then after recordWait, twice that, and so on,
// recordWaits times in all (about 16 ms).
const (
	recordWait  = 500 * time.Microsecond
	recordWaits = 6
)

// errLostReply is what [TestConfig.LoseClaimReply] makes a claim see.
var errLostReply = errors.New("claim write's reply lost (test)")

// claimLanded re-reads the record after a claim write failed without a
// definite conflict, and reports whether that write landed: the record is
// RUNNING by this worker for this delivery of this message. Without it the
// worker would nak its own claim and take it over at the next delivery,
// counting a lost attempt that never ran.
func (cl *claimer) claimLanded(ctx context.Context, env *envelope) (*kv.Record, uint64, bool) {
	rec, rev, err := cl.store.Get(ctx, env.ref)
	if err != nil || rec.State != kv.StateRunning || rec.Worker != cl.cfg.ID || rec.Delivery != env.delivered ||
		rec.StreamSeq != env.seq || rec.Stream != env.stream {
		return nil, 0, false
	}
	return rec, rev, true
}

// aheadGrace is how long a message whose generation is ahead of its
// record's is kept for the control plane's compare-and-set that names it;
// past that its move was abandoned, and it is dropped as an orphan.
const aheadGrace = 3 * opTimeout

// claimFrom decides what a delivery means for a record in its current state:
// a claimed record (non-nil), a settled or dropped delivery (done), or a
// record moved one step closer (neither: look again).
//
// The record names the one message that may run the task ([kv.Record.Stream]
// and StreamSeq). Any other message naming the task is dropped: a copy an
// earlier move left behind (its generation is behind the record's), a
// duplicate submit of the id, or an orphan copy of a move that lost its
// compare-and-set. A copy whose generation is ahead of the record's is a
// move in progress: it is looked at again shortly, until the control plane
// names it or aheadGrace has passed. A PENDING task's own raw message
// whose move to AX_DELAYED never succeeded becomes its message once due
// ([dueOwn]).
func (cl *claimer) claimFrom(ctx context.Context, d *delivery, env *envelope, rec *kv.Record, rev uint64) (*kv.Record, uint64, bool, error) {
	actor := kv.Actor{Worker: cl.cfg.ID, Action: "claim"}
	if why := cl.foreign(rec, env); why != "" {
		cl.drop(d, env, why, true)
		return nil, 0, true, nil
	}
	bound := rec.StreamSeq != 0
	mine := rec.Names(cl.cfg.Names, env.stream, env.seq)
	switch {
	case mine:
	case dueOwn(rec, env, time.Now()):
		// The message the PENDING record was written from, due now, its
		// move to AX_DELAYED never done: it is the task's message.
		_, _, err := cl.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Worker: cl.cfg.ID, Action: "due"}, func(r *kv.Record) error {
			r.Bind(r.Gen, env.stream, env.seq)
			return nil
		})
		return nil, 0, false, err // look again: it is the task's message now
	case env.opts.Gen < rec.Gen:
		cl.drop(d, env, "stale generation", true)
		return nil, 0, true, nil
	case env.opts.Gen > rec.Gen:
		if rec.State == kv.StatePending {
			break // a released copy: the first one seen becomes the task's message
		}
		return nil, 0, true, cl.ahead(ctx, d, env, rec, rev)
	case bound:
		cl.drop(d, env, fmt.Sprintf("another message of the task is current (%s #%d)", rec.Stream, rec.StreamSeq), true)
		return nil, 0, true, nil
	}
	// Here the delivery is the task's current message, or the first message
	// of a task whose record names none yet.
	switch rec.State {
	case kv.StateReady, kv.StateRetrying:
		next, nextRev, err := cl.store.Apply(ctx, rec, rev, kv.StateRunning, actor, func(r *kv.Record) error {
			cl.start(r, env)
			return nil
		})
		if err == nil && cl.cfg.Test.LoseClaimReply != nil && cl.cfg.Test.LoseClaimReply(env.delivered) {
			return nil, 0, false, errLostReply
		}
		return next, nextRev, false, err
	case kv.StatePending:
		if !env.released {
			// Not a released copy (a raw message naming a delayed task):
			// keep it until the task is released, then it is stale.
			return nil, 0, true, cl.ahead(ctx, d, env, rec, rev)
		}
		if env.stored.Priority != rec.Priority {
			// Released before a reprioritize (which failed the release's
			// compare-and-set): the release is done again at the new one.
			cl.drop(d, env, fmt.Sprintf("released copy at P%d, but the task is P%d now", env.stored.Priority, rec.Priority), true)
			return nil, 0, true, nil
		}
		_, _, err := cl.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Worker: cl.cfg.ID, Action: "due"}, func(r *kv.Record) error {
			r.Bind(env.opts.Gen, env.stream, env.seq)
			return nil
		})
		return nil, 0, false, err
	case kv.StateRunning:
		if !mine {
			// Running from no bound message: only a record written by an
			// older version; treat this one as a duplicate.
			cl.drop(d, env, "task is RUNNING from another message", true)
			return nil, 0, true, nil
		}
		if env.delivered <= rec.Delivery {
			// A later delivery of this message was claimed: ours lapsed.
			cl.drop(d, env, "delivery superseded", false)
			return nil, 0, true, nil
		}
		// The holder's claim lapsed (no heartbeat within the ack wait): it
		// crashed, froze or was cut off. The lost attempt counts: take the
		// task over, leaving the hand-over and its cause in the trail.
		cause := fmt.Sprintf("worker %s lost while running attempt %d (no heartbeat within the ack wait: crashed, frozen or cut off)", rec.Worker, rec.Attempt)
		_, _, err := cl.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Worker: cl.cfg.ID, Action: "takeover", Error: cause}, func(r *kv.Record) error {
			r.Lost++
			r.LastError = cause
			return nil
		})
		return nil, 0, false, err
	case kv.StatePaused:
		if !bound && rec.Type == "" {
			// An id paused before any message of it was seen: the first
			// message binds it (its tenant, type and key with it), so that
			// the resume runs this one and every other is dropped.
			_, _, err := cl.store.Apply(ctx, rec, rev, kv.StatePaused, kv.Actor{Worker: cl.cfg.ID, Action: "bind"}, func(r *kv.Record) error {
				r.Type, r.Tenant, r.Key, r.Priority = env.stored.Type, env.stored.Tenant, env.stored.Key, env.stored.Priority
				r.Bind(env.opts.Gen, env.stream, env.seq)
				return nil
			})
			if err != nil {
				return nil, 0, false, err // a conflict looks again
			}
		}
		// Keep the message (and its payload) until the task is resumed.
		d.nakAfter(cl.cfg.AckWait)
		return nil, 0, true, nil
	default: // SUCCEEDED, DEAD, CANCELLED: nothing left to do
		cl.drop(d, env, "task is "+string(rec.State), true)
		return nil, 0, true, nil
	}
}

// foreign reports why a message cannot be the task its record describes:
// its type or key differ (a task is bound to them; its tenant and id name
// the record), or "".
func (cl *claimer) foreign(rec *kv.Record, env *envelope) string {
	if rec.Type == "" { // born CANCELLED or PAUSED by an operator who knew only the id
		return ""
	}
	s := env.stored
	if s.Type != rec.Type || s.Key != rec.Key {
		return fmt.Sprintf("message names task %s but is %s/%s, not the task's %s/%s",
			env.ref, s.Type, s.Key, rec.Type, rec.Key)
	}
	return ""
}

// ahead keeps a message whose move is in progress: it is delivered again
// shortly (50 ms, doubling to 1 s), until aheadGrace after it was stored,
// then dropped as the orphan of an abandoned move.
//
// A move abandoned only for a while (its process froze between its publish
// and its compare-and-set) could still name the copy after it is gone. So
// the record (rec, read at rev) is written first, where its state allows
// it (READY, PENDING): the late compare-and-set then fails on its revision.
// A conflict is returned: the record moved, so the delivery is looked at
// again.
func (cl *claimer) ahead(ctx context.Context, d *delivery, env *envelope, rec *kv.Record, rev uint64) error {
	if time.Since(env.published) > aheadGrace {
		why := fmt.Sprintf("orphan copy %s #%d (generation %d): no move named it within %s", env.stream, env.seq, env.opts.Gen, aheadGrace)
		if kv.CanTransition(rec.State, rec.State) {
			if _, _, err := cl.store.Apply(ctx, rec, rev, rec.State, kv.Actor{Worker: cl.cfg.ID, Action: "orphan", Error: why}, nil); err != nil {
				return err
			}
		}
		cl.drop(d, env, why, true)
		return nil
	}
	delay := min(50*time.Millisecond<<min(env.delivered, 5), time.Second)
	cl.stats.Dropped.Add(1)
	d.nakAfter(delay)
	return nil
}

// newRecord is the RUNNING record a worker's first sight creates.
func (cl *claimer) newRecord(env *envelope) *kv.Record {
	rec := readyRecord(env)
	rec.State = kv.StateRunning
	cl.start(rec, env)
	return rec
}

// readyRecord is the READY record of a raw publish's task, bound to its
// message: what a Go submit writes.
func readyRecord(env *envelope) *kv.Record {
	return kv.WaitingRecord(env.stored, env.opts, env.id, env.stream, env.seq, env.published)
}

// start fills the fields of a claim.
func (cl *claimer) start(r *kv.Record, env *envelope) {
	now := time.Now().UTC()
	if r.Type == "" { // born CANCELLED or PAUSED by an operator who knew only the id
		r.Type, r.Tenant, r.Key, r.Priority = env.stored.Type, env.stored.Tenant, env.stored.Key, env.stored.Priority
	}
	if r.Burying == "" { // a decided burial runs no attempt
		r.Attempt++
	}
	r.Worker = cl.cfg.ID
	r.Delivery = env.delivered
	r.Bind(r.Gen, env.stream, env.seq)
	r.StartedAt = &now
	if env.unhandled {
		return // put back at once: the type's handler sets the defaults below
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = cmp.Or(env.handler.cfg.MaxAttempts, cl.cfg.DefaultMaxAttempts)
	}
	if r.Timeout == 0 {
		r.Timeout = kv.Duration(cmp.Or(env.handler.cfg.Timeout, cl.cfg.DefaultTimeout))
	}
}

// drop gives up a delivery that must not run; ack removes it from the
// stream, otherwise it is left alone (it is not ours to answer).
func (cl *claimer) drop(d *delivery, env *envelope, why string, ack bool) {
	cl.stats.Dropped.Add(1)
	if ack {
		d.ack()
		cl.log.Debug("delivery_dropped", env.logID(), zap.String("reason", why))
		return
	}
	d.leave()
	cl.log.Warn("lost_claim", env.logID(), zap.String("reason", why), zap.Uint64("delivery", env.delivered))
}

// repair rebuilds the record of a delivered task whose key holds a value
// ax did not write there (found), from the message: READY and bound to
// it, as a Go submit writes it, with a first move that names the value
// replaced ([kv.Store.Repair]). It reports whether the key holds a record
// now (rebuilt, or changed meanwhile): the claim then reads it again.
func (cl *claimer) repair(ctx context.Context, env *envelope, found *kv.ForeignError) bool {
	_, rev, err := cl.store.Repair(ctx, found, readyRecord(env), kv.Actor{Worker: cl.cfg.ID})
	if errors.Is(err, kv.ErrConflict) {
		return true
	}
	if err != nil {
		cl.log.Warn("foreign_record_repair_failed", env.logID(), zap.Uint64("revision", found.Revision), zap.Error(err))
		return false
	}
	cl.log.Warn("foreign_record_repaired", env.logID(), zap.Uint64("foreign_revision", found.Revision),
		zap.ByteString("foreign_value", found.Value), zap.Uint64("revision", rev))
	if o, ok := cl.cfg.Observer.(RepairObserver); ok {
		o.ForeignValueRepaired(cl.cfg.Names.TasksBucket(), "rebuilt")
	}
	return true
}
