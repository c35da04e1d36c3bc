package worker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// The gate is a worker's flow control: the mesh's pauses and limits
// ([kv.Limits] in AX_CONTROL), the slots of concurrency limits it holds in
// AX_LIMITS, and the deliveries parked here waiting for one. Its contract
// with the rest of the worker is narrow:
//
//   - [gate.admit] decides, before a delivery's claim, whether its task may
//     start: a [ticket] (run now, holding the slots it took or was handed)
//     or a [verdict] (paused, parked, step aside, hold back), which the
//     run stage carries out ([runner.admit]);
//   - [ticket.done] passes the ticket's slots on once its handler returns:
//     to a delivery parked here, or back to AX_LIMITS;
//   - [gate.parkHeld] parks a delivery whose verdict was parked, once the
//     slot that held it is done with it, and [gate.returnHanded] gives back
//     the slots handed to a delivery dropped before its admission;
//   - a parked delivery goes back to the intake through wake, the function
//     the worker gives the gate ([gateDeps]).
//
// It reaches AX_LIMITS through [gateStore] only, so that it can be tested
// without a server.

// gateStore is what the gate needs of AX_LIMITS ([kv.LimitUse]).
type gateStore interface {
	Acquire(ctx context.Context, target string, n int, holder string, ttl time.Duration) (bool, error)
	AcquireSome(ctx context.Context, target string, n int, holders []string, ttl time.Duration) ([]string, error)
	Release(ctx context.Context, target, holder string) error
	Renew(ctx context.Context, target string, holders []string, ttl time.Duration) ([]string, error)
	Reserve(ctx context.Context, target string, rate float64, burst int, holder string, ttl time.Duration) (time.Duration, error)
	Unreserve(ctx context.Context, target, holder string) error
	Take(ctx context.Context, target string, rate float64, burst int, holder string) (time.Duration, error)
	WatchSlots(ctx context.Context) (jetstream.KeyWatcher, error)
}

// gateDeps is what a gate is given by its worker.
type gateDeps struct {
	id  string        // the worker's id: the prefix of its slots' holders
	ttl time.Duration // a slot's TTL in AX_LIMITS: the member TTL
	// bindFunc binds AX_LIMITS, at the first use.
	bindFunc func(ctx context.Context) (gateStore, error)
	// watchLimitsFunc watches the limits key in AX_CONTROL.
	watchLimitsFunc func(ctx context.Context) (jetstream.KeyWatcher, error)
	// opCtxFunc bounds the writes that must happen even while the worker
	// stops (slots given back, starts unreserved).
	opCtxFunc func() context.Context
	// wakeFunc hands a parked delivery back to the intake, to be
	// dispatched again; dropFunc hands a delivery back to its stream
	// (both once the gate has let go of it).
	wakeFunc func(d *delivery)
	dropFunc func(d *delivery)
	// weightsFunc hears the groups' weights of each new table of limits.
	weightsFunc func(groupWeights)
	done        <-chan struct{} // closed when every slot has returned: parking ends
	stats       *counters
	observer    HoldObserver // nil: none
	log         *zap.Logger
}

// gate is a worker's flow control (see above).
type gate struct {
	gateDeps
	table atomic.Pointer[flowTable] // nil: nothing paused or limited
	ready chan struct{}             // closed once the limits were first read
	once  sync.Once
	// abort cancels the limits loop's requests: called when Start fails,
	// so that the stop that follows does not wait out a refused one.
	abort context.CancelFunc
	fills sync.WaitGroup // fillSlots in flight

	mu         sync.Mutex
	use        gateStore                       // bound at first use (mu)
	holds      map[string]map[string]*slotHold // target -> holders of its slots here, and the trust in each (mu)
	parked     map[string][]*delivery          // parkKey -> deliveries waiting here for a slot or a start of the limit, oldest first (mu)
	bytes      int                             // the parked deliveries' message bytes (mu)
	byConsumer map[consumerRef]int             // the deliveries parked here from each consumer (mu)
	starts     map[string]*startMeter          // target -> how often its tasks were admitted here lately (mu)
	room       int                             // the most bytes parked here: maxParkedBytes (tests set less)
	wakes      map[string]time.Time            // parkKey -> when its oldest delivery is woken for its rate's next start (mu)
	yields     map[string]time.Time            // target -> until when the deliveries parked here leave a slot given back at the end of a turn to the other workers (mu)
	taking     map[string]bool                 // target -> a take of its slots is in flight here: a fresh delivery's or a fill's (mu)
	refill     map[string]bool                 // target -> fill again once the take in flight ends: a slot may have been given back meanwhile (mu)
	closed     bool                            // no more parking: the slots have returned (mu)
}

