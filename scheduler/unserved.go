package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"
)

// unservedExpiry dead-letters the waiting tasks of a task type for which an
// operator set a deadline ([UnservedDeadlines]) once no live worker has
// served the type for that long and the task itself has waited that long:
// on a pools deployment no worker of the type's pool, on the default layout
// no worker with a handler for it ([kv.ServedTypes]; a worker of an earlier
// release, which does not say, serves every type). A type served again
// restarts its clock, so a rolling restart of its pool dead-letters
// nothing. The deadline for every type ("*") applies, on the default
// layout, to the types live workers put back lately ([kv.UnservedAmong]).
//
// When the type was last served is what this leader saw: a new leader
// starts every clock at its election, so a failover only delays a burial.
//
// A burial publishes the dead letter first, then moves the record to DEAD
// by compare-and-set (READY or RETRYING naming this message; a raw publish
// no worker has seen is born DEAD), then deletes the message from its
// bucket. A worker that joins meanwhile and claims the task wins or loses
// the same compare-and-set: when the leader loses it, it deletes its
// letter; when the outcome is unknown, the letter stays (replay refuses a
// letter its record does not name).
//
// A malformed message is buried too (no worker comes to dead-letter it),
// and a producer's message a worker would drop ([stray]) is deleted, so
// that nothing of an unserved type keeps its place in the bucket past the
// deadline. Each type's scan of a bucket resumes where the last pass ran
// out of budget.
type unservedExpiry struct {
	l        *Leader
	log      *zap.Logger
	board    jetstream.KeyValue
	start    time.Time
	servedAt map[string]time.Time // when this leader last saw a live worker serve the type
	// allServedAt is when this leader last saw a live worker that does not
	// say which types it handles (an earlier release): every type served.
	allServedAt time.Time
	// cursor is where the scan of a type in a bucket resumes when the last
	// pass ran out of budget: messages it cannot bury (tasks an operator
	// paused) would otherwise hide, pass after pass, the tasks behind them.
	cursor map[string]uint64
}

func newUnservedExpiry(l *Leader) *unservedExpiry {
	return &unservedExpiry{l: l, log: l.log.Named("unserved"), start: time.Now(), servedAt: map[string]time.Time{}, cursor: map[string]uint64{}}
}

