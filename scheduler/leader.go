package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/move"
	"github.com/ax-mesh/ax/internal/stderrlog"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Defaults of [Config].
const (
	DefaultAgingThreshold   = 30 * time.Second
	DefaultPressureInterval = time.Second
	DefaultMoverWorkers     = 32
	DefaultUnservedInterval = 5 * time.Second
)

// Config configures a [Leader].
type Config struct {
	// Names of the deployment. Zero means [streams.DefaultNames].
	Names streams.Names
	// ID of this process in the leader lease. Default "<hostname>-<nuid>".
	ID string
	// LeaseTTL of the leader lease, whole seconds. Default 10s.
	LeaseTTL time.Duration
	// RenewEvery of the leader lease. Default 3s, at most LeaseTTL/2.
	RenewEvery time.Duration
	// AgingThreshold: a READY task waiting this long in its bucket is lifted
	// one priority level, once per threshold waited. Default 30s; -1 disables.
	AgingThreshold time.Duration
	// AgingBatch bounds the lifts per bucket and pass. Default 1,000.
	AgingBatch int
	// Pressure thresholds; zero fields take their defaults.
	Pressure ax.PressureThresholds
	// PressureInterval is how often bucket depths are measured. Default 1s.
	PressureInterval time.Duration
	// OnPressure, when set, is called with every report: the hook a metrics
	// exporter (Prometheus gauges per bucket) plugs into. It must not block.
	OnPressure func(ax.Pressure)
	// AckWait of the shard consumers: a RUNNING record not updated for
	// longer than this may be stuck. Default 30s. It only sets when the
	// reconciler first looks at a RUNNING record: its verdict reads the
	// task's message and the live members, so a value other than the
	// consumers' delays or hastens a look and changes no outcome
	// (deploy.Open's Leader passes the consumers').
	AckWait time.Duration
	// SweepInterval is how often the reconciler checks the records due for
	// a check (at most ReconcileBatch of them). Default 1s.
	SweepInterval time.Duration
	// ReconcileGrace is how long a record must keep its revision before the
	// reconciler judges it lost; at least the op timeout of every writer
	// (10s). Default 15s. A RUNNING record is judged after the longer of
	// this and AckWait.
	ReconcileGrace time.Duration
	// ReconcileBatch bounds the records checked in one pass. Default 1,000.
	ReconcileBatch int
	// ReconcileRecheck bounds the wait between two checks of a record found
	// healthy (the wait doubles from the grace). Default 10m.
	ReconcileRecheck time.Duration
	// OnRepair, when set, is called with every task the reconciler
	// repaired: the hook of the repairs counter. It must not block.
	OnRepair func(control.Repair)
	// OnReject, when set, is called with every mistyped submit the
	// leader's watch saw (a message no bucket stored): the hook of the
	// rejected-submits counter. It must not block.
	OnReject func(control.RejectedSubmit)
	// OnForeignValue, if set, hears about each value ax did not write that
	// the scheduler found in one of its keys, by bucket, and what it did
	// ("taken_over": the leader lease taken over; "released_first": a due
	// task released as one without a record, which the worker that takes
	// it rebuilds; "rebuilt": the tenants of a fair deployment listed
	// again). It must not block.
	OnForeignValue func(bucket, action string)
	// MoverWorkers release due tasks concurrently. Default 32.
	MoverWorkers int
	// UnservedInterval is how often, on a pools deployment, the leader
	// looks for tasks of types past their unserved deadline
	// ([UnservedDeadlines]). Default 5s.
	UnservedInterval time.Duration
	// PausedRecheck is how often the mover looks again at a fired schedule
	// whose task is PAUSED, so that it is released once resumed. Default 2s.
	PausedRecheck time.Duration
	// Logger. Default: warnings and errors as JSON lines on standard
	// error (zap's production encoding at warn level), so that a server
	// outage is not silent; zap.NewNop() silences it.
	Logger *zap.Logger
	// Store configures the task record store.
	Store kv.StoreConfig
}