// newGate returns a gate with nothing paused or limited until its loop
// ([gate.run]) reads the limits.
func newGate(deps gateDeps) *gate {
	return &gate{gateDeps: deps, ready: make(chan struct{}), room: maxParkedBytes, abort: func() {}}
}

// errWatchClosed means nats.go closed the watch of the limits.
var errWatchClosed = errors.New("watch limits: closed")

// store returns the bound limits bucket.
func (g *gate) store(ctx context.Context) (gateStore, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.use != nil {
		return g.use, nil
	}
	use, err := g.bindFunc(ctx)
	if err != nil {
		return nil, err
	}
	g.use = use
	return use, nil
}

// finalCtx is the context of a write that must happen even while the
// worker stops.
func (g *gate) finalCtx() context.Context { return g.opCtxFunc() }

// run watches the limits in AX_CONTROL, renews the slots held here and
// tries the parked deliveries again, until every slot has returned (done);
// it returns once the slots' takes in flight have ended. A failed watch is
// made again after limitsRetry; renewals go on meanwhile.
func (g *gate) run(ctx context.Context) {
	defer g.fills.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	renew := time.NewTicker(g.ttl / 3)
	defer renew.Stop()
	poll := time.NewTicker(limitedPoll)
	defer poll.Stop()
	retry := time.NewTimer(0)
	defer retry.Stop()
	var watch jetstream.KeyWatcher
	var updates <-chan jetstream.KeyValueEntry // nil while there is no watch
	stopWatch := func() {
		if watch != nil {
			_ = kv.StopWatch(watch)
			watch, updates = nil, nil
		}
	}
	defer stopWatch()
	// The watch of the slots in AX_LIMITS, made once deliveries are parked
	// here, and made again at a poll after a failure.
	var slotWatch jetstream.KeyWatcher
	var slotUpdates <-chan jetstream.KeyValueEntry // nil while there is no watch
	defer func() {
		if slotWatch != nil {
			_ = kv.StopWatch(slotWatch)
		}
	}()
	for {
		select {
		case <-g.done:
			g.closeParking()
			return
		case <-renew.C:
			g.renewSlots(ctx)
		case <-poll.C:
			g.unparkOldest()
			if slotWatch == nil && g.anyParked() {
				var err error
				if slotWatch, err = g.watchSlots(ctx); err != nil {
					g.log.Warn("slots_watch_failed", zap.Error(err))
					continue
				}
				slotUpdates = slotWatch.Updates()
			}
		case e, ok := <-slotUpdates:
			if !ok {
				_ = kv.StopWatch(slotWatch)
				slotWatch, slotUpdates = nil, nil
				g.log.Warn("slots_watch_failed", zap.Error(errWatchClosed))
				continue
			}
			g.slotsChanged(e)
		case <-retry.C:
			var err error
			if watch, err = g.watchLimitsFunc(ctx); err != nil {
				g.once.Do(func() { close(g.ready) }) // serve without limits meanwhile
				g.log.Warn("limits_watch_failed", zap.Error(err))
				retry.Reset(limitsRetry)
				continue
			}
			updates = watch.Updates()
		case e, ok := <-updates:
			if !ok {
				stopWatch()
				g.log.Warn("limits_watch_failed", zap.Error(errWatchClosed))
				retry.Reset(limitsRetry)
				continue
			}
			g.applyLimits(e)
		}
	}
}

// applyLimits applies an update of the limits key (nil: the watch's
// initial values were delivered).
func (g *gate) applyLimits(e jetstream.KeyValueEntry) {
	if e == nil {
		g.once.Do(func() { close(g.ready) })
		return
	}
	var limits kv.Limits
	if e.Operation() == jetstream.KeyValuePut {
		var err error
		if limits, err = kv.DecodeLimits(e.Value()); err != nil {
			g.log.Error("limits_decode", zap.Uint64("revision", e.Revision()), zap.Error(err))
			return // keep the last good limits
		}
	}
	g.setLimits(limits, e.Revision())
}

// setLimits makes limits, read at revision, the gate's table, and hands
// every parked delivery back to try them.
func (g *gate) setLimits(limits kv.Limits, revision uint64) {
	table, ignored := compileFlow(limits)
	if len(ignored) > 0 {
		g.log.Error("limits_ignored", zap.Strings("targets", ignored), zap.Uint64("revision", revision))
	}
	g.table.Store(table)
	var weights groupWeights
	if table != nil {
		weights = table.weights
	}
	g.weightsFunc(weights)
	g.unparkAll() // each tries the new limits
	g.log.Info("limits_changed", zap.Int("limits", len(limits.Limits)), zap.Int("paused", len(limits.Paused)))
}

