package worker

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

// deadLetter publishes the task's message with its failure to AX_DLQ and
// returns the dead letter's sequence. Its Nats-Msg-Id is unique to this
// publish: an id repeated within the duplicate window would be answered
// with the sequence of an earlier letter even if that letter was deleted.
// A retried bury may so leave an orphan letter (it names its task; the
// record's dlq_seq names the one that counts), never a dangling dlq_seq.
func (rn *runner) deadLetter(ctx context.Context, d *delivery, env *envelope, rec *kv.Record, cause error) (uint64, error) {
	letter := streams.Letter{TaskID: rec.ID, Tenant: env.stored.Tenant, Type: env.stored.Type, Subject: rn.replaySubject(d, env),
		Error: kv.CutError(cause.Error()), Attempts: rec.Attempt, FailedAt: time.Now()}
	msg := rn.cfg.Names.DeadLetterMsg(letter, d.msg.Data(), d.msg.Headers(), fmt.Sprintf("%s:%d:%d:%s", rec.ID, rec.Gen, rec.Attempt, nuid.Next()))
	seq, err := streams.PublishDeadLetter(ctx, rn.js, msg)
	if err != nil {
		return 0, fmt.Errorf("dead-letter task %s: %w", rec.ID, err)
	}
	return seq, nil
}

// replaySubject is the submit subject a replay publishes to.
func (rn *runner) replaySubject(d *delivery, env *envelope) string {
	s := env.stored
	if env.bad != nil && errors.Is(env.bad, streams.ErrBadSubject) {
		return d.msg.Subject()
	}
	return rn.cfg.Names.SubmitSubject(s.Priority, s.Tenant, s.Type, s.Key)
}

// orphanDeadLetter notes a dead letter written by a bury that then lost
// its claim: the task is not dead. The worker leaves it (deleting dead
// letters is the control plane's right, docs/SECURITY.md): replay refuses a
// dead letter that is not its record's DLQSeq, and AX_DLQ's MaxAge and
// MaxBytes remove it in time.
func (rn *runner) orphanDeadLetter(id string, seq uint64) {
	rn.log.Info("dead_letter_orphaned", zap.String("task_id", id), zap.Uint64("dlq_seq", seq))
}
