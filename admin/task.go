package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
)

func (a *Service) taskGet(ctx context.Context, data []byte) (any, error) {
	ref, _, _, err := a.decodeTask(ctx, data, false)
	if err != nil {
		return nil, err
	}
	rec, rev, waiting, err := a.store.Read(ctx, ref)
	if err != nil {
		return nil, err
	}
	return &TaskReply{Task: rec, Revision: rev, Unclaimed: waiting}, nil
}

func (a *Service) taskTrail(ctx context.Context, data []byte) (any, error) {
	ref, _, _, err := a.decodeTask(ctx, data, false)
	if err != nil {
		return nil, err
	}
	rec, _, _, err := a.store.Read(ctx, ref)
	if err != nil {
		return nil, err
	}
	return a.cutTrail(&TrailReply{ID: ref.ID, Tenant: ref.Tenant, Trail: rec.Trail}), nil
}

// cutTrail keeps a trail reply within the reply budget: its first move
// (the task's birth) and the newest moves that fit.
func (a *Service) cutTrail(reply *TrailReply) *TrailReply {
	trail := reply.Trail
	reply.Trail = []kv.Move{}
	room := a.roomFor(reply)
	if n, _ := fit(trail, room); n == len(trail) {
		reply.Trail = trail
		return reply
	}
	first, used := fit(trail[:1], room)
	newest := slices.Clone(trail[1:])
	slices.Reverse(newest)
	n, _ := fit(newest, room-used)
	newest = newest[:n]
	slices.Reverse(newest)
	reply.Trail = append(trail[:first:first], newest...)
	reply.Omitted, reply.Truncated = len(trail)-len(reply.Trail), true
	return reply
}

func (a *Service) taskCancel(ctx context.Context, data []byte) (any, error) {
	ref, unseen, _, err := a.decodeTask(ctx, data, true)
	if err != nil {
		return nil, err
	}
	return a.cancel(ctx, ref, unseen)
}

func (a *Service) taskPause(ctx context.Context, data []byte) (any, error) {
	ref, unseen, _, err := a.decodeTask(ctx, data, true)
	if err != nil {
		return nil, err
	}
	return a.hold(ctx, ref, kv.StatePaused, "pause", unseen)
}

// decodeTask reads a [TaskRequest] and resolves the task it names
// ([Service.resolve]); mayUnseen says whether the verb takes Unseen. When
// it does and the request has no Unseen, the task's READY record is
// written if it waits without one ([Service.materialize]); otherwise
// waiting is what resolve found in the task's bucket, for the verb's own
// materialize.
func (a *Service) decodeTask(ctx context.Context, data []byte, mayUnseen bool) (ref kv.Ref, unseen bool, waiting *kv.Record, err error) {
	var req TaskRequest
	if err := decode(data, &req); err != nil {
		return kv.Ref{}, false, nil, err
	}
	if err := validID(req.ID); err != nil {
		return kv.Ref{}, false, nil, err
	}
	if req.Unseen && !mayUnseen {
		return kv.Ref{}, false, nil, badRequest(`"unseen" applies to task.cancel and task.pause only`)
	}
	ref, waiting, err = a.resolve(ctx, req.ID, req.Tenant, req.Unseen)
	if err == nil && mayUnseen && !req.Unseen {
		err = a.materialize(ctx, ref, waiting)
	}
	return ref, req.Unseen, waiting, err
}

// materialize writes the READY record of task ref if it waits in its
// bucket with no record yet (its record is written at the claim:
// docs/decisions/record-at-claim.md), as the claim would have, so that an
// operator's move acts on it as on any READY task. waiting is that record
// when [Service.resolve] found it in the task's bucket (no bucket is read
// again); nil makes materialize look for a record, then in the buckets. A
// worker that claims the task meanwhile wins: its record exists, the
// create is refused, and the move acts on that record.
func (a *Service) materialize(ctx context.Context, ref kv.Ref, waiting *kv.Record) error {
	if waiting == nil {
		if _, _, err := a.store.Get(ctx, ref); !errors.Is(err, kv.ErrNotFound) {
			return nil // recorded (or unreadable: the move reports it)
		}
		found, err := a.store.Unclaimed(ctx, ref.ID, ref.Tenant)
		if err != nil || len(found) == 0 {
			return err
		}
		waiting = found[0]
	}
	rec := *waiting
	rec.Trail, rec.UpdatedAt = nil, time.Time{}
	if _, _, err := a.store.Create(ctx, &rec, kv.Actor{Action: "publish"}); err != nil && !errors.Is(err, kv.ErrExists) {
		return err
	}
	return nil
}

