package move

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

// Config configures a [Mover].
type Config struct {
	// Names of the deployment. Zero means [streams.DefaultNames].
	Names streams.Names
	// Test holds fault-injection hooks for tests; zero in production.
	Test TestConfig
}

// TestConfig holds a [Mover]'s fault-injection hooks.
type TestConfig struct {
	// LoseWriteReply, when set, is asked after each compare-and-set that
	// landed; true makes the move see the write's reply as lost, as a
	// timeout would: the outcome is [Unclear] although the record names the
	// copy.
	LoseWriteReply func(ref kv.Ref) bool
}

// Mover makes moves ([Mover.Move]). It is safe for concurrent use.
type Mover struct {
	js    jetstream.JetStream
	store *kv.Store
	cfg   Config
	// streams caches a handle per stream name: a delete then costs one
	// request, not a stream info first. A handle only carries the name.
	streams sync.Map // string -> jetstream.Stream
}

// New returns a Mover that publishes copies through js and writes records
// through store.
func New(js jetstream.JetStream, store *kv.Store, cfg *Config) (*Mover, error) {
	if js == nil || store == nil {
		return nil, errors.New("new mover: a JetStream context and a record store are required")
	}
	if cfg == nil {
		cfg = &Config{}
	}
	return &Mover{js: js, store: store, cfg: *cfg}, nil
}

// Message names a stored message: a stream and a sequence. The zero
// Message names none.
type Message struct {
	Stream string
	Seq    uint64
}

// IsZero reports whether m names no message.
func (m Message) IsZero() bool { return m.Seq == 0 }

// Copy is the message a move publishes, built from the one it copies.
type Copy struct {
	// Data is the payload.
	Data []byte
	// Header is the copied message's; only its kept headers
	// ([streams.KeptHeaders]) are carried, less Drop.
	Header nats.Header
	// Drop names kept headers that are not carried (a dead letter's, a
	// schedule's Ax-Subject).
	Drop []string
	// Set holds headers set on the copy after the kept ones: the
	// internal ones of a copy, Ax-Waiting-Since (aging) or Ax-Released-At
	// (a release).
	Set nats.Header
}

// Request is one move.
type Request struct {
	// Record is the task's record, read at Revision: the compare-and-set
	// is made on that revision.
	Record   *kv.Record
	Revision uint64
	// To is the record's state after the move.
	To kv.State
	// Priority is the bucket the copy goes to, and the record's priority
	// after the move.
	Priority int
	// Actor fills the move's trail event.
	Actor kv.Actor
	// ReasonFunc, when set, gives the trail event's error from where the
	// copy is stored; it replaces Actor.Error.
	ReasonFunc func(copy Message) string
	// Copy is the message published.
	Copy Copy
	// Old is the message the move supersedes, deleted once the record names
	// the copy; the zero Message deletes nothing.
	Old Message
	// Mutate, when set, changes other fields of the record with the move
	// (a replay's attempt count). It runs before the move writes the
	// priority and the binding, which it cannot change.
	Mutate func(*kv.Record) error
	// Guard, when set, is called once, after the copy is stored and just
	// before the compare-and-set: the last moment a move can still be
	// stopped with nothing written to the record. An error stops it there,
	// with the outcome [Lost] (the copy is deleted as for a lost
	// compare-and-set). The leader passes its lease check.
	Guard func(ctx context.Context) error
}

// Outcome is how a move ended; see [Result].
type Outcome int

// The outcomes of a move that published its copy. The zero Outcome means no
// copy was published: the move stopped before writing anything.
const (
	// Landed: the record names the copy. The old message was deleted, best
	// effort ([Result.DeleteErr]): a worker drops it anyway, its generation
	// being behind the record's.
	Landed Outcome = iota + 1
	// Lost: the compare-and-set failed for certain (another writer moved
	// the record), or the guard stopped the move before it. The record
	// still names the old message, which is untouched. The copy was
	// deleted, unless a worker may have bound it ([Result.CopyKept]).
	Lost
	// Unclear: the compare-and-set's reply was lost or timed out, so the
	// write may have landed. The copy and the old message are both kept:
	// the record decides which one runs, and a worker drops the other (a
	// copy the record never names is an orphan, dropped after a grace).
	Unclear
)