// await waits until the limits were first read, at most limitsFirstWait.
func (g *gate) await(ctx context.Context) {
	timer := time.NewTimer(limitsFirstWait)
	defer timer.Stop()
	select {
	case <-g.ready:
	case <-ctx.Done():
	case <-timer.C:
		g.log.Warn("limits_slow", zap.Duration("waited", limitsFirstWait))
	}
}

// renewSlots extends every slot held here by the member TTL. A slot whose
// renewal is confirmed is trusted for another TTL (minus the margin) from
// the renewal's send; one the renewal finds gone (it expired, and another
// worker may hold it now) is lost for good; one not renewed for its TTL
// (the write failed, or the worker was frozen) is lost at the end of its
// trust ([slotHold]). Lost slots, and those not yet confirmed, are not
// renewed.
func (g *gate) renewSlots(ctx context.Context) {
	now := time.Now()
	g.mu.Lock()
	held := make(map[string]map[string]*slotHold, len(g.holds))
	for target, hs := range g.holds {
		for holder, h := range hs {
			if !h.holds(now) {
				continue
			}
			if held[target] == nil {
				held[target] = map[string]*slotHold{}
			}
			held[target][holder] = h
		}
	}
	use := g.use
	g.mu.Unlock()
	for target, hs := range held {
		holders := make([]string, 0, len(hs))
		for holder := range hs {
			holders = append(holders, holder)
		}
		rctx, cancel := context.WithTimeout(ctx, opTimeout)
		sent := time.Now()
		lost, err := use.Renew(rctx, target, holders, g.ttl)
		cancel()
		if err != nil {
			g.log.Warn("limit_slots_not_renewed", zap.String("target", target), zap.Error(err))
			continue
		}
		for holder, h := range hs {
			if slices.Contains(lost, holder) {
				h.lose()
				continue
			}
			h.confirm(sent, g.ttl, g.slotMargin())
		}
		if len(lost) > 0 {
			g.log.Warn("limit_slots_lost", zap.String("target", target), zap.Strings("lost", lost))
		}
	}
}

// trackSlot starts tracking a slot of target for holder, before the write
// that takes it: untrusted until that write is confirmed, and released
// ([gate.releaseSlot]) if its outcome is unknown.
func (g *gate) trackSlot(target, holder string) *slotHold {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.holds == nil {
		g.holds = map[string]map[string]*slotHold{}
	}
	if g.holds[target] == nil {
		g.holds[target] = map[string]*slotHold{}
	}
	h := &slotHold{}
	g.holds[target][holder] = h
	return h
}

// untrackSlot stops tracking holder's slot of target.
func (g *gate) untrackSlot(target, holder string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.holds[target], holder)
	if len(g.holds[target]) == 0 {
		delete(g.holds, target)
	}
}

// reportHeldBack tells the observer of a delivery held back (it changes
// nothing).
func (g *gate) reportHeldBack(taskType, tenant, reason string) {
	if g.observer != nil {
		g.observer.TaskHeldBack(taskType, tenant, reason)
	}
}

// watchSlots starts a watch of the slots of every concurrency limit.
func (g *gate) watchSlots(ctx context.Context) (jetstream.KeyWatcher, error) {
	use, err := g.store(ctx)
	if err != nil {
		return nil, err
	}
	return use.WatchSlots(ctx)
}

// flowState is the gate's state of one delivery. Only the slot that holds
// the delivery reads or writes it, but for room (set on receipt) and woken
// (read by the dispatch queue while the delivery is queued).
type flowState struct {
	// room is how many deliveries of its consumer may park here at once:
	// half the consumer's MaxAckPending (0: no bound), so that held-back
	// tasks never take all of its ack pending (limits_aside.go).
	room int
	// park names the limit (its park key) a slot's admission found full:
	// the slot parks the delivery once process returns ([gate.parkHeld]).
	park string
	// parkWait is when, from now, the rate limit it parks for has its
	// next start due (0: it waits for a slot).
	parkWait time.Duration
	// woken is set on a parked delivery handed back to the slots alone (a
	// slot of its limit handed to it or free, or its rate's next start
	// due): it goes before every group's turn, and its admission tries
	// the limits even while others wait parked. A change of the limits
	// hands every parked delivery back not woken ([gate.unparkAll]).
	woken bool
	// handed are the slots handed to a parked delivery by a finished task
	// of its limit (gate_handoff.go), taken under the limits handedUnder;
	// its admission takes them, and whatever drops it before gives them
	// back ([gate.returnHanded]).
	handed      []heldSlot
	handedUnder *flowTable
	// readAhead is its task's record as read when it parked, so that its
	// claim, once it has its slot, is one write, not a read and a write
	// ([runner.readAhead]).
	readAhead *recordRead
}