// cancel moves a task to CANCELLED; a RUNNING task's worker is then told,
// so that its handler's context ends with worker.ErrCancelled.
func (a *Service) cancel(ctx context.Context, ref kv.Ref, unseen bool) (*TaskReply, error) {
	reply, from, err := a.holdFrom(ctx, ref, kv.StateCancelled, "cancel", unseen)
	if err != nil {
		return nil, err
	}
	if from == kv.StateRunning && reply.Task.Worker != "" {
		reply.Notified = a.notify(reply.Task.Worker, ref)
	}
	return reply, nil
}

func (a *Service) hold(ctx context.Context, ref kv.Ref, to kv.State, action string, unseen bool) (*TaskReply, error) {
	reply, _, err := a.holdFrom(ctx, ref, to, action, unseen)
	return reply, err
}

// holdFrom moves a task to CANCELLED or PAUSED by compare-and-set, or writes
// its first record in that state when unseen allows it. It returns the
// state the task left.
func (a *Service) holdFrom(ctx context.Context, ref kv.Ref, to kv.State, action string, unseen bool) (*TaskReply, kv.State, error) {
	actor := kv.Actor{Action: action}
	for range maxMoveTries {
		rec, rev, err := a.store.Get(ctx, ref)
		if errors.Is(err, kv.ErrNotFound) && unseen {
			created, createdRev, err := a.store.Create(ctx, &kv.Record{ID: ref.ID, Tenant: ref.Tenant, State: to}, actor)
			if errors.Is(err, kv.ErrExists) {
				continue // a worker saw it meanwhile
			}
			if err != nil {
				return nil, "", err
			}
			return &TaskReply{Task: created, Revision: createdRev, Created: true}, "", nil
		}
		if err != nil {
			return nil, "", err
		}
		if rec.State == to || !kv.CanTransition(rec.State, to) { // PAUSED -> PAUSED only binds a message
			return nil, "", illegal(ref.String(), action, rec.State, to)
		}
		next, nextRev, err := a.store.Apply(ctx, rec, rev, to, actor, func(r *kv.Record) error {
			if to == kv.StateCancelled {
				now := time.Now().UTC()
				r.FinishedAt = &now
			}
			return nil
		})
		if errors.Is(err, kv.ErrConflict) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		a.log.Info("task_"+action, zapTask(ref), zapFrom(rec.State))
		if to == kv.StateCancelled {
			a.dropCancelled(ctx, rec)
		}
		return &TaskReply{Task: next, Revision: nextRev}, rec.State, nil
	}
	return nil, "", fmt.Errorf("%s task %s: %w", action, ref, kv.ErrConflict)
}

// notify tells the worker running a cancelled task (the notice is the
// task's record key, "<tenant>.<id>"), and reports whether it answered. A
// worker that does not answer (it died) never finishes the task: its
// message is redelivered after the ack wait and dropped as CANCELLED.
func (a *Service) notify(workerID string, ref kv.Ref) bool {
	msg, err := a.js.Conn().Request(a.cfg.Names.WorkerCancelSubject(workerID), []byte(ref.Key()), a.cfg.NoticeTimeout)
	if err != nil {
		a.log.Warn("cancel_notice_unanswered", zapTask(ref), zapWorker(workerID), zapErr(err))
		return false
	}
	return len(msg.Data) > 0
}

