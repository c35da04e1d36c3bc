package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/move"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// reconcileOpTimeout bounds the reads and writes of one check.
const reconcileOpTimeout = 10 * time.Second

// maxCopyScan bounds the messages looked at on a task's subject in one
// bucket when its copies are searched.
const maxCopyScan = 64

// payload is a stored message that still holds a lost task's payload.
type payload struct {
	msg   *jetstream.RawStreamMsg
	where string    // e.g. "fired schedule AX_DELAYED #12"
	runAt time.Time // its Ax-Run-At, zero if none
	// delayed is true for a schedule or fired schedule in AX_DELAYED: the
	// mover releases it at its run time if the record is PENDING.
	delayed bool
}

// check judges one due record. It returns when to check it again, or the
// zero time when it left the index.
func (r *reconciler) check(ctx context.Context, t *tracked, now time.Time) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, reconcileOpTimeout)
	defer cancel()
	rec, rev, err := r.l.store.Get(ctx, t.ref)
	if errors.Is(err, kv.ErrNotFound) {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	if rev != t.rev {
		return now.Add(r.l.cfg.ReconcileGrace), nil // moved meanwhile: the watch brings the new revision
	}
	healthy := now.Add(min(r.l.cfg.ReconcileGrace<<min(t.healthy+1, 20), r.l.cfg.ReconcileRecheck))
	var lost string
	switch rec.State {
	case kv.StateReady, kv.StateRetrying:
		lost, err = r.messageLost(ctx, rec)
	case kv.StatePending:
		lost, err = r.scheduleLost(ctx, rec)
	case kv.StateRunning:
		if wait := t.since.Add(r.l.cfg.AckWait); now.Before(wait) {
			return wait, nil // its worker may still heartbeat it
		}
		lost, err = r.holderLost(ctx, rec)
	default:
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, err
	}
	if lost == "" {
		t.healthy++
		return healthy, nil
	}
	t.healthy = 0
	return r.repair(ctx, rec, rev, lost, now)
}

// messageLost reports why a READY or RETRYING task's message is gone, or
// "" if it is stored.
func (r *reconciler) messageLost(ctx context.Context, rec *kv.Record) (string, error) {
	name := rec.MessageStream(r.l.cfg.Names)
	if rec.StreamSeq == 0 { // not bound yet: any stored copy of it will run it
		found, err := r.findCopy(ctx, rec, 0)
		if err != nil || found != nil {
			return "", err
		}
		return fmt.Sprintf("no message of the task is stored in %s", r.bucketList()), nil
	}
	msg, err := r.getMsg(ctx, name, rec.StreamSeq)
	if err != nil {
		return "", err
	}
	if msg == nil {
		return fmt.Sprintf("its message %s #%d is no longer stored", name, rec.StreamSeq), nil
	}
	stored, opts, _ := r.l.cfg.Names.ParseMessage(msg.Subject, msg.Header)
	if stored.Tenant != rec.Tenant || opts.ID != rec.ID && rec.ID != streams.FallbackID(name, rec.StreamSeq, msg.Time) {
		return fmt.Sprintf("%s #%d holds another task's message (the stream was recreated?)", name, rec.StreamSeq), nil
	}
	return "", nil
}

// scheduleLost reports why a PENDING task has nothing left to release it,
// or "" if its schedule, fired schedule or a bucket copy is stored.
func (r *reconciler) scheduleLost(ctx context.Context, rec *kv.Record) (string, error) {
	names := r.l.cfg.Names
	for _, subject := range []string{names.DelayedSubject(rec.Tenant, rec.ID), names.DueSubject(rec.Tenant, rec.ID)} {
		msg, err := r.lastMsg(ctx, names.DelayedStream(), subject)
		if err != nil || msg != nil {
			return "", err
		}
	}
	found, err := r.findCopy(ctx, rec, rec.Gen) // a worker moves a PENDING task it meets to READY
	if err != nil || found != nil {
		return "", err
	}
	return fmt.Sprintf("PENDING with no schedule in %s and no message in %s", names.DelayedStream(), r.bucketList()), nil
}

// holderLost reports why a RUNNING task can never finish, or "" if its
// message will be redelivered or its worker is alive.
func (r *reconciler) holderLost(ctx context.Context, rec *kv.Record) (string, error) {
	name := rec.MessageStream(r.l.cfg.Names)
	if rec.StreamSeq == 0 {
		return "", nil
	}
	msg, err := r.getMsg(ctx, name, rec.StreamSeq)
	if err != nil || msg != nil {
		return "", err // stored: its redelivery is taken over by a worker
	}
	live, err := r.liveWorkers(ctx)
	if err != nil {
		return "", err
	}
	if live[rec.Worker] {
		return "", nil // it holds the task and will write its outcome
	}
	return fmt.Sprintf("worker %s gone since %s and its message %s #%d is no longer stored (settled without a final write); outcome unknown",
		rec.Worker, rec.UpdatedAt.Format(time.RFC3339), name, rec.StreamSeq), nil
}

