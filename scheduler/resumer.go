package scheduler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/move"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

const (
	// resumeSettle is how long after a pause ends the resumer releases
	// its tasks: time for every worker to apply the change, so that none
	// moves a task aside for the pause after the release looked for it.
	resumeSettle = 2 * time.Second
	// resumeAgain is when the resumer looks once more after a release,
	// for a task a slow worker moved aside after the first look.
	resumeAgain = time.Minute
	// resumeRetry is when the resumer looks again after a look failed,
	// doubled with each failure in a row up to resumeRetryMax.
	resumeRetry    = 5 * time.Second
	resumeRetryMax = time.Minute
	// resumeFetch is how many schedules one read of AX_DELAYED brings.
	resumeFetch = 1000
)

// resumer releases the tasks that workers moved aside for a pause of
// their type or tenant ([kv.ActionPausedAside]) once that pause has ended:
// it watches the paused targets in AX_CONTROL, and resumeSettle after a
// pause ends (and once more resumeAgain later), and at its election, it
// reads the schedules in AX_DELAYED and moves each task whose record is
// PENDING, paused aside, and no longer paused back to READY: a copy of its
// schedule in its bucket, the schedule deleted, as the mover releases a
// due task (by compare-and-set on the record, so a worker, an operator or
// another leader acting meanwhile wins or loses cleanly). A task it misses
// (this leader deposed meanwhile) comes back at its schedule's own time;
// a look that fails is made again resumeRetry later (doubled while looks
// keep failing, up to resumeRetryMax). The pauses are followed while a
// sweep runs, and each task is checked against them as they are when it
// is released: a pause made again during a long sweep stops the release
// of its tasks there.
type resumer struct {
	l   *Leader
	log *zap.Logger
	// paused is the pauses as the watch last delivered them.
	paused atomic.Pointer[pausedSet]
}

func newResumer(l *Leader) *resumer { return &resumer{l: l, log: l.log.Named("resumer")} }

func (r *resumer) run(ctx context.Context) error {
	board, err := control.Open(ctx, r.l.js, r.l.cfg.Names)
	if err != nil {
		return fmt.Errorf("resumer: bind %s: %w", r.l.cfg.Names.ControlBucket(), err)
	}
	watch, err := board.Watch(ctx, control.LimitsKey)
	if err != nil {
		return fmt.Errorf("resumer: watch %s: %w", control.LimitsKey, err)
	}
	defer func() { _ = watch.Stop() }()
	r.paused.Store(&pausedSet{})
	ctx, cancel := context.WithCancel(ctx)
	var (
		ready   = make(chan struct{})    // closed once the watch's initial values were delivered
		ended   = make(chan struct{}, 1) // a pause ended
		stopped = make(chan error, 1)    // the watch ended
		wg      sync.WaitGroup
	)
	wg.Go(func() { stopped <- r.follow(ctx, board, watch, ready, ended) })
	defer wg.Wait()
	defer cancel()
	var (
		timer    *time.Timer // the next look; nil: none planned
		again    bool        // a look resumeAgain after the next one is due
		failures int         // looks failed in a row
	)
	plan := func(d time.Duration, follow bool) {
		if timer != nil {
			timer.Stop()
		}
		timer, again = time.NewTimer(d), follow
	}
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	elected := ready
	for {
		var due <-chan time.Time
		if timer != nil {
			due = timer.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-stopped:
			return err
		case <-elected:
			elected = nil
			plan(0, false) // at its election: what an earlier leader left
		case <-ended:
			plan(resumeSettle, true)
		case <-due:
			timer = nil
			released, err := r.sweep(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				// AX_DELAYED unavailable a moment (electing its own leader
				// after a failover, say): the same look again, soon.
				r.log.Warn("resume_sweep_failed", zap.Int("released", released), zap.Error(err))
				plan(min(resumeRetry<<min(failures, 8), resumeRetryMax), again)
				failures++
				continue
			case released > 0:
				r.log.Info("paused_aside_released", zap.Int("released", released))
			}
			failures = 0
			if again {
				plan(resumeAgain, false)
			}
		}
	}
}