func (a *Service) taskResume(ctx context.Context, data []byte) (any, error) {
	ref, _, waiting, err := a.decodeTask(ctx, data, false)
	if err == nil {
		err = a.materialize(ctx, ref, waiting)
	}
	if err != nil {
		return nil, err
	}
	for range maxMoveTries {
		rec, rev, err := a.store.Get(ctx, ref)
		if err != nil {
			return nil, err
		}
		if rec.State != kv.StatePaused {
			return nil, illegal(ref.String(), "resume", rec.State, kv.StateReady, kv.StatePaused)
		}
		reply, err := a.resumeFrom(ctx, rec, rev)
		if errors.Is(err, kv.ErrConflict) {
			continue
		}
		return reply, err
	}
	return nil, fmt.Errorf("resume task %s: %w", ref, kv.ErrConflict)
}

// resumeFrom resumes a PAUSED task, read at rev, to where something moves
// it on: a copy of its current message in its bucket; a copy of its
// schedule when it waited paused aside and its pause has ended
// ([Service.releasePausedAside]); back to PENDING when it was paused before
// its delayed release (the mover releases it); or, when
// it was paused before any message of it was seen, back to unseen (its
// record is deleted, so that its first message creates it as usual).
func (a *Service) resumeFrom(ctx context.Context, rec *kv.Record, rev uint64) (*TaskReply, error) {
	if src, ok := current(a.cfg.Names, rec); ok {
		return a.redispatch(ctx, rec, rev, src, rec.Priority, "resume", nil)
	}
	if reply, done, err := a.releasePausedAside(ctx, rec, rev); done || err != nil {
		return reply, err
	}
	switch {
	case rec.RunAt != nil:
		next, nextRev, err := a.store.Apply(ctx, rec, rev, kv.StatePending, kv.Actor{Action: "resume"}, nil)
		if err != nil {
			return nil, err
		}
		return &TaskReply{Task: next, Revision: nextRev}, nil
	case rec.Type == "":
		if err := a.store.Delete(ctx, rec.Ref(), rev); err != nil {
			return nil, err
		}
		return &TaskReply{Task: rec, Revision: rev, Deleted: true}, nil
	default:
		// No message bound yet: the first one that arrives binds it.
		next, nextRev, err := a.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Action: "resume"}, nil)
		if err != nil {
			return nil, err
		}
		return &TaskReply{Task: next, Revision: nextRev}, nil
	}
}

func (a *Service) taskReprioritize(ctx context.Context, data []byte) (any, error) {
	var req ReprioritizeRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if err := validID(req.ID); err != nil {
		return nil, err
	}
	if req.Priority < 0 || req.Priority >= streams.Priorities {
		return nil, badRequest(`"priority" %d is not 0..%d (0 is P0, the highest)`, req.Priority, streams.Priorities-1)
	}
	ref, waiting, err := a.resolve(ctx, req.ID, req.Tenant, false)
	if err == nil {
		err = a.materialize(ctx, ref, waiting)
	}
	if err != nil {
		return nil, err
	}
	for range maxMoveTries {
		rec, rev, err := a.store.Get(ctx, ref)
		if err != nil {
			return nil, err
		}
		if rec.Priority == req.Priority {
			return nil, badRequest("task %s is already P%d", ref, req.Priority)
		}
		src, bound := current(a.cfg.Names, rec)
		if rec.State == kv.StatePending {
			// Not in a bucket yet: the mover releases it at its new priority.
			next, nextRev, err := a.store.Apply(ctx, rec, rev, kv.StatePending, kv.Actor{Action: "reprioritize"}, func(r *kv.Record) error {
				r.Priority = req.Priority
				return nil
			})
			if errors.Is(err, kv.ErrConflict) {
				continue
			}
			if err != nil {
				return nil, err
			}
			return &TaskReply{Task: next, Revision: nextRev}, nil
		}
		if rec.State != kv.StateReady {
			return nil, conflict("task %s is %s: only a READY or PENDING task can move to another bucket (pause or cancel it otherwise)", ref, rec.State)
		}
		if !bound {
			return nil, conflict("task %s has no message bound yet; it cannot be moved", ref)
		}
		reply, err := a.redispatch(ctx, rec, rev, src, req.Priority, "reprioritize", nil)
		if errors.Is(err, kv.ErrConflict) {
			continue
		}
		return reply, err
	}
	return nil, fmt.Errorf("reprioritize task %s: %w", ref, kv.ErrConflict)
}
