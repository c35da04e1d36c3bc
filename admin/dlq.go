package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
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
	reply := &DLQListReply{Letters: []DeadLetter{}}
	page, err := a.letters(ctx, req.Filter, req.After, limit, a.roomFor(reply))
	if err != nil {
		return nil, err
	}
	reply.Letters, reply.Total, reply.Next, reply.Truncated = page.letters, page.total, page.next, page.cut
	return reply, nil
}

// letterPage is one page of dead letters.
type letterPage struct {
	letters []DeadLetter
	total   uint64 // dead letters matching the filter, in all pages
	next    uint64 // the last letter's sequence when more follow, else 0
	cut     bool   // the page ended before its limit: out of room or time
}

// pageTimeShare is the share of the request's time a page of dead letters
// may take; then the page ends, cut, and says where the next one starts.
const pageTimeShare = 0.8

// letters reads up to limit dead letters matching f after sequence after,
// oldest first, that fit in room bytes of JSON (room < 0: no bound), and
// counts all that match.
func (a *Service) letters(ctx context.Context, f Filter, after uint64, limit, room int) (*letterPage, error) {
	subject := a.cfg.Names.DLQSubject(orStar(f.Tenant), orStar(f.Type))
	stream, err := a.js.Stream(ctx, a.cfg.Names.DLQStream())
	if err != nil {
		return nil, fmt.Errorf("bind dead-letter stream: %w", err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return nil, fmt.Errorf("dead-letter stream info: %w", err)
	}
	page := &letterPage{letters: []DeadLetter{}}
	for _, n := range info.State.Subjects {
		page.total += n
	}
	stop := time.Now().Add(time.Duration(pageTimeShare * float64(a.cfg.RequestTimeout)))
	if deadline, ok := ctx.Deadline(); ok && deadline.Before(stop) {
		stop = deadline
	}
	if page.total == 0 {
		return page, nil
	}
	used := 0
	seq := after + 1
	for {
		raw, err := stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return page, nil // the end: no next page
		}
		if err != nil {
			return nil, fmt.Errorf("read dead letters from #%d: %w", seq, err)
		}
		seq = raw.Sequence
		if len(page.letters) == limit {
			break // another letter follows this page
		}
		letter := letterOf(raw)
		if room >= 0 {
			b, _ := json.Marshal(letter)
			if used+len(b)+1 > room || time.Now().After(stop) {
				page.cut = true
				break
			}
			used += len(b) + 1
		}
		page.letters = append(page.letters, letter)
		seq++
	}
	n := len(page.letters)
	if n == 0 {
		return nil, &Error{Code: CodeTooLarge, Message: fmt.Sprintf("dead letter #%d does not fit in a reply (max_payload %d) or could not be read in time; read it with the nats CLI (stream get %s %d)",
			seq, a.js.Conn().MaxPayload(), a.cfg.Names.DLQStream(), seq)}
	}
	page.next = page.letters[n-1].Seq
	return page, nil
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
	case req.ID != "" && req.Type != "":
		return nil, badRequest(`give either "id" (with its "tenant") or a filter ("type", "tenant"), not both`)
	case req.ID == "" && req.Type == "" && req.Tenant == "":
		return nil, badRequest(`dlq.replay needs "id" (one task) or a filter ("type", "tenant"); list dead letters with dlq.list`)
	}
	reply := &DLQReplayReply{DryRun: req.DryRun, Replayed: []kv.Ref{}}
	if req.ID != "" {
		if err := validID(req.ID); err != nil {
			return nil, err
		}
		ref, _, err := a.resolve(ctx, req.ID, req.Tenant, false)
		if err != nil {
			return nil, err
		}
		if req.DryRun {
			if _, err := a.deadRecord(ctx, ref); err != nil {
				return nil, err
			}
		} else if err := a.replay(ctx, ref); err != nil {
			return nil, err
		}
		reply.Replayed = append(reply.Replayed, ref)
		reply.ReplayedCount = 1
		return reply, nil
	}
	page, err := a.letters(ctx, req.Filter, 0, limit, -1)
	if err != nil {
		return nil, err
	}
	for _, l := range page.letters {
		ref := kv.Ref{Tenant: l.Tenant, ID: l.TaskID}
		err := a.checkLetter(ctx, l)
		if err == nil && !req.DryRun {
			err = a.replay(ctx, ref)
		}
		if err != nil {
			if reply.Skipped == nil {
				reply.Skipped = map[string]string{}
			}
			reply.Skipped[cmpID(l)] = toError(err).Message
			continue
		}
		reply.Replayed = append(reply.Replayed, ref)
	}
	a.cutReplay(reply)
	return reply, nil
}