// repair acts on a lost task: re-publish its payload where one is left
// (not for RUNNING: its outcome is unknown), else bury it.
func (r *reconciler) repair(ctx context.Context, rec *kv.Record, rev uint64, lost string, now time.Time) (time.Time, error) {
	var src *payload
	if rec.State != kv.StateRunning {
		var err error
		if src, err = r.findPayload(ctx, rec); err != nil {
			return time.Time{}, err
		}
	}
	if !r.l.held() {
		return time.Time{}, errNotLeading
	}
	if src != nil && src.runAt.After(now) {
		if rec.State == kv.StateReady && src.delayed {
			return r.reschedule(ctx, rec, rev, lost, src)
		}
		return src.runAt, nil // its payload waits for its run time; look again then
	}
	if src != nil && rec.State == kv.StatePending && rec.RunAt != nil && rec.RunAt.After(now) {
		// A PENDING task is never released before its time, wherever its
		// payload is: a raw message whose move to AX_DELAYED fails (an
		// outage) is the worker's to run at its time. Look again a grace
		// after it.
		return rec.RunAt.Add(r.l.cfg.ReconcileGrace), nil
	}
	if src != nil {
		return r.republish(ctx, rec, rev, lost, src)
	}
	reason := "message lost: " + lost
	_, _, err := r.l.store.Apply(ctx, rec, rev, kv.StateDead, kv.Actor{Action: "reconcile", Error: reason}, func(next *kv.Record) error {
		at := time.Now().UTC()
		next.FinishedAt, next.LastError = &at, reason
		return nil
	})
	if errors.Is(err, kv.ErrConflict) {
		return now.Add(r.l.cfg.ReconcileGrace), nil // moved meanwhile: not lost
	}
	if err != nil {
		return time.Time{}, err
	}
	r.repaired(control.Repair{TaskID: rec.ID, Tenant: rec.Tenant, State: rec.State, Action: "dead", Reason: reason, At: time.Now().UTC()})
	return time.Time{}, nil
}

// republish moves the record to READY on a control-plane copy of src
// through the move protocol ([move.Mover.Move]). src is not deleted: it is
// a schedule the mover drops once the record is READY, a dead letter, or a
// stale copy workers drop. A lost compare-and-set deletes the copy (not
// that of a PENDING task, which a worker may have bound) and looks again
// after a grace; an unclear one keeps it and the record decides.
func (r *reconciler) republish(ctx context.Context, rec *kv.Record, rev uint64, lost string, src *payload) (time.Time, error) {
	set := nats.Header{}
	set.Set(streams.HeaderReleasedAt, time.Now().UTC().Format(time.RFC3339Nano)) // due: no deferring again
	var reason string
	res, err := r.l.moves.Move(ctx, move.Request{Record: rec, Revision: rev, To: kv.StateReady, Priority: rec.Priority,
		Actor: kv.Actor{Action: "reconcile"},
		ReasonFunc: func(copied move.Message) string {
			reason = fmt.Sprintf("message lost: %s; re-published from its %s as %s #%d", lost, src.where, copied.Stream, copied.Seq)
			return reason
		},
		Copy:  move.Copy{Data: src.msg.Data, Header: src.msg.Header, Drop: streams.DeadLetterHeaders(), Set: set},
		Guard: r.l.guard})
	switch {
	case res.Outcome == move.Landed:
		r.repaired(control.Repair{TaskID: rec.ID, Tenant: rec.Tenant, State: rec.State, Action: "republished", Reason: reason, At: time.Now().UTC()})
		return time.Time{}, nil // the watch brings its new revision
	case res.Outcome == move.Lost && errors.Is(err, kv.ErrConflict):
		return time.Now().Add(r.l.cfg.ReconcileGrace), nil // the record moved on
	default: // unclear (the copy stays, the record decides), the lease lost, a full bucket, a failed publish
		return time.Time{}, fmt.Errorf("reconcile task %s: %w", rec.ID, err)
	}
}

// reschedule moves a READY task whose payload still waits in AX_DELAYED
// for a future run time back to PENDING, by compare-and-set: the mover
// then releases it at its time (it drops a fired schedule whose record is
// not PENDING, which would lose the task).
func (r *reconciler) reschedule(ctx context.Context, rec *kv.Record, rev uint64, lost string, src *payload) (time.Time, error) {
	reason := fmt.Sprintf("message lost: %s; its %s still waits for %s: PENDING again", lost, src.where, src.runAt.UTC().Format(time.RFC3339Nano))
	_, _, err := r.l.store.Apply(ctx, rec, rev, kv.StatePending, kv.Actor{Action: "reconcile", Error: reason}, func(next *kv.Record) error {
		at := src.runAt.UTC()
		next.RunAt = &at
		next.Bind(next.Gen, "", 0) // unbound: the mover releases it
		return nil
	})
	if errors.Is(err, kv.ErrConflict) {
		return time.Now().Add(r.l.cfg.ReconcileGrace), nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("reconcile task %s: %w", rec.ID, err)
	}
	r.repaired(control.Repair{TaskID: rec.ID, Tenant: rec.Tenant, State: rec.State, Action: "rescheduled", Reason: reason, At: time.Now().UTC()})
	return time.Time{}, nil
}

