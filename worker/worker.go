package worker

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/internal/denied"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/internal/tracing"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Worker pulls and runs tasks. Create it with [New], then [Worker.Start] and
// [Worker.Stop] it once. It is the coordinator of its stages (the intake,
// the gate, the claim and run stages, and settle: docs/ARCHITECTURE.md):
// it builds them, starts and stops them, and runs the slots, each taking
// one delivery at a time from the dispatch queue through them.
type Worker struct {
	cfg   *Config
	js    jetstream.JetStream
	store *kv.Store
	log   *zap.Logger

	intake    *intake        // the shard sets, their pullers and the mesh: what is received
	claimer   *claimer       // the claims of what is received
	runner    *runner        // the runs of what is claimed, to their outcome
	dispatch  *dispatchQueue // received deliveries, for the slots
	held      heldSet        // every message held, for heartbeats
	slotsOpen chan struct{}  // closed when Start ends: the slots take deliveries from then on
	gate      *gate          // flow control: the mesh's pauses and limits, the slots held here, the parked deliveries
	ops       opContexts     // the shared context of the task path's operations

	stopping  atomic.Bool
	stopCh    chan struct{} // closed when Stop begins
	slotsDone chan struct{} // closed when every slot has returned
	slots     sync.WaitGroup
	loops     sync.WaitGroup
	started   atomic.Bool
	stopOnce  sync.Once

	stats counters
}

