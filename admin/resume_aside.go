package admin

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/move"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// releasePausedAside resumes a PAUSED task that waited paused aside
// ([kv.Record.HeldPausedAside]) once its type's and tenant's pauses have
// ended. The leader's resumer released the other tasks of the pause when
// it ended, but passed this one by, PAUSED then; back to PENDING it would
// wait out its own run time, up to half an hour. So it is released as the
// resumer would: a copy of its schedule in its bucket, the schedule
// deleted, by compare-and-set on rec (read at rev). It reports false, with
// nothing done, for any other task, while a pause holds it, and when its
// schedule has fired (the mover releases it once it is PENDING).
func (a *Service) releasePausedAside(ctx context.Context, rec *kv.Record, rev uint64) (*TaskReply, bool, error) {
	if !rec.HeldPausedAside() {
		return nil, false, nil
	}
	board, err := control.Open(ctx, a.js, a.cfg.Names)
	if err != nil {
		return nil, false, fmt.Errorf("bind %s: %w", a.cfg.Names.ControlBucket(), err)
	}
	limits, _, err := kv.ReadLimits(ctx, board)
	if err != nil {
		a.log.Warn("resume_limits_unread", zapTask(rec.Ref()), zapErr(err))
		return nil, false, nil // back to PENDING: the resumer or its run time releases it
	}
	if limits.Pauses(rec.Type, rec.Tenant) {
		return nil, false, nil
	}
	names := a.cfg.Names
	stream, err := a.js.Stream(ctx, names.DelayedStream())
	if err != nil {
		return nil, false, fmt.Errorf("bind %s: %w", names.DelayedStream(), err)
	}
	schedule, err := stream.GetLastMsgForSubject(ctx, names.DelayedSubject(rec.Tenant, rec.ID))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read the schedule of task %s: %w", rec.Ref(), err)
	}
	res, err := a.moves.Move(ctx, move.ReleaseNow(names, rec, rev, schedule, "resume", time.Now().UTC()))
	if res.DeleteErr != nil {
		a.log.Debug("delete_superseded_message", zap.Error(res.DeleteErr))
	}
	var full *move.BucketFullError
	if errors.As(err, &full) {
		return nil, true, conflict("%s", full.Error())
	}
	if err != nil {
		return nil, true, err
	}
	a.log.Info("task_resume", zapTask(rec.Ref()), zapFrom(rec.State), zap.Uint64("gen", res.Gen), zap.Int("priority", rec.Priority))
	return &TaskReply{Task: res.Record, Revision: res.Revision, Redispatched: true}, true, nil
}