func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	out.AgingThreshold = cmp.Or(out.AgingThreshold, DefaultAgingThreshold)
	out.AgingBatch = cmp.Or(out.AgingBatch, 1000)
	out.Pressure = pressureWithDefaults(out.Pressure)
	out.PressureInterval = cmp.Or(out.PressureInterval, DefaultPressureInterval)
	out.AckWait = cmp.Or(out.AckWait, streams.DefaultAckWait)
	out.SweepInterval = cmp.Or(out.SweepInterval, DefaultReconcileInterval)
	out.ReconcileGrace = cmp.Or(out.ReconcileGrace, DefaultReconcileGrace)
	out.ReconcileBatch = cmp.Or(out.ReconcileBatch, DefaultReconcileBatch)
	out.ReconcileRecheck = cmp.Or(out.ReconcileRecheck, DefaultReconcileRecheck)
	out.MoverWorkers = cmp.Or(out.MoverWorkers, DefaultMoverWorkers)
	out.PausedRecheck = cmp.Or(out.PausedRecheck, 2*time.Second)
	out.UnservedInterval = cmp.Or(out.UnservedInterval, DefaultUnservedInterval)
	if out.Logger == nil {
		out.Logger = stderrlog.New()
	}
	out.Store.Names = out.Names
	return &out
}

func (c *Config) validate() error {
	var errs []error
	if c.AgingThreshold != -1 && c.AgingThreshold < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("AgingThreshold %s must be at least 10ms, or -1", c.AgingThreshold))
	}
	if c.PressureInterval < 10*time.Millisecond || c.SweepInterval < 10*time.Millisecond || c.UnservedInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("PressureInterval %s, SweepInterval %s and UnservedInterval %s must be at least 10ms",
			c.PressureInterval, c.SweepInterval, c.UnservedInterval))
	}
	if c.ReconcileGrace < 10*time.Millisecond || c.ReconcileRecheck < c.ReconcileGrace || c.ReconcileBatch < 1 {
		errs = append(errs, fmt.Errorf("ReconcileGrace %s must be at least 10ms, ReconcileRecheck %s at least the grace, ReconcileBatch %d positive",
			c.ReconcileGrace, c.ReconcileRecheck, c.ReconcileBatch))
	}
	if c.MoverWorkers < 1 || c.AgingBatch < 1 {
		errs = append(errs, fmt.Errorf("MoverWorkers %d and AgingBatch %d must be positive", c.MoverWorkers, c.AgingBatch))
	}
	errs = append(errs, validatePressure(c.Pressure))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("leader config: %w", err)
	}
	return nil
}

// Leader runs ax's control loops in the one process that holds the leader
// lease: the mover that releases due delayed tasks, cron, aging,
// backpressure, the reconciler of lost tasks, the watch of mistyped
// submit subjects and, on a pools deployment, the deadlines of unserved
// task types. Run it in every scheduler
// process; one leads, the others wait to take over.
//
// Safety: the loops run only under the lease (see [Elector]), and every
// change they make is idempotent or a compare-and-set on the task record,
// so a loop of a deposed leader that is still finishing a step cannot
// double a task. Liveness: a new leader resumes every loop within one
// lease TTL (plus about a second) of the old one's death; work that fell
// due meanwhile is done at once (due tasks, cron fires).
type Leader struct {
	cfg     *Config
	js      jetstream.JetStream
	store   *kv.Store
	moves   *move.Mover // aging, release and the reconciler's re-publish
	client  *ax.Client  // submits cron tasks
	elector *Elector
	log     *zap.Logger
	// refusing says, per priority, whether the bucket refused non-core
	// tasks at the pressure loop's last reading: the mover holds the
	// release of delayed tasks into it.
	refusing [streams.Priorities]atomic.Bool
	// tenants collects for the discovery of a fair deployment the tenants
	// of the submits it hears and of the delayed tasks the mover releases.
	tenants *tenantNotes
	// consumersMu serializes the pressure loop's pause and resume of a
	// bucket's consumers with the discovery's creation of a tenant's, so
	// that a tenant's new consumers are either in a pause's (or resume's)
	// listing or created after it, paused as the others are
	// (streams.EnsureTenantConsumers reads the bucket's pause).
	consumersMu sync.Mutex

	started atomic.Bool
	stop    context.CancelFunc // ends the Run that Start began
	done    chan error         // Run's result, once it returned
}