func (u *unservedExpiry) run(ctx context.Context) error {
	board, err := control.Open(ctx, u.l.js, u.l.cfg.Names)
	if err != nil {
		return fmt.Errorf("unserved deadlines: bind %s: %w", u.l.cfg.Names.ControlBucket(), err)
	}
	u.board = board
	tick := time.NewTicker(u.l.cfg.UnservedInterval)
	defer tick.Stop()
	for {
		if err := u.pass(ctx); err != nil && ctx.Err() == nil {
			u.log.Warn("unserved_pass_failed", zap.Error(err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// pass buries the due tasks of every type whose deadline has passed.
func (u *unservedExpiry) pass(ctx context.Context) error {
	names := u.l.cfg.Names
	first, err := u.l.js.Stream(ctx, names.PriorityStream(0))
	if err != nil {
		return err
	}
	layout := streams.LayoutOf(first.CachedInfo().Config)
	// Every pass tracks when each type was last served, deadline or not:
	// a deadline set just after a type's last worker left counts from then.
	members, err := kv.ListMembers(ctx, u.l.js, names)
	if err != nil {
		return err
	}
	now := time.Now()
	served, all := kv.ServedTypes(members, layout)
	if all {
		// A live worker of an earlier release does not say which types it
		// handles: as far as the leader can tell, it serves every type.
		u.allServedAt = now
		return nil
	}
	for t := range served {
		u.servedAt[t] = now
	}
	deadlines, _, err := control.ReadUnservedDeadlines(ctx, u.board)
	if err != nil {
		return err
	}
	if len(deadlines.Deadlines) == 0 {
		clear(u.cursor)
		return nil
	}
	expiring := maps.Clone(deadlines.Deadlines)
	delete(expiring, control.AnyUnservedType)
	if fallback, ok := deadlines.Deadlines[control.AnyUnservedType]; ok {
		// Every type waiting unserved, as the operators' stats list them:
		// a type without a deadline of its own takes this one.
		waiting, err := kv.UnservedAmong(ctx, u.l.js, names, members, layout)
		if err != nil {
			return err
		}
		for _, w := range waiting {
			if _, own := expiring[w.Type]; !own {
				expiring[w.Type] = fallback
			}
		}
	}
	u.forgetCursors(expiring)
	budget := scanBudget{lifts: u.l.cfg.AgingBatch, scans: 10 * u.l.cfg.AgingBatch}
	for _, t := range slices.Sorted(maps.Keys(expiring)) {
		deadline := time.Duration(expiring[t])
		if deadline < control.MinUnservedDeadline || deadline > control.MaxUnservedDeadline {
			// Written by hand into AX_CONTROL (a bare number is nanoseconds):
			// applying it could bury every task of the type at once.
			u.log.Warn("unserved_deadline_out_of_bounds", zap.String("type", t), zap.Duration("deadline", deadline),
				zap.Duration("min", control.MinUnservedDeadline), zap.Duration("max", control.MaxUnservedDeadline))
			continue
		}
		since, ok := u.servedAt[t]
		if !ok {
			since = u.start
		}
		if u.allServedAt.After(since) {
			since = u.allServedAt
		}
		if served[t] || now.Sub(since) < deadline {
			continue
		}
		for prio := range streams.Priorities {
			if err := u.scan(ctx, prio, t, deadline, now.Sub(since), &budget); err != nil {
				return err
			}
		}
	}
	return nil
}

// forgetCursors drops the scan cursors of the types no longer expiring: the
// types a producer made up come and go, and their cursors must go with
// them.
func (u *unservedExpiry) forgetCursors(expiring map[string]kv.Duration) {
	keep := map[string]bool{}
	for t := range expiring {
		for prio := range streams.Priorities {
			keep[u.filter(prio, t)] = true
		}
	}
	for f := range u.cursor {
		if !keep[f] {
			delete(u.cursor, f)
		}
	}
}

// filter is the subject filter of type t's messages in bucket prio.
func (u *unservedExpiry) filter(prio int, t string) string {
	return u.l.cfg.Names.StoredTypeFilter(prio, t)
}

// scan buries the messages of type t in bucket prio that waited deadline,
// oldest first, stopping at the first one stored less than deadline ago.
func (u *unservedExpiry) scan(ctx context.Context, prio int, t string, deadline, unserved time.Duration, budget *scanBudget) error {
	names := u.l.cfg.Names
	stream, err := u.l.js.Stream(ctx, names.PriorityStream(prio))
	if err != nil {
		return err
	}
	filter := u.filter(prio, t)
	cutoff := time.Now().Add(-deadline)
	reason := fmt.Sprintf("unserved: no live worker served task type %q for %s (its deadline is %s)", t, unserved.Round(time.Second), deadline)
	seq := max(stream.CachedInfo().State.FirstSeq, u.cursor[filter])
	delete(u.cursor, filter)
	for ; ; budget.scans-- {
		if budget.lifts <= 0 || budget.scans <= 0 {
			u.cursor[filter] = seq // the next pass goes on from here
			return nil
		}
		msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil // the end: the next pass starts again at the head
		}
		if err != nil {
			return err
		}
		if msg.Time.After(cutoff) {
			return nil
		}
		seq = msg.Sequence + 1
		ok, err := u.bury(ctx, stream, prio, msg, deadline, reason)
		if err != nil {
			if errors.Is(err, errNotLeading) {
				return err
			}
			u.log.Warn("unserved_bury_failed", zap.Uint64("seq", msg.Sequence), zap.Error(err))
			continue
		}
		if ok {
			budget.lifts--
		}
	}
}

// bury dead-letters the task of one waiting message if the message is the
// task's current one and the task waited deadline. It reports whether it
// did.
func (u *unservedExpiry) bury(ctx context.Context, stream jetstream.Stream, prio int, raw *jetstream.RawStreamMsg, deadline time.Duration, reason string) (bool, error) {
	names := u.l.cfg.Names
	bucket := names.PriorityStream(prio)
	stored, err := names.ParseStored(raw.Subject)
	if err != nil {
		return false, nil // not a task's subject: no id, tenant or key to bury it under
	}
	_, opts, err := names.ParseMessage(raw.Subject, raw.Header)
	if err != nil {
		// A malformed header, which a worker of the type would dead-letter
		// with the cause: no worker comes, so it is buried here, under the
		// id a worker would give it (its Nats-Msg-Id when that is valid).
		reason = fmt.Sprintf("%s; the message is also malformed: %s", reason, err)
	}
	id := opts.ID
	if id == "" {
		id = streams.FallbackID(bucket, raw.Sequence, raw.Time)
	}
	rec, rev, err := u.l.store.Get(ctx, kv.Ref{Tenant: stored.Tenant, ID: id})
	switch {
	case errors.Is(err, kv.ErrNotFound):
		if stored.Copy {
			return false, nil // a board-plane copy whose record expired: a worker drops it
		}
		// A raw publish no worker has seen (or a Go submit whose record
		// write never came: the client died in between; its Ax-Gen header
		// is a hint a producer can forge, so it buys no exemption).
		rec = nil
	case err != nil:
		return false, err
	case stray(rec, stored, names, bucket, raw.Sequence):
		// A producer's message naming a task whose record names another
		// message (a duplicate id in another bucket, or after the dedup
		// window), or a task of another tenant, type or key: a worker of
		// the type would drop it, as the Go client deletes its own. No
		// worker comes: it is removed here, or it would keep its place in
		// the bucket forever. The task it names is not touched.
		if err := stream.DeleteMsg(ctx, raw.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return false, fmt.Errorf("drop stray message of task %s: %w", id, err)
		}
		u.log.Info("unserved_stray_dropped", zap.String("task_id", id), zap.String("type", stored.Type), zap.Int("priority", prio), zap.Uint64("seq", raw.Sequence))
		return false, nil
	case !rec.Names(names, bucket, raw.Sequence) || (rec.State != kv.StateReady && rec.State != kv.StateRetrying):
		return false, nil // not the task's current message, or not waiting
	}
	since := raw.Time
	if rec != nil {
		since, _ = waitingSince(rec)
	} else if opts.RunAt.After(since) {
		since = opts.RunAt // a raw publish waits for its run time, as a Go submit's does in AX_DELAYED
	}
	if time.Since(since) < deadline {
		return false, nil
	}
	if !u.l.held() {
		return false, errNotLeading
	}
	gen, attempts := opts.Gen, 0
	if rec != nil {
		gen, attempts = rec.Gen, rec.Attempt
		if rec.Burying != "" {
			// A worker decided the burial (its letter could not be written):
			// the cause it decided is why the task is dead.
			reason = fmt.Sprintf("%s (buried by the leader; %s)", rec.Burying, reason)
		}
	}
	now := time.Now().UTC()
	letter := streams.Letter{TaskID: id, Tenant: stored.Tenant, Type: stored.Type, Error: reason, Attempts: attempts, FailedAt: now,
		Subject: names.SubmitSubject(stored.Priority, stored.Tenant, stored.Type, stored.Key)}
	dlqSeq, err := streams.PublishDeadLetter(ctx, u.l.js, names.DeadLetterMsg(letter, raw.Data, raw.Header, fmt.Sprintf("%s:%d:unserved:%s", id, gen, nuid.Next())))
	if err != nil {
		return false, fmt.Errorf("dead-letter unserved task %s: %w", id, err)
	}
	actor := kv.Actor{Action: "unserved", Error: reason}
	dead := func(r *kv.Record) error {
		r.FinishedAt, r.LastError, r.Burying, r.DLQSeq = &now, reason, "", dlqSeq
		return nil
	}
	if rec == nil {
		born := &kv.Record{ID: id, Type: stored.Type, Tenant: stored.Tenant, Key: stored.Key, Priority: stored.Priority,
			State: kv.StateDead, MaxAttempts: opts.MaxAttempts, Timeout: kv.Duration(opts.Timeout), CreatedAt: raw.Time.UTC()}
		born.Bind(opts.Gen, bucket, raw.Sequence)
		_ = dead(born)
		_, _, err = u.l.store.Create(ctx, born, actor)
		if errors.Is(err, kv.ErrExists) {
			err = kv.ErrConflict // a worker saw it first
		}
	} else {
		_, _, err = u.l.store.Apply(ctx, rec, rev, kv.StateDead, actor, dead)
	}
	if errors.Is(err, kv.ErrConflict) {
		u.deleteLetter(ctx, id, dlqSeq) // a worker claimed it, or an operator moved it: not dead
		return false, nil
	}
	if err != nil {
		// The write may have landed: the letter stays (at worst an orphan,
		// which replay refuses), never a DEAD record naming no letter.
		return false, fmt.Errorf("bury unserved task %s: %w", id, err)
	}
	if err := stream.DeleteMsg(ctx, raw.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		u.log.Debug("delete_buried_failed", zap.String("task_id", id), zap.Error(err)) // a worker drops it: its task is DEAD
	}
	u.log.Info("task_unserved_dead", zap.String("task_id", id), zap.String("type", stored.Type), zap.Int("priority", prio), zap.Uint64("dlq_seq", dlqSeq))
	return true, nil
}

func (u *unservedExpiry) deleteLetter(ctx context.Context, id string, seq uint64) {
	if err := u.l.deleteMsg(ctx, u.l.cfg.Names.DLQStream(), seq); err != nil {
		u.log.Warn("delete_unserved_letter_failed", zap.String("task_id", id), zap.Uint64("dlq_seq", seq), zap.Error(err))
	}
}

// stray reports whether a producer's message (not a board-plane copy)
// cannot become its task's message, so that a worker would drop it (see
// worker claimFrom): the record is bound to another message, or to
// another type or key, or the task is finished (born CANCELLED by
// an operator who knew only its id, or a message a burial could not
// delete). A waiting record bound to no message (PENDING, or born PAUSED
// by id) may still take a producer's message of its own task.
func stray(rec *kv.Record, stored streams.Stored, names streams.Names, bucket string, seq uint64) bool {
	if stored.Copy {
		return false // a move in progress may name it yet
	}
	if rec.Type != "" && (rec.Type != stored.Type || rec.Key != stored.Key) {
		return true
	}
	return rec.State.Terminal() || (rec.StreamSeq != 0 && !rec.Names(names, bucket, seq))
}