// String names the outcome.
func (o Outcome) String() string {
	switch o {
	case Landed:
		return "landed"
	case Lost:
		return "lost"
	case Unclear:
		return "unclear"
	default:
		return "not moved"
	}
}

// Result is what a move did.
type Result struct {
	Outcome Outcome
	// Copy is where the copy is stored (zero when none was published), and
	// Gen its generation.
	Copy Message
	Gen  uint64
	// Record and Revision are the record after a [Landed] move.
	Record   *kv.Record
	Revision uint64
	// CopyKept is true when a [Lost] move kept its copy because a worker
	// may have bound it: the move released a PENDING task, and the first
	// released copy a worker meets becomes its message (docs/WIRE.md).
	CopyKept bool
	// DeleteErr is the failure of the outcome's best-effort delete: of the
	// old message after [Landed], of the copy after [Lost]. A message
	// already gone is no failure.
	DeleteErr error
}

// Move moves req.Record to a copy of its message in bucket req.Priority:
// publish the copy, call the guard, compare-and-set the record to name the
// copy, then delete the old message or the copy as the [Outcome] says.
//
// The error is nil only for [Landed]. For [Lost] it is the guard's, or
// wraps [kv.ErrConflict]; for [Unclear], the write's. With no outcome (the
// zero Outcome) the copy could not be published and nothing was written:
// [ErrBucketFull] ([BucketFullError]) when the bucket is full, else the
// publish's error ([streams.Refused] tells a copy refused for what it is).
// A publish that timed out may still have stored its copy, which no record
// names: an orphan that workers drop.
func (m *Mover) Move(ctx context.Context, req Request) (Result, error) {
	rec := req.Record
	if rec == nil {
		return Result{}, errors.New("move: no record")
	}
	if req.Priority < 0 || req.Priority >= streams.Priorities {
		return Result{}, fmt.Errorf("move task %s: priority %d: %w", rec.Ref(), req.Priority, streams.ErrBadPriority)
	}
	gen := rec.Gen + 1
	subject := m.cfg.Names.CopySubject(req.Priority, rec.Tenant, rec.Type, rec.Key)
	copied, err := m.publish(ctx, subject, rec.ID, gen, req.Priority, req.Copy)
	if err != nil {
		return Result{}, fmt.Errorf("move task %s: publish generation %d: %w", rec.Ref(), gen, err)
	}
	res := Result{Copy: copied, Gen: gen}
	// A worker binds the first released copy of a PENDING task it meets,
	// without the compare-and-set below: such a copy may be the task's
	// message whatever this move's outcome.
	adoptable := rec.State == kv.StatePending
	lost := func(err error) (Result, error) {
		res.Outcome = Lost
		if adoptable {
			res.CopyKept = true
		} else {
			res.DeleteErr = m.delete(ctx, copied)
		}
		return res, err
	}
	if req.Guard != nil {
		if err := req.Guard(ctx); err != nil {
			return lost(err)
		}
	}
	actor := req.Actor
	if req.ReasonFunc != nil {
		actor.Error = req.ReasonFunc(copied)
	}
	next, rev, err := m.store.Apply(ctx, rec, req.Revision, req.To, actor, func(r *kv.Record) error {
		if req.Mutate != nil {
			if err := req.Mutate(r); err != nil {
				return err
			}
		}
		r.Priority = req.Priority
		r.Bind(gen, copied.Stream, copied.Seq)
		return nil
	})
	if err == nil && m.cfg.Test.LoseWriteReply != nil && m.cfg.Test.LoseWriteReply(rec.Ref()) {
		next, rev, err = nil, 0, fmt.Errorf("move task %s: %w", rec.Ref(), errLostReply)
	}
	switch {
	case errors.Is(err, kv.ErrConflict):
		return lost(err)
	case err != nil:
		res.Outcome = Unclear
		return res, err
	}
	res.Outcome, res.Record, res.Revision = Landed, next, rev
	if !req.Old.IsZero() {
		res.DeleteErr = m.delete(ctx, req.Old)
	}
	return res, nil
}