// follow keeps r.paused as the watch delivers the limits, closes ready
// once their initial values were delivered, and signals ended (without
// waiting) each time a pause ends after that. A value ax did not write
// over the limits ([kv.ErrForeignLimits]) is replaced by the last limits
// it read ([resumer.restore]). It returns when ctx ends or the watch does.
func (r *resumer) follow(ctx context.Context, board jetstream.KeyValue, watch jetstream.KeyWatcher, ready, ended chan<- struct{}) error {
	initial := true
	var lastGood []byte // the last value of the limits that decoded, nil: none read yet
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-watch.Updates():
			if !ok {
				return errors.New("resumer: watch of the limits ended")
			}
			if e == nil {
				if initial {
					initial = false
					close(ready)
				}
				continue
			}
			next, err := readPaused(e)
			if errors.Is(err, kv.ErrForeignLimits) {
				r.restore(ctx, board, e, lastGood, err)
				continue
			}
			if err != nil {
				r.log.Error("limits_decode", zap.Uint64("revision", e.Revision()), zap.Error(err))
				continue
			}
			if e.Operation() == jetstream.KeyValuePut {
				lastGood = e.Value()
			}
			was := r.paused.Swap(&next)
			if !initial && was.ended(next) {
				select {
				case ended <- struct{}{}:
				default: // one already waits: the look it plans reads the pauses then
				}
			}
		}
	}
}

// restore writes good, the last value of the limits this leader read, over
// e, a value ax did not write there (found: why), by compare-and-set on
// its revision: the workers, which kept the limits they had read, and any
// that starts later read them again. With none read (this leader was
// elected after the value was written), the operator's limits and pauses
// are lost: the error says to set them again (the workers keep theirs
// meanwhile; a worker started since serves without them).
func (r *resumer) restore(ctx context.Context, board jetstream.KeyValue, e jetstream.KeyValueEntry, good []byte, found error) {
	value := e.Value()[:min(len(e.Value()), kv.ForeignValueLen)]
	if good == nil {
		r.log.Error("limits_foreign", zap.Uint64("revision", e.Revision()), zap.ByteString("value", value), zap.Error(found),
			zap.String("hint", "the limits and pauses are not known here: set them again (ax limit set, ax pause)"))
		return
	}
	var err error
	if !r.l.held() {
		err = errNotLeading
	}
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = board.Update(wctx, control.LimitsKey, good, e.Revision())
	}
	if err != nil {
		r.log.Warn("limits_restore_failed", zap.Uint64("revision", e.Revision()), zap.ByteString("value", value), zap.Error(err))
		return
	}
	r.log.Warn("limits_restored", zap.Uint64("foreign_revision", e.Revision()), zap.ByteString("foreign_value", value), zap.NamedError("found", found))
	if r.l.cfg.OnForeignValue != nil {
		r.l.cfg.OnForeignValue(r.l.cfg.Names.ControlBucket(), "restored")
	}
}

// pausedSet is the types and tenants paused at one value of the limits.
type pausedSet struct {
	types, tenants map[string]bool
}

func readPaused(e jetstream.KeyValueEntry) (pausedSet, error) {
	set := pausedSet{types: map[string]bool{}, tenants: map[string]bool{}}
	if e.Operation() != jetstream.KeyValuePut {
		return set, nil
	}
	limits, err := kv.DecodeLimits(e.Value())
	if err != nil {
		return pausedSet{}, err
	}
	for target := range limits.Paused {
		kind, name, err := kv.ParseTarget(target, true)
		switch {
		case err != nil:
		case kind == "tenant":
			set.tenants[name] = true
		default:
			set.types[name] = true
		}
	}
	return set, nil
}

// holds reports whether the set pauses a task of taskType and tenant.
func (s pausedSet) holds(taskType, tenant string) bool { return s.types[taskType] || s.tenants[tenant] }

