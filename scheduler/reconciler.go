package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Defaults of the reconciler's settings in [Config].
const (
	// DefaultReconcileGrace is how long a record must have kept its
	// revision before it is judged: longer than the op timeout (10s) of
	// every writer, so a move in flight is never mistaken for a loss.
	DefaultReconcileGrace = 15 * time.Second
	// DefaultReconcileInterval is how often a pass looks at the records due.
	DefaultReconcileInterval = time.Second
	// DefaultReconcileBatch bounds the records checked in one pass.
	DefaultReconcileBatch = 1000
	// DefaultReconcileRecheck bounds the wait between two checks of a
	// record found healthy; the wait doubles from the grace up to it.
	DefaultReconcileRecheck = 10 * time.Minute
)

const maxRecentRepairs = 20

// reconciler finds the tasks that slipped through every other path and
// acts on them. It watches the task bucket and keeps an index of the
// non-terminal records; each pass checks only the records that have kept
// their revision for the grace and are due, so a pass costs O(due), not
// O(records). It finds:
//   - READY or RETRYING records whose message (Stream, StreamSeq) is gone
//     from their bucket;
//   - PENDING records with no schedule and no fired schedule in AX_DELAYED
//     and no copy in a bucket;
//   - RUNNING records not updated for the ack wait, whose worker is not a
//     live member and whose message is gone (nothing will redeliver it).
//
// It re-reads a record before acting and acts by compare-and-set on that
// revision. A lost READY, RETRYING or PENDING task whose payload still
// exists (a schedule or fired schedule in AX_DELAYED, its dead letter, or
// a stale copy in a bucket) is re-published as a board-plane copy with
// the next generation and a fresh Nats-Msg-Id, and the record is pointed
// at it (READY). Otherwise, and for every lost RUNNING task (its outcome
// is unknown: running it again could double its effect), the record moves
// to DEAD with the reason "message lost: …". Every write is made only while
// the lease is held ([Elector.Held]).
type reconciler struct {
	l       *Leader
	log     *zap.Logger
	index   *recordIndex
	board   jetstream.KeyValue
	report  control.ReconcilerReport
	changed bool
	members map[string]bool // live workers, read once per pass when needed
}

func newReconciler(l *Leader) *reconciler {
	return &reconciler{l: l, log: l.log.Named("reconciler"), index: newRecordIndex(l.cfg.ReconcileGrace),
		report: control.ReconcilerReport{Republished: map[kv.State]uint64{}, Dead: map[kv.State]uint64{}}}
}

func (r *reconciler) run(ctx context.Context) error {
	board, err := control.Open(ctx, r.l.js, r.l.cfg.Names)
	if err != nil {
		return fmt.Errorf("reconciler: bind %s: %w", r.l.cfg.Names.ControlBucket(), err)
	}
	r.board = board
	r.carryOver(ctx)
	w, err := r.l.store.Bucket().WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("reconciler: watch tasks: %w", err)
	}
	defer func() { _ = kv.StopWatch(w) }()
	started := time.Now()
	tick := time.NewTicker(r.l.cfg.SweepInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case entry, ok := <-w.Updates():
			if !ok {
				return errors.New("reconciler: task watch closed")
			}
			if entry == nil { // the initial values are in
				r.log.Info("records_indexed", zap.Int("tracked", r.index.len()), zap.Duration("took", time.Since(started)))
				continue
			}
			r.index.observe(entry, time.Now())
		case <-tick.C:
			if err := r.pass(ctx, time.Now()); err != nil && ctx.Err() == nil {
				r.log.Warn("reconcile_pass_failed", zap.Error(err))
			}
		}
	}
}

// carryOver starts from the totals of the previous leader's report.
func (r *reconciler) carryOver(ctx context.Context) {
	entry, err := r.board.Get(ctx, control.ReconcilerKey)
	if err != nil {
		return
	}
	var prev control.ReconcilerReport
	if json.Unmarshal(entry.Value(), &prev) != nil {
		return
	}
	r.report.Checked, r.report.Recent = prev.Checked, prev.Recent
	maps.Copy(r.report.Republished, prev.Republished)
	maps.Copy(r.report.Dead, prev.Dead)
}

// pass checks the records due at now, at most a batch, and publishes the
// report when something changed.
func (r *reconciler) pass(ctx context.Context, now time.Time) error {
	start := time.Now()
	due := r.index.popDue(now, r.l.cfg.ReconcileBatch)
	r.members = nil
	var errs []error
	for i, t := range due {
		next, err := r.check(ctx, t, now)
		if errors.Is(err, errNotLeading) {
			for _, rest := range due[i:] {
				r.index.requeue(rest, now.Add(r.l.cfg.ReconcileGrace))
			}
			return err
		}
		if err != nil {
			errs = append(errs, err)
			next = now.Add(r.l.cfg.ReconcileGrace)
		}
		if !next.IsZero() {
			r.index.requeue(t, next)
		}
	}
	r.report.Checked += uint64(len(due))
	if len(due) > 0 {
		r.report.LastPass, r.report.LastPassChecked = kv.Duration(time.Since(start)), len(due)
	}
	if r.changed || r.report.Tracked != r.index.len() || now.Sub(r.report.UpdatedAt) > 10*time.Second {
		errs = append(errs, r.publish(ctx))
	}
	return errors.Join(errs...)
}

// publish writes the report to AX_CONTROL.
func (r *reconciler) publish(ctx context.Context) error {
	r.report.Leader, r.report.UpdatedAt, r.report.Tracked = r.l.ID(), time.Now().UTC(), r.index.len()
	data, err := json.Marshal(&r.report)
	if err != nil {
		return err
	}
	if !r.l.held() {
		return errNotLeading
	}
	if _, err := r.board.Put(ctx, control.ReconcilerKey, data); err != nil {
		return fmt.Errorf("reconciler: publish report: %w", err)
	}
	r.changed = false
	return nil
}

// repaired counts a repair, logs it and calls the hook.
func (r *reconciler) repaired(rep control.Repair) {
	switch rep.Action {
	case "dead":
		r.report.Dead[rep.State]++
	default: // republished, rescheduled
		r.report.Republished[rep.State]++
	}
	r.report.Recent = append(r.report.Recent, rep)
	if n := len(r.report.Recent); n > maxRecentRepairs {
		r.report.Recent = slices.Clone(r.report.Recent[n-maxRecentRepairs:])
	}
	r.changed = true
	r.log.Warn("lost_task_repaired", zap.String("task_id", rep.TaskID), zap.String("tenant", rep.Tenant), zap.String("state", string(rep.State)),
		zap.String("action", rep.Action), zap.String("reason", rep.Reason))
	if r.l.cfg.OnRepair != nil {
		r.l.cfg.OnRepair(rep)
	}
}

// liveWorkers returns the live members, read once per pass.
func (r *reconciler) liveWorkers(ctx context.Context) (map[string]bool, error) {
	if r.members != nil {
		return r.members, nil
	}
	members, err := kv.ListMembers(ctx, r.l.js, r.l.cfg.Names)
	if err != nil {
		return nil, fmt.Errorf("reconciler: %w", err)
	}
	r.members = map[string]bool{}
	for _, m := range members {
		r.members[m.ID] = true
	}
	return r.members, nil
}