// findPayload looks for a stored message that still holds the task's
// payload: its schedule or fired schedule in AX_DELAYED, its dead letter,
// or a stale copy in a bucket.
func (r *reconciler) findPayload(ctx context.Context, rec *kv.Record) (*payload, error) {
	names := r.l.cfg.Names
	for _, subject := range []string{names.DueSubject(rec.Tenant, rec.ID), names.DelayedSubject(rec.Tenant, rec.ID)} {
		msg, err := r.lastMsg(ctx, names.DelayedStream(), subject)
		if err != nil {
			return nil, err
		}
		if msg != nil {
			runAt, _ := time.Parse(time.RFC3339Nano, msg.Header.Get(streams.HeaderRunAt))
			return &payload{msg: msg, where: fmt.Sprintf("schedule %s #%d", names.DelayedStream(), msg.Sequence), runAt: runAt, delayed: true}, nil
		}
	}
	if rec.DLQSeq != 0 {
		msg, err := r.getMsg(ctx, names.DLQStream(), rec.DLQSeq)
		if err != nil {
			return nil, err
		}
		if msg != nil && msg.Header.Get(streams.HeaderTaskID) == rec.ID && msg.Header.Get(streams.HeaderPayloadTruncated) == "" {
			return &payload{msg: msg, where: fmt.Sprintf("dead letter %s #%d", names.DLQStream(), msg.Sequence)}, nil
		}
	}
	found, err := r.findCopy(ctx, rec, 0)
	if err != nil || found == nil {
		return nil, err
	}
	runAt, _ := time.Parse(time.RFC3339Nano, found.Header.Get(streams.HeaderRunAt))
	return &payload{msg: found.RawStreamMsg, where: fmt.Sprintf("stale copy %s #%d", found.stream, found.Sequence), runAt: runAt}, nil
}

// findCopy looks in every bucket, on the task's stored subject, for a
// message of the task whose generation is at least minGen.
func (r *reconciler) findCopy(ctx context.Context, rec *kv.Record, minGen uint64) (*storedMsg, error) {
	names := r.l.cfg.Names
	shard := streams.Shard(rec.Key)
	for prio := range streams.Priorities {
		name := names.PriorityStream(prio)
		stream, err := r.l.js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("reconciler: bind %s: %w", name, err)
		}
		// A producer's message, or a control-plane copy (".ctl").
		for _, subject := range []string{names.StoredSubject(prio, shard, rec.Tenant, rec.Type, rec.Key),
			names.CopySubject(prio, rec.Tenant, rec.Type, rec.Key)} {
			seq := uint64(1)
			for range maxCopyScan {
				msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
				if errors.Is(err, jetstream.ErrMsgNotFound) {
					break
				}
				if err != nil {
					return nil, fmt.Errorf("reconciler: search %s: %w", name, err)
				}
				seq = msg.Sequence + 1
				_, opts, _ := names.ParseMessage(msg.Subject, msg.Header)
				if opts.ID == rec.ID && opts.Gen >= minGen {
					return &storedMsg{RawStreamMsg: msg, stream: name}, nil
				}
			}
		}
	}
	return nil, nil
}

// storedMsg is a message and the stream it is stored in.
type storedMsg struct {
	*jetstream.RawStreamMsg
	stream string
}

// getMsg reads message seq of a stream; nil when it is not stored.
func (r *reconciler) getMsg(ctx context.Context, name string, seq uint64) (*jetstream.RawStreamMsg, error) {
	stream, err := r.l.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reconciler: bind %s: %w", name, err)
	}
	msg, err := stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reconciler: get %s #%d: %w", name, seq, err)
	}
	return msg, nil
}

// lastMsg reads the last message on subject; nil when there is none.
func (r *reconciler) lastMsg(ctx context.Context, name, subject string) (*jetstream.RawStreamMsg, error) {
	stream, err := r.l.js.Stream(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("reconciler: bind %s: %w", name, err)
	}
	msg, err := stream.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reconciler: get last %s: %w", subject, err)
	}
	return msg, nil
}

func (r *reconciler) bucketList() string {
	names := r.l.cfg.Names
	return names.PriorityStream(0) + ".." + names.PriorityStream(streams.Priorities-1)
}
