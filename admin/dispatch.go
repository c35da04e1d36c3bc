package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/move"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// source is a stored message a re-dispatch copies: a task in its bucket,
// or a dead letter.
type source struct {
	stream string
	seq    uint64
}

// redispatch moves rec (read at rev) to READY on a copy of src's message in
// bucket priority, through the move protocol ([move.Mover.Move]): the copy
// is published with the next generation, the record names it by
// compare-and-set, then src is deleted. A lost compare-and-set deletes the
// copy and returns [kv.ErrConflict] (the caller reads again); an unclear one
// keeps the copy and returns the write's error; a full bucket is a 409.
func (a *Service) redispatch(ctx context.Context, rec *kv.Record, rev uint64, src source, priority int, action string, mutate func(*kv.Record)) (*TaskReply, error) {
	raw, err := a.getMsg(ctx, src)
	if err != nil {
		return nil, err
	}
	if raw.Header.Get(streams.HeaderPayloadTruncated) != "" {
		return nil, conflict("task %s: its dead letter lost its payload (too large to keep); resubmit the task", rec.Ref())
	}
	req := move.Request{Record: rec, Revision: rev, To: kv.StateReady, Priority: priority, Actor: kv.Actor{Action: action},
		Copy: move.Copy{Data: raw.Data, Header: raw.Header, Drop: streams.DeadLetterHeaders()},
		Old:  move.Message{Stream: src.stream, Seq: src.seq}}
	if mutate != nil {
		req.Mutate = func(r *kv.Record) error { mutate(r); return nil }
	}
	res, err := a.moves.Move(ctx, req)
	if res.DeleteErr != nil {
		a.log.Debug("delete_superseded_message", zap.Error(res.DeleteErr))
	}
	var full *move.BucketFullError
	if errors.As(err, &full) {
		return nil, conflict("%s", full.Error())
	}
	if err != nil {
		return nil, err
	}
	a.log.Info("task_"+action, zapTask(rec.Ref()), zapFrom(rec.State), zap.Uint64("gen", res.Gen), zap.Int("priority", priority))
	return &TaskReply{Task: res.Record, Revision: res.Revision, Redispatched: true}, nil
}

// current returns where rec's current message is stored, or false when no
// message is bound to it yet. Records written before Stream was kept name
// the bucket of their priority.
func current(names streams.Names, rec *kv.Record) (source, bool) {
	if rec.StreamSeq == 0 {
		return source{}, false
	}
	return source{stream: rec.MessageStream(names), seq: rec.StreamSeq}, true
}

// getMsg reads a stored message; a missing one is a conflict the operator
// can act on.
func (a *Service) getMsg(ctx context.Context, src source) (*jetstream.RawStreamMsg, error) {
	stream, err := a.js.Stream(ctx, src.stream)
	if err != nil {
		return nil, fmt.Errorf("bind stream %s: %w", src.stream, err)
	}
	raw, err := stream.GetMsg(ctx, src.seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, conflict("message %s #%d is no longer stored (a worker may have just taken or settled it); read the task again", src.stream, src.seq)
	}
	if err != nil {
		return nil, fmt.Errorf("get message %s #%d: %w", src.stream, src.seq, err)
	}
	return raw, nil
}

// deleteMsg removes a superseded message; failing is harmless (workers drop
// an older generation), so it is only logged.
func (a *Service) deleteMsg(ctx context.Context, src source) {
	stream, err := a.js.Stream(ctx, src.stream)
	if err == nil {
		err = stream.DeleteMsg(ctx, src.seq)
	}
	if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		a.log.Debug("delete_superseded_message", zap.String("stream", src.stream), zap.Uint64("seq", src.seq), zapErr(err))
	}
}

func zapTask(ref kv.Ref) zap.Field {
	return zap.Dict("task", zap.String("tenant", ref.Tenant), zap.String("id", ref.ID))
}
func zapWorker(id string) zap.Field { return zap.String("worker", id) }
func zapFrom(s kv.State) zap.Field  { return zap.String("from", string(s)) }
func zapErr(err error) zap.Field    { return zap.Error(err) }
