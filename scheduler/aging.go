package scheduler

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/move"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// aging lifts a READY task that has waited AgingThreshold in its bucket one
// priority level: it publishes a copy into the next bucket up with
// generation+1 and a Nats-Msg-Id unique to the move, moves the record
// READY -> READY with the new priority, generation and current message by
// compare-and-set, then deletes the old message. A worker drops any other
// message of the task it still holds: only the record's current message runs. The wait
// counts from when the task became READY, so a task rises one level per
// threshold waited: P4 reaches P0 after 4 thresholds.
type aging struct {
	l   *Leader
	log *zap.Logger
}

func newAging(l *Leader) *aging { return &aging{l: l, log: l.log.Named("aging")} }

func (a *aging) run(ctx context.Context) error {
	every := max(a.l.cfg.AgingThreshold/8, 10*time.Millisecond)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		served := a.servedTypes()
		for prio := 1; prio < streams.Priorities; prio++ {
			if err := a.pass(ctx, prio, served); err != nil && ctx.Err() == nil {
				a.log.Warn("aging_pass_failed", zap.Int("priority", prio), zap.Error(err))
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// pass lifts the tasks of bucket prio that waited a threshold, oldest
// first, stopping at the first message younger than that.
//
// It lifts nothing while the bucket above refuses non-core tasks
// (backpressure): a lift is a control-plane copy, which a refusing bucket
// admits, so aging would carry a producer's tasks from the bucket below
// into the room kept for core tasks. They rise once it admits again.
//
// On a pools deployment it scans each task type a live worker serves
// (served) on its own and leaves the other types where they are: a task no
// worker serves ages without end, and lifted it would take the room of the
// buckets above, up to P0, from tasks that can run (and make them refuse
// submits); it runs at its own priority once a worker for its type starts.
func (a *aging) pass(ctx context.Context, prio int, served func(context.Context) ([]string, error)) error {
	names := a.l.cfg.Names
	if a.l.refusing[prio-1].Load() { // the pressure loop's last reading
		return nil
	}
	stream, err := a.l.js.Stream(ctx, names.PriorityStream(prio))
	if err != nil {
		return err
	}
	filters := []string{names.StoredFilter(prio)}
	if streams.LayoutOf(stream.CachedInfo().Config) == streams.LayoutPools {
		types, err := served(ctx)
		if err != nil {
			return err
		}
		filters = filters[:0]
		for _, t := range types {
			filters = append(filters, names.StoredTypeFilter(prio, t))
		}
	}
	// Bound a pass: lifts, and messages looked at (in-flight ones stay in
	// a WorkQueue stream and are looked at again each pass).
	budget := scanBudget{lifts: a.l.cfg.AgingBatch, scans: 10 * a.l.cfg.AgingBatch}
	for _, filter := range filters {
		if err := a.scan(ctx, stream, prio, filter, &budget); err != nil {
			return err
		}
	}
	return nil
}

// scanBudget bounds one aging pass: lifts, and messages looked at.
type scanBudget struct{ lifts, scans int }

// scan lifts the due tasks among the messages of bucket prio that match
// filter, oldest first, stopping at the first message younger than half a
// threshold or when budget runs out.
func (a *aging) scan(ctx context.Context, stream jetstream.Stream, prio int, filter string, budget *scanBudget) error {
	// A copy aged into this bucket is younger than the task's wait: look
	// at messages older than half a threshold, and let the record decide.
	cutoff := time.Now().Add(-a.l.cfg.AgingThreshold / 2)
	seq := stream.CachedInfo().State.FirstSeq
	for ; budget.lifts > 0 && budget.scans > 0; budget.scans-- {
		msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil // no more messages
		}
		if err != nil {
			return err
		}
		if msg.Time.After(cutoff) {
			return nil
		}
		seq = msg.Sequence + 1
		ok, err := a.lift(ctx, prio, msg)
		if errors.Is(err, move.ErrBucketFull) {
			// Nothing moved; every other lift into that bucket would be
			// refused as well: the tasks rise once it drains.
			a.log.Debug("aging_bucket_full", zap.Int("priority", prio-1), zap.Error(err))
			budget.lifts = 0
			return nil
		}
		if errors.Is(err, errNotLeading) {
			return err // no lift can land: each would publish a copy only to delete it
		}
		if err != nil {
			a.log.Warn("lift_failed", zap.Uint64("seq", msg.Sequence), zap.Error(err))
			continue
		}
		if ok {
			budget.lifts--
		}
	}
	return nil
}

// servedTypes returns a function that reads, once per aging round and only
// when a pools deployment asks, the task types the live workers serve.
func (a *aging) servedTypes() func(context.Context) ([]string, error) {
	var types []string
	var err error
	read := false
	return func(ctx context.Context) ([]string, error) {
		if !read {
			read = true
			var members []kv.Member
			if members, err = kv.ListMembers(ctx, a.l.js, a.l.cfg.Names); err != nil {
				return nil, err
			}
			set := map[string]bool{}
			for _, m := range members {
				for _, t := range m.Types {
					set[t] = true
				}
			}
			types = slices.Sorted(maps.Keys(set))
		}
		return types, err
	}
}

// waitingSince returns when the task became READY, not counting aging
// moves nor the put-backs of workers without its handler (each with the
// claim before it: the task waited all along), and how often it was lifted
// since: it is due for its next level after (lifts+1) thresholds, so
// detection lag does not add up.
func waitingSince(rec *kv.Record) (time.Time, int) {
	lifts := 0
	for i := len(rec.Trail) - 1; i >= 0; i-- {
		switch rec.Trail[i].Action {
		case "aging":
			lifts++
		case kv.ActionNoHandler:
			if i > 0 && rec.Trail[i-1].To == kv.StateRunning {
				i-- // its claim
			}
		default:
			return rec.Trail[i].At, lifts
		}
	}
	return rec.UpdatedAt, lifts
}

// lift moves one waiting message up a level if its task is READY at the
// message's generation. It reports whether it did.
func (a *aging) lift(ctx context.Context, prio int, raw *jetstream.RawStreamMsg) (bool, error) {
	names := a.l.cfg.Names
	stored, opts, err := names.ParseMessage(raw.Subject, raw.Header)
	if err != nil || opts.ID == "" {
		return false, nil // a raw publish no worker has seen, or a malformed one: the worker decides
	}
	rec, rev, err := a.l.store.Get(ctx, kv.Ref{Tenant: stored.Tenant, ID: opts.ID})
	if errors.Is(err, kv.ErrNotFound) {
		// A task no worker has claimed, whose submitter wrote no record (a
		// task of generated id and key, or a publish-only client's): once
		// it is due, its READY record is written here, as the claim would
		// have, and it is lifted like any other.
		if stored.Copy || time.Since(raw.Time) < a.l.cfg.AgingThreshold {
			return false, nil
		}
		rec, rev, err = a.l.store.Create(ctx, kv.WaitingRecord(stored, opts, opts.ID, names.PriorityStream(prio), raw.Sequence, raw.Time.UTC()), kv.Actor{Action: "publish"})
		if errors.Is(err, kv.ErrExists) {
			return false, nil // a worker claimed it meanwhile
		}
	}
	if err != nil {
		return false, err
	}
	if rec.LastMove().Action == kv.ActionNoHandler {
		// A worker without its handler put it back: it waits for one that
		// has it, as an unserved type of a pools deployment does, at its
		// own priority.
		return false, nil
	}
	if rec.State != kv.StateReady || rec.StreamSeq != raw.Sequence || rec.MessageStream(names) != names.PriorityStream(prio) {
		return false, nil // running, retrying, or not the task's current message
	}
	since, lifts := waitingSince(rec)
	if time.Since(since) < time.Duration(lifts+1)*a.l.cfg.AgingThreshold {
		return false, nil // not yet due for its next level
	}
	set := nats.Header{}
	set.Set(streams.HeaderWaitingSince, since.UTC().Format(time.RFC3339Nano))
	res, err := a.l.moves.Move(ctx, move.Request{Record: rec, Revision: rev, To: kv.StateReady, Priority: prio - 1,
		Actor: kv.Actor{Action: "aging"}, Copy: move.Copy{Data: raw.Data, Header: raw.Header, Set: set},
		Old: move.Message{Stream: names.PriorityStream(prio), Seq: raw.Sequence}, Guard: a.l.guard})
	switch res.Outcome {
	case move.Landed:
		if res.DeleteErr != nil {
			a.log.Debug("delete_aged_failed", zap.String("task_id", rec.ID), zap.Error(res.DeleteErr)) // a worker drops the stale copy
		}
		a.log.Debug("task_aged", zap.String("task_id", rec.ID), zap.Int("from", prio), zap.Int("to", prio-1), zap.Duration("waited", time.Since(since)))
		return true, nil
	case move.Lost:
		if res.DeleteErr != nil {
			a.log.Debug("delete_copy_failed", zap.Uint64("seq", res.Copy.Seq), zap.Error(res.DeleteErr))
		}
		if errors.Is(err, kv.ErrConflict) {
			// A worker claimed it, or an operator moved it, meanwhile: the
			// record names another message, and the copy is gone.
			return false, nil
		}
		return false, err // the lease lapsed
	}
	// Unclear (the copy is kept: the record decides), a full bucket above
	// (nothing written), or a failed publish.
	return false, err
}
