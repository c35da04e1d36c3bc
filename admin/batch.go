package admin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

func (a *Service) tasksCancel(ctx context.Context, data []byte) (any, error) {
	var req BatchCancelRequest
	if err := decode(data, &req); err != nil {
		return nil, err
	}
	if req.Type == "" && req.Tenant == "" && len(req.States) == 0 {
		return nil, badRequest(`tasks.cancel needs a filter: at least one of "type", "tenant", "states"`)
	}
	if err := req.Filter.validate(); err != nil {
		return nil, err
	}
	for _, s := range req.States {
		if !kv.CanTransition(s, kv.StateCancelled) {
			return nil, badRequest("state %s cannot be cancelled; filter on states that can: PENDING, READY, RUNNING, RETRYING, PAUSED", s)
		}
	}
	reply := &BatchCancelReply{DryRun: req.DryRun, Tasks: []kv.Ref{}}
	var matched []kv.Ref
	var err error
	reply.Unreadable, err = a.scan(ctx, func(rec *kv.Record) {
		if kv.CanTransition(rec.State, kv.StateCancelled) && req.Filter.matches(rec) {
			matched = append(matched, rec.Ref())
		}
	})
	if err != nil {
		return nil, err
	}
	if len(req.States) == 0 || slices.Contains(req.States, kv.StateReady) {
		// Tasks published raw that no worker has taken yet have no record:
		// find them in their buckets (an unseen task counts as READY).
		unseen, err := a.unseen(ctx, req.Filter)
		if err != nil {
			return nil, err
		}
		matched = append(matched, unseen...)
	}
	slices.SortFunc(matched, compareRefs)
	matched = slices.Compact(matched)
	reply.Matched = len(matched)
	reply.Tasks = matched[:min(len(matched), MaxListedIDs)]
	if req.DryRun {
		return reply, nil
	}
	for _, ref := range matched {
		if _, err := a.cancel(ctx, ref, true); err != nil {
			if reply.Failed == nil {
				reply.Failed = map[string]string{}
			}
			reply.Failed[ref.String()] = toError(err).Message
			continue
		}
		reply.Cancelled++
	}
	a.cutBatch(reply)
	return reply, nil
}

// cutBatch cuts a tasks.cancel reply's lists to the reply budget: the
// unreadable records' errors (a quarter of it at most), the matched tasks,
// then the failures with their reasons (FailedCount counts them all).
func (a *Service) cutBatch(reply *BatchCancelReply) {
	tasks, failed := reply.Tasks, reply.Failed
	reply.FailedCount = len(failed)
	reply.Tasks, reply.Failed = []kv.Ref{}, nil
	var unreadable map[string]string
	if reply.Unreadable != nil {
		unreadable, reply.Unreadable.Errors = reply.Unreadable.Errors, map[string]string{}
	}
	room := a.roomFor(reply)
	if reply.Unreadable != nil {
		dropped, used := fitMap(unreadable, room/4)
		reply.Unreadable.Errors, reply.Unreadable.Omitted, room = unreadable, dropped, room-used
		reply.Truncated = dropped > 0
	}
	n, used := fit(tasks, room)
	reply.Tasks = tasks[:n]
	if failed != nil {
		dropped, _ := fitMap(failed, room-used)
		reply.Failed = failed
		reply.Truncated = reply.Truncated || dropped > 0
	}
	reply.Truncated = reply.Truncated || n < len(tasks)
}

// unseen returns the tasks of the messages waiting in the priority buckets
// that match f's tenant and type and whose task has no record
// ([Service.unrecorded]).
func (a *Service) unseen(ctx context.Context, f Filter) ([]kv.Ref, error) {
	waiting, err := a.unrecorded(ctx, f)
	if err != nil {
		return nil, err
	}
	out := make([]kv.Ref, len(waiting))
	for i, rec := range waiting {
		out[i] = rec.Ref()
	}
	return out, nil
}

// unrecorded returns the READY records that the claims of the messages
// waiting in the priority buckets would start from, for the messages that
// match f's tenant and type and whose task has no record: raw publishes no
// worker has taken yet, and the tasks a Go client submitted without an id
// or key of their own (docs/decisions/record-at-claim.md). Each is the task
// of its message's tenant. It reads every matching message once (direct
// gets, by subject filter) and looks up its record.
func (a *Service) unrecorded(ctx context.Context, f Filter) ([]*kv.Record, error) {
	names := a.cfg.Names
	tenant, taskType := cmp.Or(f.Tenant, "*"), cmp.Or(f.Type, "*")
	var out []*kv.Record
	for p := range streams.Priorities {
		name := names.PriorityStream(p)
		stream, err := a.js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("find unseen tasks: %w", err)
		}
		filter := names.StoredMessageFilter(p, tenant, taskType)
		for seq := stream.CachedInfo().State.FirstSeq; ; {
			msg, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("find unseen tasks in %s: %w", name, err)
			}
			seq = msg.Sequence + 1
			stored, opts, err := names.ParseMessage(msg.Subject, msg.Header)
			id := opts.ID
			if id == "" && err == nil {
				id = streams.FallbackID(name, msg.Sequence, msg.Time)
			}
			ref := kv.Ref{Tenant: stored.Tenant, ID: id}
			if id == "" || ref.Validate() != nil {
				continue // malformed: a worker dead-letters it
			}
			if _, _, err := a.store.Get(ctx, ref); errors.Is(err, kv.ErrNotFound) {
				rec := kv.WaitingRecord(stored, opts, id, name, msg.Sequence, msg.Time.UTC())
				rec.UpdatedAt = rec.CreatedAt
				out = append(out, rec)
			}
		}
	}
	return out, nil
}

// compareRefs orders tasks by tenant, then id.
func compareRefs(a, b kv.Ref) int {
	return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.ID, b.ID))
}

// validate checks a filter's tokens and states, naming what is wrong.
func (f *Filter) validate() error {
	for _, field := range []struct{ name, value string }{{"type", f.Type}, {"tenant", f.Tenant}} {
		if field.value == "" {
			continue
		}
		if err := streams.ValidateToken(field.name, field.value); err != nil {
			return badRequest("bad filter: %s", err.Error())
		}
	}
	for _, s := range f.States {
		if !s.Valid() {
			return badRequest("bad filter: unknown state %q (want one of %v)", s, kv.States())
		}
	}
	return nil
}

func (f *Filter) matches(rec *kv.Record) bool {
	return (f.Type == "" || rec.Type == f.Type) && (f.Tenant == "" || rec.Tenant == f.Tenant) &&
		(len(f.States) == 0 || slices.Contains(f.States, rec.State))
}

// scan calls fn with every task record, in one pass over the bucket, and
// reports the records that do not decode (each is also logged).
func (a *Service) scan(ctx context.Context, fn func(*kv.Record)) (*Unreadable, error) {
	var bad *Unreadable
	err := a.store.Scan(ctx, func(rec *kv.Record, _ uint64) error {
		fn(rec)
		return nil
	}, func(e *kv.UnreadableError) {
		a.log.Warn("admin_unreadable_record", zap.String("key", e.Key), zap.Error(e))
		if bad == nil {
			bad = &Unreadable{Errors: map[string]string{}}
		}
		bad.Count++
		if len(bad.Errors) < MaxListedIDs {
			bad.Errors[e.Key] = e.Error()
		}
	})
	return bad, err
}
