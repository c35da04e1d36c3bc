package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// sweeper repairs stuck tasks: RUNNING records whose worker is gone and
// whose message will not come back. A worker counts as gone when its record
// was not updated for longer than the ack wait and, once workers register
// in AX_WORKERS, when it is not a live member. The message will not come
// back when it is no longer in its bucket: JetStream removes a WorkQueue
// message only on ack or term, so nothing will redeliver it and no worker
// will take the task over. Such a task's outcome is unknown; the sweeper
// marks it DEAD with the reason, so that an operator sees it and decides
// (a task whose message is still there is left alone: its redelivery is
// taken over by a worker).
type sweeper struct {
	l   *Leader
	log *zap.Logger
}

func newSweeper(l *Leader) *sweeper { return &sweeper{l: l, log: l.log.Named("sweeper")} }

func (s *sweeper) run(ctx context.Context) error {
	tick := time.NewTicker(s.l.cfg.SweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if n, err := s.sweep(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("sweep_failed", zap.Error(err))
		} else if n > 0 {
			s.log.Info("sweep_repaired", zap.Int("tasks", n))
		}
	}
}

// sweep makes one pass over the task records and returns how many it repaired.
func (s *sweeper) sweep(ctx context.Context) (int, error) {
	members, err := kv.ListMembers(ctx, s.l.js, s.l.cfg.Names)
	if err != nil {
		return 0, fmt.Errorf("sweep: %w", err)
	}
	live := map[string]bool{}
	for _, m := range members {
		live[m.ID] = true
	}
	lister, err := s.l.store.Bucket().ListKeys(ctx)
	if err != nil {
		return 0, fmt.Errorf("sweep: list tasks: %w", err)
	}
	defer func() { _ = lister.Stop() }()
	cutoff := time.Now().Add(-s.l.cfg.AckWait)
	repaired := 0
	for id := range lister.Keys() {
		rec, rev, err := s.l.store.Get(ctx, id)
		if err != nil || rec.State != kv.StateRunning || rec.UpdatedAt.After(cutoff) {
			continue
		}
		if len(live) > 0 && live[rec.Worker] {
			continue // its worker is alive and still holds it
		}
		gone, err := s.messageGone(ctx, rec)
		if err != nil || !gone {
			continue
		}
		reason := fmt.Sprintf("stuck: worker %s gone since %s and the task's message is no longer in %s (settled without a final write); outcome unknown",
			rec.Worker, rec.UpdatedAt.Format(time.RFC3339), s.l.cfg.Names.PriorityStream(rec.Priority))
		_, _, err = s.l.store.Apply(ctx, rec, rev, kv.StateDead, kv.Actor{Action: "sweep", Error: reason}, func(r *kv.Record) error {
			now := time.Now().UTC()
			r.FinishedAt, r.LastError = &now, reason
			return nil
		})
		if err != nil {
			s.log.Debug("repair_failed", zap.String("task_id", id), zap.Error(err))
			continue
		}
		s.log.Warn("stuck_task_repaired", zap.String("task_id", id), zap.String("worker", rec.Worker), zap.String("to", string(kv.StateDead)), zap.String("reason", reason))
		repaired++
	}
	return repaired, nil
}

// messageGone reports whether the message a RUNNING record points at has
// left its bucket.
func (s *sweeper) messageGone(ctx context.Context, rec *kv.Record) (bool, error) {
	if rec.StreamSeq == 0 {
		return false, nil
	}
	stream, err := s.l.js.Stream(ctx, s.l.cfg.Names.PriorityStream(rec.Priority))
	if err != nil {
		return false, err
	}
	_, err = stream.GetMsg(ctx, rec.StreamSeq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil
	}
	return false, err
}