// New returns a worker; it does nothing until Start. A permission the
// connection's user lacks fails it at once with an error naming the
// subject (it matches nats.ErrPermissionViolation).
func New(ctx context.Context, js jetstream.JetStream, cfg *Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	guard, ctx := denied.Watch(ctx, js.Conn())
	defer guard.Stop()
	store, err := kv.NewStore(ctx, js, &cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("new worker: %w", guard.Err(err))
	}
	if err := store.CheckBatchedReads(ctx); err != nil {
		return nil, fmt.Errorf("new worker: %w", guard.Err(err))
	}
	w := &Worker{cfg: cfg, js: js, store: store, log: cfg.Logger.Named("worker").With(zap.String("worker", cfg.ID)), stopCh: make(chan struct{}), slotsDone: make(chan struct{}),
		slotsOpen: make(chan struct{})}
	maxRecord := 0
	if payload := int(js.Conn().MaxPayload()); payload > 0 {
		maxRecord = payload
		if base64.StdEncoding.EncodedLen(cfg.MaxResultBytes) > payload/2 {
			return nil, fmt.Errorf("worker config: MaxResultBytes %d (%d in base64) must fit in half the server's max_payload (%d bytes): the result is stored in the task's record",
				cfg.MaxResultBytes, base64.StdEncoding.EncodedLen(cfg.MaxResultBytes), payload)
		}
	}
	w.dispatch = newDispatchQueue()
	w.claimer = &claimer{cfg: cfg, store: store, log: w.log, stats: &w.stats, conn: js.Conn(), held: &w.held}
	w.runner = &runner{cfg: cfg, js: js, store: store, log: w.log, stats: &w.stats, ops: &w.ops, maxRecord: maxRecord,
		claimer: w.claimer, tracer: tracing.Tracer(cfg.TracerProvider)}
	w.runner.chains = newChains(cfg, w.log, w.runner.tracer)
	w.runner.runCtx, w.runner.runCancel = context.WithCancelCause(context.Background())
	w.intake = &intake{cfg: cfg, js: js, log: w.log, dispatch: w.dispatch, held: &w.held, release: w.release,
		running: &w.runner.running, unhandled: &w.runner.unhandled, stopping: &w.stopping, stopCh: w.stopCh, loops: &w.loops,
		ready: make(chan struct{})}
	w.runner.intake = w.intake
	var observer HoldObserver
	if o, ok := cfg.Observer.(HoldObserver); ok {
		observer = o
	}
	w.gate = newGate(gateDeps{id: cfg.ID, ttl: cfg.MemberTTL,
		bindFunc: func(ctx context.Context) (gateStore, error) {
			return kv.NewLimitUse(ctx, js, cfg.Names)
		},
		watchLimitsFunc: func(ctx context.Context) (jetstream.KeyWatcher, error) {
			return watchLimits(ctx, js, cfg.Names)
		},
		opCtxFunc: w.ops.get,
		wakeFunc: func(d *delivery) {
			d.from = nil // its puller's credit was given back when a slot first took it
			if !w.dispatch.push(d) {
				w.release(d) // the worker is stopping
			}
		},
		dropFunc: w.release, weightsFunc: w.dispatch.setWeights,
		done: w.slotsDone, stats: &w.stats, observer: observer, log: w.log})
	w.runner.gate = w.gate
	w.held.items = map[*delivery]struct{}{}
	return w, nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Start joins the mesh and consumes the shards it is given (or the fixed
// [Config.Shards]), and starts the task slots and the heartbeat loop. It
// returns once the worker is [Worker.Ready] (or the member TTL has passed
// without the mesh giving it shards). The slots start the tasks received
// meanwhile only then, highest priority first. A permission the
// connection's user lacks, reported while it starts, fails it at once with
// an error naming the subject (it matches nats.ErrPermissionViolation), the
// worker stopped.
func (w *Worker) Start(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("worker already started")
	}
	guard, ctx := denied.Watch(ctx, w.js.Conn())
	defer guard.Stop()
	// Nothing runs yet if these fail: no slot will end, so Stop must not
	// wait for them (it did, for ever).
	if err := w.intake.bindShards(ctx); err != nil {
		close(w.slotsDone)
		return fmt.Errorf("start worker: %w", w.refused(guard, err))
	}
	if err := w.runner.subscribeCancels(); err != nil {
		close(w.slotsDone)
		return fmt.Errorf("start worker: %w", w.refused(guard, err))
	}
	// Slots and heartbeats run before any consumer does: a delivery must
	// never wait unheartbeated for a slot that has not started.
	for range w.cfg.Concurrency {
		w.slots.Go(w.slot)
	}
	w.loops.Go(func() { w.slots.Wait(); close(w.slotsDone) })
	if !w.cfg.Test.DisableHeartbeats {
		w.loops.Go(func() { w.claimer.heartbeats(w.slotsDone) })
	}
	limitsCtx, abortLimits := context.WithCancel(context.Background())
	w.gate.abort = abortLimits
	w.loops.Go(func() { defer abortLimits(); w.gate.run(limitsCtx) })
	w.gate.await(ctx) // before any delivery: a paused or limited task must not slip through
	if err := w.intake.serve(ctx); err != nil {
		return w.failStart(ctx, guard, err)
	}
	// A refused subscription (the cancel subject of another id than the
	// user's) is reported only after the subscribe returned.
	if w.intake.layout == streams.LayoutFair {
		w.intake.startTenants()
	}
	if err := guard.Check(ctx); err != nil {
		return w.failStart(ctx, guard, err)
	}
	if w.intake.layout == streams.LayoutFair {
		w.intake.awaitPulls(ctx) // the tenants' sets
	}
	close(w.slotsOpen)
	w.intake.markReady()
	w.log.Info("worker_started", zap.Int("concurrency", w.cfg.Concurrency), zap.Bool("mesh", w.cfg.mesh), zap.Ints("shards", w.cfg.Shards))
	return nil
}

// failStart stops a worker whose start failed with err, the limits loop's
// requests cut short (a request refused to the user would otherwise be
// waited out), and returns err, or the violation guard saw.
func (w *Worker) failStart(ctx context.Context, guard *denied.Guard, err error) error {
	w.gate.abort()
	return errors.Join(fmt.Errorf("start worker: %w", w.refused(guard, err)), w.Stop(context.WithoutCancel(ctx)))
}

// refused returns the permission violation guard saw, if any, else err;
// a refused cancel subject says what to do.
func (w *Worker) refused(guard *denied.Guard, err error) error {
	err = guard.Err(err)
	var refused *denied.Error
	if errors.As(err, &refused) && refused.Subject == w.cfg.Names.WorkerCancelSubject(w.cfg.ID) {
		refused.Hint = "a worker's ID (ax worker --id) is its user's name, whose cancel notices the user may hear"
	}
	return err
}

// Stop stops fetching, naks the tasks not started, lets running tasks finish
// for the grace period, then cancels them (cause [ErrStop]) and puts them
// back for another worker. It returns when every goroutine has ended or ctx
// is done.
func (w *Worker) Stop(ctx context.Context) error {
	if !w.started.Load() {
		return nil
	}
	w.stopOnce.Do(func() {
		w.stopping.Store(true)
		close(w.stopCh)
		w.intake.stop()
	})
	slotsDone := w.slotsDone
	grace := time.NewTimer(w.cfg.GracePeriod)
	defer grace.Stop()
	select {
	case <-slotsDone:
	case <-grace.C:
		w.runner.runCancel(ErrStop)
	case <-ctx.Done():
		w.runner.runCancel(ErrStop)
	}
	select {
	case <-slotsDone:
	case <-ctx.Done():
		return fmt.Errorf("stop worker %s: %w", w.cfg.ID, ctx.Err())
	}
	w.runner.runCancel(ErrStop)
	for _, d := range w.dispatch.close() { // tasks received but not started
		w.release(d)
	}
	w.loops.Wait()
	w.runner.unsubscribeCancels()
	w.log.Info("worker_stopped")
	return nil
}

// Run starts the worker, waits for ctx to end and stops it.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.GracePeriod+10*time.Second)
	defer cancel()
	return w.Stop(stopCtx)
}

// release hands an unstarted message back to the stream at once.
func (w *Worker) release(d *delivery) {
	w.gate.returnHanded(d)
	w.held.remove(d)
	d.nak()
}

// slot runs tasks one at a time, highest priority first, until Stop. It
// starts none before Start has ended: the tasks waiting when the worker
// joins arrive one request at a time, and a slot taking the first to come
// would start a P4 task before a P0 one whose request went later.
func (w *Worker) slot() {
	select {
	case <-w.slotsOpen:
	case <-w.stopCh:
	}
	for {
		d := w.dispatch.pop(w.stopCh)
		if d == nil {
			return
		}
		if !d.set.accepts(d.shard) {
			w.release(d) // the shard moved to another worker before it started
			continue
		}
		if w.claimer.expired(d) {
			w.gate.returnHanded(d)
			w.held.remove(d)
			continue
		}
		w.runner.process(d)
		w.gate.returnHanded(d)   // dropped before its admission took them
		if !w.gate.parkHeld(d) { // still held while it waits for a slot of its limit
			w.held.remove(d)
		}
	}
}