// New returns a leader contender; it does nothing until Run or Start.
func New(ctx context.Context, js jetstream.JetStream, cfg *Config) (*Leader, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	store, err := kv.NewStore(ctx, js, &cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("new leader: %w", err)
	}
	client, err := ax.NewClient(ctx, js, &ax.Config{Names: cfg.Names, Logger: cfg.Logger, Store: cfg.Store})
	if err != nil {
		return nil, fmt.Errorf("new leader: %w", err)
	}
	elector, err := NewElector(ctx, js, &ElectorConfig{Names: cfg.Names, ID: cfg.ID, TTL: cfg.LeaseTTL, RenewEvery: cfg.RenewEvery, Logger: cfg.Logger,
		OnForeignValue: cfg.OnForeignValue})
	if err != nil {
		return nil, fmt.Errorf("new leader: %w", err)
	}
	moves, err := move.New(js, store, &move.Config{Names: cfg.Names})
	if err != nil {
		return nil, fmt.Errorf("new leader: %w", err)
	}
	return &Leader{cfg: cfg, js: js, store: store, moves: moves, client: client, elector: elector,
		log: cfg.Logger.Named("scheduler"), tenants: newTenantNotes(cfg.Names)}, nil
}

// ID returns this contender's id.
func (l *Leader) ID() string { return l.elector.ID() }

// Leading reports whether this process leads now.
func (l *Leader) Leading() bool { return l.elector.Leading() }

// Elector returns the leader's elector.
func (l *Leader) Elector() *Elector { return l.elector }

// held is the check every control loop makes right before a write: see
// [Elector.Held].
func (l *Leader) held() bool { return l.elector.Held() }

// guard is a move's lease check ([move.Request.Guard]), made just before
// its compare-and-set: a leader that no longer leads writes no record.
func (l *Leader) guard(context.Context) error {
	if !l.held() {
		return errNotLeading
	}
	return nil
}

// deleteMsg deletes message seq of stream streamName; one already gone is
// no error.
func (l *Leader) deleteMsg(ctx context.Context, streamName string, seq uint64) error {
	stream, err := l.js.Stream(ctx, streamName)
	if err == nil {
		err = stream.DeleteMsg(ctx, seq)
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	return err
}

// errNotLeading is returned by a loop step that stopped before a write
// because the lease was no longer held.
var errNotLeading = fmt.Errorf("%w: this process no longer leads; the write was not made", kv.ErrLeaseLost)

// Run campaigns for leadership and runs the control loops while leading,
// until ctx ends.
func (l *Leader) Run(ctx context.Context) error {
	defer func() { _ = l.client.Close() }()
	return l.elector.Run(ctx, l.lead)
}

// Start runs the leader in the background ([Leader.Run] until
// [Leader.Stop]) and returns at once, as a worker's and the management
// API's Start do.
func (l *Leader) Start(ctx context.Context) error {
	if !l.started.CompareAndSwap(false, true) {
		return errors.New("leader already started")
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.stop, l.done = cancel, make(chan error, 1)
	go func() { l.done <- l.Run(runCtx) }()
	return nil
}

// Stop ends a leader begun by [Leader.Start]: its loops stop and it
// releases the lease (another contender leads at once). It waits until
// then, or until ctx ends. Stopping a leader not started does nothing.
func (l *Leader) Stop(ctx context.Context) error {
	if l.stop == nil {
		return nil
	}
	l.stop()
	select {
	case err := <-l.done:
		l.done <- err // a second Stop returns at once
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lead runs every control loop until ctx ends (the lease was lost or Run's
// context ended) and waits for them.
func (l *Leader) lead(ctx context.Context) {
	loops := []struct {
		name string
		run  func(context.Context) error
	}{
		{"mover", newMover(l).run},
		{"cron", newCronLoop(l).run},
		{"pressure", newPressureLoop(l).run},
		{"reconciler", newReconciler(l).run},
		{"rejects", newRejectWatch(l).run},
		{"unserved", newUnservedExpiry(l).run},
		{"tenants", newTenantDiscovery(l).run},
		{"resumer", newResumer(l).run},
		{"workflows", newWorkflowLoop(l).run},
	}
	if l.cfg.AgingThreshold > 0 {
		loops = append(loops, struct {
			name string
			run  func(context.Context) error
		}{"aging", newAging(l).run})
	}
	var wg sync.WaitGroup
	for _, loop := range loops {
		wg.Go(func() {
			for ctx.Err() == nil {
				err := loop.run(ctx)
				if ctx.Err() != nil {
					return
				}
				l.log.Warn("loop_failed", zap.String("loop", loop.name), zap.Error(err))
				sleep(ctx, time.Second)
			}
		})
	}
	wg.Wait()
}
