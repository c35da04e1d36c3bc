package admin

import (
	"context"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// dropCancelled removes what could run a task an operator has just
// cancelled (rec is its record before the cancel): its waiting message, or
// its delayed schedule. A CANCELLED record expires after the store's
// retention; a message or schedule that outlived it would meet no record
// and run as a new task. A RUNNING task's message is left to its worker,
// which acks it. Failing is logged: workers and the mover drop a cancelled
// task while its record exists.
func (a *Service) dropCancelled(ctx context.Context, rec *kv.Record) {
	switch src, bound := current(a.cfg.Names, rec); {
	case rec.State == kv.StateRunning:
	case bound:
		a.deleteMsg(ctx, src)
	default: // PENDING, or held before it was released or seen: its schedule
		stream, err := a.js.Stream(ctx, a.cfg.Names.DelayedStream())
		for _, subject := range []string{a.cfg.Names.DelayedSubject(rec.Tenant, rec.ID), a.cfg.Names.DueSubject(rec.Tenant, rec.ID)} {
			if err == nil {
				err = stream.Purge(ctx, jetstream.WithPurgeSubject(subject))
			}
		}
		if err != nil {
			a.log.Warn("cancel_schedule_not_removed", zapTask(rec.Ref()), zapErr(err))
		}
	}
	a.log.Debug("cancelled_task_dropped", zapTask(rec.Ref()), zap.String("from", string(rec.State)))
}
