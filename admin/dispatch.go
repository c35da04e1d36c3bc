package admin

import (
	"context"
	"errors"
	"fmt"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"
)

// source is a stored message a re-dispatch copies: a task in its bucket,
// or a dead letter.
type source struct {
	stream string
	seq    uint64
}

// redispatch publishes a copy of src's message to bucket priority with the
// next generation, then moves rec (read at rev) to READY by compare-and-set
// with the copy as its current message, then deletes src. A worker runs a
// task only from the message its record names, so a crash between the steps
// loses nothing and runs nothing twice: before the compare-and-set the copy
// is an orphan that workers drop, after it src is. The copy's Nats-Msg-Id is
// unique to this call. On a definite lost compare-and-set the copy is
// deleted and [kv.ErrConflict] returned; on an ambiguous failure (a timeout:
// the write may have landed) the copy is kept.
func (a *Service) redispatch(ctx context.Context, rec *kv.Record, rev uint64, src source, priority int, action string, mutate func(*kv.Record)) (*TaskReply, error) {
	raw, err := a.getMsg(ctx, src)
	if err != nil {
		return nil, err
	}
	if raw.Header.Get(streams.HeaderPayloadTruncated) != "" {
		return nil, conflict("task %s: its dead letter lost its payload (too large to keep); resubmit the task", rec.Ref())
	}
	gen := rec.Gen + 1
	msg := streams.TaskCopy(a.cfg.Names.CopySubject(priority, rec.Tenant, rec.Type, rec.Key), raw.Data, raw.Header,
		rec.ID, gen, nuid.Next(), streams.DeadLetterHeaders()...)
	ack, err := a.js.PublishMsg(ctx, msg)
	if err != nil {
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == streams.ErrCodeBucketFull {
			return nil, conflict("bucket %s is full (%s); retry when it drains", a.cfg.Names.PriorityStream(priority), apiErr.Description)
		}
		return nil, fmt.Errorf("%s task %s: publish generation %d: %w", action, rec.Ref(), gen, err)
	}
	next, nextRev, err := a.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Action: action}, func(r *kv.Record) error {
		r.Priority = priority
		r.Bind(gen, ack.Stream, ack.Sequence)
		if mutate != nil {
			mutate(r)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, kv.ErrConflict) {
			a.deleteMsg(ctx, source{stream: ack.Stream, seq: ack.Sequence})
		}
		return nil, err
	}
	a.deleteMsg(ctx, src)
	a.log.Info("task_"+action, zapTask(rec.Ref()), zapFrom(rec.State), zap.Uint64("gen", gen), zap.Int("priority", priority))
	return &TaskReply{Task: next, Revision: nextRev, Redispatched: true}, nil
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
