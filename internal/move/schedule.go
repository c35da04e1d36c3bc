package move

import (
	"context"
	"errors"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Schedule is a PENDING task's wait in AX_DELAYED: the message that
// releases it at its run time. It is the one way into AX_DELAYED
// (TestOnlyMoveSchedules): a delayed submit ([CreatePending]), a raw
// publish with a future Ax-Run-At that a worker defers ([CreatePending]),
// and a READY task a worker steps aside for a limit or a pause
// ([StepAside]).
//
// The two entry points write in the order that never loses a task nor
// runs another's payload:
//   - a new task's record comes first: its create owns the id. A schedule
//     is keyed by tenant and id (a second one replaces the first), so a
//     schedule written first could replace the schedule of another task
//     with that id. Stopped between the two, the task is PENDING with no
//     schedule: a retried submit finds its own record and writes the
//     schedule; a raw publish is still unacked and comes back; otherwise
//     the reconciler reports it lost.
//   - a task that has a record (READY, stepping aside) has its schedule
//     written first, then the record moves to PENDING: the record already
//     owns the id, and a PENDING record always has its schedule. Stopped
//     between the two, the task is READY on its unacked message, and the
//     schedule is dropped by the leader when it fires (it releases PENDING
//     tasks only).
type Schedule struct {
	// Names of the deployment.
	Names streams.Names
	// Tenant and ID of the task.
	Tenant, ID string
	// Submit is the task's message as its producer would publish it:
	// subject, payload and headers (only the kept ones are carried).
	Submit *nats.Msg
	// RunAt is when the task is released to its bucket.
	RunAt time.Time
	// Early is how long before RunAt the server fires the schedule, for
	// the leader's mover to release it at RunAt. Zero means
	// [streams.DefaultScheduleEarly].
	Early time.Duration
	// Aside marks a schedule of a task stepped aside
	// ([streams.HeaderAside]); empty for a delayed task.
	Aside string
	// Limit is the largest message of the task ([DelayedLimit]); zero
	// means unknown (only the headers are checked).
	Limit int
}

// DelayedLimit is the largest task message (payload and headers) that a
// schedule takes: the server's max_payload less the room the schedule's
// and a dead letter's headers take ([streams.HeaderRoom]), or the
// buckets' MaxMsgSize if known and smaller (the copy that releases the
// task goes to a bucket; provisioning keeps MaxMsgSize within that room).
// Zero when neither is known.
func DelayedLimit(maxPayload int64, maxMsgSize int32) int {
	limit := 0
	if maxPayload > 0 {
		limit = max(int(maxPayload)-streams.HeaderRoom, 0)
	}
	if maxMsgSize > 0 && (limit == 0 || int(maxMsgSize) < limit) {
		limit = int(maxMsgSize)
	}
	return limit
}

// Check reports whether the task fits its schedule and the copy that
// releases it, wrapping [streams.ErrTooLarge] if not.
func (s *Schedule) Check() error {
	return streams.CheckDelayedSize(s.Submit.Data, s.Submit.Header, s.Limit)
}

// Message is the schedule's message, fired Early before RunAt.
func (s *Schedule) Message() *nats.Msg {
	early := s.Early
	if early <= 0 {
		early = streams.DefaultScheduleEarly
	}
	msg := s.Names.DelayedMsg(s.Tenant, s.ID, s.Submit, s.RunAt.Add(-early))
	if s.Aside != "" {
		msg.Header.Set(streams.HeaderAside, s.Aside)
	}
	return msg
}

// publish stores the schedule, making up to retries more attempts on an
// error that may pass (a timeout, no responders).
func (s *Schedule) publish(ctx context.Context, js jetstream.JetStream, retries int) error {
	if err := s.Check(); err != nil {
		return err
	}
	msg := s.Message()
	for attempt := 0; ; attempt++ {
		_, err := js.PublishMsg(ctx, msg)
		if err == nil || attempt >= retries || ctx.Err() != nil || !transient(err) {
			return err
		}
	}
}

// transient reports whether a publish error may pass on a retry: no
// answer came (the stream did not refuse it).
func transient(err error) bool {
	return errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrAsyncPublishTimeout)
}

// Created is what [CreatePending] did.
type Created struct {
	// Record is the task's record and Revision its revision: the one
	// created, or the one found when the id had a record.
	Record   *kv.Record
	Revision uint64
	// Existed: the id had a record, which existing judged.
	Existed bool
	// Scheduled: the schedule is stored.
	Scheduled bool
}

// Pending is a new delayed task for [CreatePending].
type Pending struct {
	// Record is the PENDING record to create.
	Record *kv.Record
	// Actor fills its trail event.
	Actor kv.Actor
	// Schedule releases it.
	Schedule Schedule
	// Existing judges a record the id already has: true goes on to write
	// the schedule (the task's own record, from a retried submit), false
	// stops with nothing written (another task's, or this one moved on).
	Existing func(rec *kv.Record) bool
	// Retries are the publish attempts made after a transient error.
	Retries int
}

// CreatePending stores a new delayed task: its PENDING record, then its
// schedule (see [Schedule] for the order). A task that does not fit is
// refused before any write. An error after the record was written leaves
// it (a retry finds it and writes the schedule; [Created.Record] says so):
// the caller decides whether to delete it ([streams.Refused]: the stream
// refused the schedule for what it is).
func CreatePending(ctx context.Context, js jetstream.JetStream, store *kv.Store, p Pending) (Created, error) {
	if err := p.Schedule.Check(); err != nil {
		return Created{}, err
	}
	var out Created
	rec, rev, err := store.Create(ctx, p.Record, p.Actor)
	if errors.Is(err, kv.ErrExists) {
		out.Existed = true
		if rec, rev, err = store.Get(ctx, p.Record.Ref()); err == nil && !p.Existing(rec) {
			return Created{Record: rec, Revision: rev, Existed: true}, nil
		}
	}
	if err != nil {
		return out, err
	}
	out.Record, out.Revision = rec, rev
	if err := p.Schedule.publish(ctx, js, p.Retries); err != nil {
		return out, err
	}
	out.Scheduled = true
	return out, nil
}

// Aside is a READY (or RETRYING) task leaving its message for AX_DELAYED,
// for [StepAside].
type Aside struct {
	// Record is the task's record, read at Revision.
	Record   *kv.Record
	Revision uint64
	// Actor fills the trail event of its move to PENDING.
	Actor kv.Actor
	// Schedule releases it at Schedule.RunAt, which becomes the record's
	// run time.
	Schedule Schedule
}

// StepAside moves a task that has a record into AX_DELAYED: its schedule,
// then the record PENDING at the schedule's run time and bound to no
// message, the leader's release naming its copy (see [Schedule] for the
// order). An error leaves the record as it was, or (a compare-and-set
// whose reply was lost) PENDING: either way the task's message is not to
// be acked, and its next delivery finds which.
func StepAside(ctx context.Context, js jetstream.JetStream, store *kv.Store, a Aside) error {
	if err := a.Schedule.publish(ctx, js, 0); err != nil {
		return err
	}
	runAt := a.Schedule.RunAt.UTC()
	_, _, err := store.Apply(ctx, a.Record, a.Revision, kv.StatePending, a.Actor, func(r *kv.Record) error {
		r.RunAt = &runAt
		r.Bind(r.Gen, "", 0)
		return nil
	})
	return err
}