// FirstRequest is the release of a delayed task that has no record (the
// submit's record write failed): see [Mover.PublishFirst].
type FirstRequest struct {
	// ID and Task name the task and its bucket: its tenant, type, key and
	// priority.
	ID   string
	Task streams.Stored
	// Copy is the message published.
	Copy Copy
	// Old is the message superseded (the fired schedule), deleted once the
	// copy is stored; the zero Message deletes nothing.
	Old Message
	// Guard, when set, is called just before the publish, which is this
	// move's commit: there is no record to compare-and-set.
	Guard func(ctx context.Context) error
}

// PublishFirst publishes the first message of a task that has no record, at
// generation 1: the first worker that meets it creates the record, as for a
// raw publish. The outcome is [Landed] once it is stored (then Old is
// deleted, best effort); otherwise no outcome, with the guard's error,
// [ErrBucketFull] or the publish's error, as for [Mover.Move].
func (m *Mover) PublishFirst(ctx context.Context, req FirstRequest) (Result, error) {
	s := req.Task
	if s.Priority < 0 || s.Priority >= streams.Priorities {
		return Result{}, fmt.Errorf("release task %s: priority %d: %w", req.ID, s.Priority, streams.ErrBadPriority)
	}
	if req.Guard != nil {
		if err := req.Guard(ctx); err != nil {
			return Result{}, err
		}
	}
	const gen = 1
	copied, err := m.publish(ctx, m.cfg.Names.CopySubject(s.Priority, s.Tenant, s.Type, s.Key), req.ID, gen, s.Priority, req.Copy)
	if err != nil {
		return Result{}, fmt.Errorf("release task %s: publish generation %d: %w", req.ID, gen, err)
	}
	res := Result{Outcome: Landed, Copy: copied, Gen: gen}
	if !req.Old.IsZero() {
		res.DeleteErr = m.delete(ctx, req.Old)
	}
	return res, nil
}

// publish stores the copy of task id at generation gen on subject, with a
// Nats-Msg-Id unique to this move: a retried publish of the move is
// de-duplicated, and no other move's entry can swallow it.
func (m *Mover) publish(ctx context.Context, subject, id string, gen uint64, priority int, c Copy) (Message, error) {
	msg := streams.TaskCopy(subject, c.Data, c.Header, id, gen, nuid.Next(), c.Drop...)
	for name, values := range c.Set {
		msg.Header[name] = values
	}
	ack, err := m.js.PublishMsg(ctx, msg)
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == streams.ErrCodeBucketFull {
		return Message{}, &BucketFullError{Stream: m.cfg.Names.PriorityStream(priority), Err: apiErr}
	}
	if err != nil {
		return Message{}, err
	}
	return Message{Stream: ack.Stream, Seq: ack.Sequence}, nil
}

// delete removes a stored message; one already gone is no error.
func (m *Mover) delete(ctx context.Context, msg Message) error {
	var err error
	stream, ok := m.streams.Load(msg.Stream)
	if !ok {
		var s jetstream.Stream
		if s, err = m.js.Stream(ctx, msg.Stream); err == nil {
			stream, _ = m.streams.LoadOrStore(msg.Stream, s)
		}
	}
	if err == nil {
		err = stream.(jetstream.Stream).DeleteMsg(ctx, msg.Seq)
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("delete %s #%d: %w", msg.Stream, msg.Seq, err)
	}
	return nil
}