// ended reports whether a target of s is not in next.
func (s pausedSet) ended(next pausedSet) bool {
	for t := range s.types {
		if !next.types[t] {
			return true
		}
	}
	for t := range s.tenants {
		if !next.tenants[t] {
			return true
		}
	}
	return false
}

// sweep reads every schedule in AX_DELAYED (headers only) and releases the
// tasks paused aside (their schedules marked [streams.HeaderAside]) whose
// type and tenant no pause holds, with the
// mover's number of goroutines. It returns how many it released.
func (r *resumer) sweep(ctx context.Context) (int, error) {
	names := r.l.cfg.Names
	stream, err := r.l.js.Stream(ctx, names.DelayedStream())
	if err != nil {
		return 0, fmt.Errorf("bind %s: %w", names.DelayedStream(), err)
	}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{names.DelayedFilter()}, HeadersOnly: true})
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", names.DelayedFilter(), err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		released int
	)
	work := make(chan candidate)
	for range max(r.l.cfg.MoverWorkers, 1) {
		wg.Go(func() {
			for c := range work {
				if r.release(ctx, stream, c) {
					mu.Lock()
					released++
					mu.Unlock()
				}
			}
		})
	}
	err = r.scan(ctx, cons, work)
	close(work)
	wg.Wait()
	return released, err
}

// candidate is a schedule whose task may be paused aside.
type candidate struct {
	ref kv.Ref
	seq uint64
}

// scan feeds work the schedules of tasks that no pause holds now, until
// it has read the last one stored when it began.
func (r *resumer) scan(ctx context.Context, cons jetstream.Consumer, work chan<- candidate) error {
	names := r.l.cfg.Names
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", names.DelayedFilter(), err)
	}
	left := info.NumPending
	for left > 0 {
		batch, err := cons.Fetch(resumeFetch, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return fmt.Errorf("read %s: %w", names.DelayedFilter(), err)
		}
		n := 0
		for msg := range batch.Messages() {
			n++
			meta, err := msg.Metadata()
			if err != nil {
				continue
			}
			left = min(left-1, meta.NumPending)
			if msg.Headers().Get(streams.HeaderAside) != streams.AsidePaused {
				continue // a delayed task, or one stepped aside for a limit
			}
			tenant, id, ok := names.ParseDelayedSubject(msg.Subject())
			if !ok {
				continue
			}
			s, err := names.ParseSubmit(msg.Headers().Get(streams.HeaderSubject))
			if err != nil || s.Tenant != tenant || r.paused.Load().holds(s.Type, tenant) {
				continue
			}
			select {
			case work <- candidate{ref: kv.Ref{Tenant: tenant, ID: id}, seq: meta.Sequence.Stream}:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("read %s: %w", names.DelayedFilter(), err)
		}
		if n == 0 {
			return nil // nothing more came: what is left was deleted or fired meanwhile
		}
	}
	return nil
}

// release moves c's task, if its record says it waits paused aside, from
// its schedule back to its bucket, and reports whether it did.
func (r *resumer) release(ctx context.Context, stream jetstream.Stream, c candidate) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec, rev, err := r.l.store.Get(ctx, c.ref)
	if err != nil || !rec.WaitsPausedAside() {
		return false // a delayed task, or released, cancelled or paused by an operator meanwhile
	}
	if r.paused.Load().holds(rec.Type, rec.Tenant) {
		return false // paused again since the scan read its schedule
	}
	raw, err := stream.GetMsg(ctx, c.seq)
	if err != nil {
		return false // fired meanwhile: the mover releases it
	}
	req := move.ReleaseNow(r.l.cfg.Names, rec, rev, raw, "resume", time.Now().UTC())
	req.Guard = r.l.guard
	res, err := r.l.moves.Move(ctx, req)
	r.l.tenants.note(c.ref.Tenant, rec.Priority)
	if err != nil && res.Outcome != move.Landed {
		r.log.Warn("resume_release_failed", zap.String("task_id", c.ref.ID), zap.String("tenant", c.ref.Tenant), zap.Error(err))
	}
	return res.Outcome == move.Landed
}
