package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"
)

// bury ends a due task whose released copy its bucket refused for what it
// is (refusal): its fired schedule goes to the dead-letter stream, its
// record from PENDING to DEAD with the reason, and the fired schedule is
// deleted. A task with no record (its record expired or was deleted) is
// created DEAD. A lost compare-and-set deletes the letter and looks again;
// any other failure keeps the fired schedule for a later try.
func (m *mover) bury(ctx context.Context, d *dueTask, rec *kv.Record, rev uint64, refusal error) {
	names := m.l.cfg.Names
	h := d.msg.Headers()
	s, err := names.ParseSubmit(h.Get(streams.HeaderSubject))
	if rec != nil {
		s, err = streams.Stored{Priority: rec.Priority, Tenant: rec.Tenant, Type: rec.Type, Key: rec.Key}, nil
	}
	if err != nil {
		m.log.Warn("release_refused_unreadable", zap.String("task_id", d.id), zap.Error(refusal))
		m.done(ctx, d) // no record and no subject: nothing a worker could ever run
		return
	}
	if !m.l.held() {
		return // no longer leading: the fired schedule stays for the next leader
	}
	reason := fmt.Sprintf("release refused: %s would not take the task's copy: %s", names.PriorityStream(s.Priority), refusal)
	now := time.Now().UTC()
	attempts, gen := 0, uint64(1)
	if rec != nil {
		attempts, gen = rec.Attempt, rec.Gen
	}
	letter := streams.Letter{TaskID: d.id, Tenant: s.Tenant, Type: s.Type, Error: kv.CutError(reason), Attempts: attempts, FailedAt: now,
		Subject: names.SubmitSubject(s.Priority, s.Tenant, s.Type, s.Key)}
	dlqSeq, err := streams.PublishDeadLetter(ctx, m.l.js, names.DeadLetterMsg(letter, d.msg.Data(), h, fmt.Sprintf("%s:%d:release:%s", d.id, gen, nuid.Next())))
	if err != nil {
		m.retry(d, fmt.Errorf("dead-letter task %s: %w", d.id, err))
		return
	}
	actor := kv.Actor{Action: "release", Error: reason}
	dead := func(r *kv.Record) error {
		r.FinishedAt, r.LastError, r.DLQSeq = &now, kv.CutError(reason), dlqSeq
		return nil
	}
	if rec == nil {
		born := &kv.Record{ID: d.id, Type: s.Type, Tenant: s.Tenant, Key: s.Key, Priority: s.Priority, State: kv.StateDead, CreatedAt: now}
		born.Bind(gen, "", 0)
		_ = dead(born)
		_, _, err = m.l.store.Create(ctx, born, actor)
		if errors.Is(err, kv.ErrExists) {
			err = kv.ErrConflict
		}
	} else {
		_, _, err = m.l.store.Apply(ctx, rec, rev, kv.StateDead, actor, dead)
	}
	if errors.Is(err, kv.ErrConflict) {
		// Moved meanwhile (cancelled, paused, released by a worker): not
		// dead. The letter goes; the next look decides.
		if err := m.l.deleteMsg(ctx, names.DLQStream(), dlqSeq); err != nil {
			m.log.Warn("delete_release_letter_failed", zap.String("task_id", d.id), zap.Uint64("dlq_seq", dlqSeq), zap.Error(err))
		}
		m.retry(d, nil)
		return
	}
	if err != nil {
		// The write may have landed: the letter stays (at worst an orphan,
		// which replay refuses), and the next look finds the record DEAD.
		m.retry(d, fmt.Errorf("bury task %s: %w", d.id, err))
		return
	}
	m.log.Warn("task_release_refused", zap.String("task_id", d.id), zap.Uint64("dlq_seq", dlqSeq), zap.String("reason", reason))
	m.done(ctx, d)
}