// cutReplay counts a replay reply's lists and cuts them to the reply
// budget: the replayed ids first, then the skipped ones with their reasons.
func (a *Service) cutReplay(reply *DLQReplayReply) {
	replayed, skipped := reply.Replayed, reply.Skipped
	reply.ReplayedCount, reply.SkippedCount = len(replayed), len(skipped)
	reply.Replayed, reply.Skipped = []kv.Ref{}, nil
	room := a.roomFor(reply)
	n, used := fit(replayed, room)
	reply.Replayed = replayed[:n]
	dropped := 0
	if skipped != nil {
		dropped, _ = fitMap(skipped, room-used)
		reply.Skipped = skipped
	}
	reply.Truncated = n < len(replayed) || dropped > 0
}

func cmpID(l DeadLetter) string {
	if l.TaskID == "" {
		return fmt.Sprintf("dlq#%d", l.Seq)
	}
	return kv.Ref{Tenant: l.Tenant, ID: l.TaskID}.String()
}

// checkLetter reports whether a dead letter is its task's current one: the
// task its tenant (its subject's) and id name.
func (a *Service) checkLetter(ctx context.Context, l DeadLetter) error {
	if l.TaskID == "" {
		return conflict("dead letter #%d names no task (no %s header)", l.Seq, streams.HeaderTaskID)
	}
	ref := kv.Ref{Tenant: l.Tenant, ID: l.TaskID}
	rec, err := a.deadRecord(ctx, ref)
	if err != nil {
		return err
	}
	if rec.DLQSeq != l.Seq {
		return conflict("dead letter #%d is not task %s's latest (#%d)", l.Seq, ref, rec.DLQSeq)
	}
	return nil
}

func (a *Service) deadRecord(ctx context.Context, ref kv.Ref) (*kv.Record, error) {
	rec, _, err := a.store.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	if rec.State != kv.StateDead {
		return nil, illegal(ref.String(), "replay", rec.State, kv.StateReady, kv.StateDead)
	}
	return rec, nil
}

// replay puts a DEAD task back as READY: its dead letter's message is
// published again with the next generation, its attempts start over, and
// its trail (with every failure) is kept. The dead letter is then deleted.
func (a *Service) replay(ctx context.Context, ref kv.Ref) error {
	for range maxMoveTries {
		rec, rev, err := a.store.Get(ctx, ref)
		if err != nil {
			return err
		}
		if rec.State != kv.StateDead {
			return illegal(ref.String(), "replay", rec.State, kv.StateReady, kv.StateDead)
		}
		if rec.DLQSeq == 0 {
			return conflict("task %s is DEAD but names no dead letter; resubmit it", ref)
		}
		src := source{stream: a.cfg.Names.DLQStream(), seq: rec.DLQSeq}
		raw, err := a.getMsg(ctx, src)
		if err != nil {
			return err
		}
		priority, err := a.cfg.Names.ParseReplaySubject(raw.Header.Get(streams.HeaderSubject))
		if err != nil {
			return conflict("task %s cannot be replayed: %s; fix the publisher and resubmit", ref, err.Error())
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
	return fmt.Errorf("replay task %s: %w", ref, kv.ErrConflict)
}
