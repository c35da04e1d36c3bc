package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Bounds of dlq.list and dlq.replay.
const (
	DefaultDLQLimit = 100
	MaxDLQLimit     = 10_000
)

func dlqLimit(n int) (int, error) {
	switch {
	case n == 0:
		return DefaultDLQLimit, nil
	case n < 0 || n > MaxDLQLimit:
		return 0, badRequest(`"limit" %d is not 1..%d`, n, MaxDLQLimit)
	}
	return n, nil
}

// decodeDLQ reads a dlq request and checks its limit and filter; it
// returns the limit to apply.
func decodeDLQ(data []byte, req any, limit *int, f *Filter) (int, error) {
	if err := decode(data, req); err != nil {
		return 0, err
	}
	if err := f.validate(); err != nil {
		return 0, err
	}
	if len(f.States) > 0 {
		return 0, badRequest(`dead letters are filtered by "type" and "tenant" only (they are all DEAD)`)
	}
	return dlqLimit(*limit)
}

func (a *Service) dlqList(ctx context.Context, data []byte) (any, error) {
	var req DLQListRequest
	limit, err := decodeDLQ(data, &req, &req.Limit, &req.Filter)
	if err != nil {
		return nil, err
	}
	letters, total, err := a.letters(ctx, req.Filter, limit)
	if err != nil {
		return nil, err
	}
	return &DLQListReply{Letters: letters, Total: total}, nil
}

// letters reads up to limit dead letters matching f, oldest first, and
// counts all that match.
func (a *Service) letters(ctx context.Context, f Filter, limit int) ([]DeadLetter, uint64, error) {
	subject := a.cfg.Names.DLQSubject(orStar(f.Tenant), orStar(f.Type))
	stream, err := a.js.Stream(ctx, a.cfg.Names.DLQStream())
	if err != nil {
		return nil, 0, fmt.Errorf("bind dead-letter stream: %w", err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return nil, 0, fmt.Errorf("dead-letter stream info: %w", err)
	}
	var total uint64
	for _, n := range info.State.Subjects {
		total += n
	}
	out := []DeadLetter{}
	for seq := uint64(1); len(out) < limit && total > 0; {
		raw, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read dead letters from #%d: %w", seq, err)
		}
		out = append(out, letterOf(raw))
		seq = raw.Sequence + 1
	}
	return out, total, nil
}

func orStar(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

func letterOf(raw *jetstream.RawStreamMsg) DeadLetter {
	l := streams.ParseDeadLetter(raw.Subject, raw.Header)
	return DeadLetter{Seq: raw.Sequence, TaskID: l.TaskID, Tenant: l.Tenant, Type: l.Type, Subject: l.Subject,
		Error: l.Error, Attempts: l.Attempts, FailedAt: l.FailedAt, Size: len(raw.Data)}
}

func (a *Service) dlqReplay(ctx context.Context, data []byte) (any, error) {
	var req DLQReplayRequest
	limit, err := decodeDLQ(data, &req, &req.Limit, &req.Filter)
	if err != nil {
		return nil, err
	}
	switch {
	case req.ID != "" && (req.Type != "" || req.Tenant != ""):
		return nil, badRequest(`give either "id" or a filter ("type", "tenant"), not both`)
	case req.ID == "" && req.Type == "" && req.Tenant == "":
		return nil, badRequest(`dlq.replay needs "id" (one task) or a filter ("type", "tenant"); list dead letters with dlq.list`)
	}
	reply := &DLQReplayReply{DryRun: req.DryRun, Replayed: []string{}}
	if req.ID != "" {
		if err := validID(req.ID); err != nil {
			return nil, err
		}
		if req.DryRun {
			if _, err := a.deadRecord(ctx, req.ID); err != nil {
				return nil, err
			}
		} else if err := a.replay(ctx, req.ID); err != nil {
			return nil, err
		}
		reply.Replayed = append(reply.Replayed, req.ID)
		return reply, nil
	}
	letters, _, err := a.letters(ctx, req.Filter, limit)
	if err != nil {
		return nil, err
	}
	for _, l := range letters {
		err := a.checkLetter(ctx, l)
		if err == nil && !req.DryRun {
			err = a.replay(ctx, l.TaskID)
		}
		if err != nil {
			if reply.Skipped == nil {
				reply.Skipped = map[string]string{}
			}
			reply.Skipped[cmpID(l)] = toError(err).Message
			continue
		}
		reply.Replayed = append(reply.Replayed, l.TaskID)
	}
	return reply, nil
}

func cmpID(l DeadLetter) string {
	if l.TaskID == "" {
		return fmt.Sprintf("dlq#%d", l.Seq)
	}
	return l.TaskID
}

// checkLetter reports whether a dead letter is its task's current one.
func (a *Service) checkLetter(ctx context.Context, l DeadLetter) error {
	if l.TaskID == "" {
		return conflict("dead letter #%d names no task (no %s header)", l.Seq, streams.HeaderTaskID)
	}
	rec, err := a.deadRecord(ctx, l.TaskID)
	if err != nil {
		return err
	}
	if rec.DLQSeq != l.Seq {
		return conflict("dead letter #%d is not task %s's latest (#%d)", l.Seq, l.TaskID, rec.DLQSeq)
	}
	return nil
}

func (a *Service) deadRecord(ctx context.Context, id string) (*kv.Record, error) {
	rec, _, err := a.store.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if rec.State != kv.StateDead {
		return nil, illegal(id, "replay", rec.State, kv.StateReady, kv.StateDead)
	}
	return rec, nil
}

// replay puts a DEAD task back as READY: its dead letter's message is
// published again with the next generation, its attempts start over, and
// its trail (with every failure) is kept. The dead letter is then deleted.
func (a *Service) replay(ctx context.Context, id string) error {
	for range maxMoveTries {
		rec, rev, err := a.store.Get(ctx, id)
		if err != nil {
			return err
		}
		if rec.State != kv.StateDead {
			return illegal(id, "replay", rec.State, kv.StateReady, kv.StateDead)
		}
		if rec.DLQSeq == 0 {
			return conflict("task %s is DEAD but names no dead letter; resubmit it", id)
		}
		src := source{stream: a.cfg.Names.DLQStream(), seq: rec.DLQSeq}
		raw, err := a.getMsg(ctx, src)
		if err != nil {
			return err
		}
		priority, err := a.cfg.Names.ParseReplaySubject(raw.Header.Get(streams.HeaderSubject))
		if err != nil {
			return conflict("task %s cannot be replayed: %s; fix the publisher and resubmit", id, err.Error())
		}
		_, err = a.redispatch(ctx, rec, rev, src, priority, "replay", func(r *kv.Record) {
			r.Attempt = 0
			r.DLQSeq = 0
			r.FinishedAt = nil
			r.StartedAt = nil
			r.Worker = ""
		})
		if errors.Is(err, kv.ErrConflict) {
			continue
		}
		return err
	}
	return fmt.Errorf("replay task %s: %w", id, kv.ErrConflict)
}
