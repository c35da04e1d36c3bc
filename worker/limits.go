package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/kv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"
)

// Flow board: the mesh's pauses and limits ([kv.Limits] in AX_CONTROL)
// are watched by every worker and checked before a task's claim, so that a
// task held back writes nothing and uses none of its attempts: its message
// is naked with a delay and waits in its bucket, and the slot that took it
// takes the next message. With nothing configured the check reads one
// pointer and does no I/O.
const (
	// limitedPoll is how often a worker tries again to take slots for the
	// deliveries parked for each concurrency limit, and the oldest parked
	// for each rate limit (besides when a slot of the limit is given back,
	// here or elsewhere).
	limitedPoll = 50 * time.Millisecond
	// pausedFirstDelay is the nak delay of a paused task's first
	// delivery; it doubles with each delivery up to pausedMaxDelay, which
	// bounds how long a resumed task waits to start.
	pausedFirstDelay = 500 * time.Millisecond
	pausedMaxDelay   = 5 * time.Second
	// limitedFirstDelay is the nak delay of a task over a limit; it
	// doubles with each delivery up to limitedMaxDelay (plus up to half
	// of it at random, so that waiting tasks spread out).
	limitedFirstDelay = 50 * time.Millisecond
	limitedMaxDelay   = time.Second
	// limitsRetry is how long the watch of the limits waits after a
	// failure before it watches again.
	limitsRetry = time.Second
	// limitsFirstWait bounds how long Start waits for the limits.
	limitsFirstWait = 5 * time.Second
	// reservedFor is how long a start of a rate limit stays reserved
	// for a task being claimed (it is taken, or dropped, as soon as the
	// claim is decided).
	reservedFor = 5 * time.Second
	// maxParked bounds the deliveries a worker parks per limit, and
	// maxParkedBytes their messages' bytes, all limits together. A
	// delivery beyond them is naked, which frees nothing on the server (a
	// naked message stays in its consumer's ack pending) but takes a
	// delivery and a nak per retry: parking more costs memory only.
	maxParked      = 1024
	maxParkedBytes = 64 << 20
)

// ActionRateLimited is the trail action of a claimed task put back READY,
// its attempt not counted, because another worker took the last start its
// rate limit had to give between its admission and its claim.
const ActionRateLimited = "rate_limited"

// ActionSlotLost is the trail action of a task put back READY, its attempt
// not counted, because a slot of a concurrency limit it was to start or
// ran on was lost ([ErrLimitSlotLost]).
const ActionSlotLost = "limit_slot_lost"

// Reasons a task is held back, as a [HoldObserver] hears them.
const (
	HeldPaused  = "paused"
	HeldLimited = "limited"
	// HeldSteppedAside is a delivery held back by a limit that its worker
	// had no room to park: moved to AX_DELAYED for a while.
	HeldSteppedAside = "stepped_aside"
)

// HoldObserver, when the [Config.Observer] implements it too, hears about
// every delivery held back by a pause or a limit (reason [HeldPaused],
// [HeldLimited] or [HeldSteppedAside]). It must not block.
type HoldObserver interface {
	TaskHeldBack(taskType, tenant, reason string)
}

// reportHeldBack tells the observer of a delivery held back (it changes
// nothing: [Worker.holdBack] naks).
func (w *Worker) reportHeldBack(env *envelope, reason string) {
	if o, ok := w.cfg.Observer.(HoldObserver); ok {
		o.TaskHeldBack(env.stored.Type, env.stored.Tenant, reason)
	}
}

// errWatchClosed means nats.go closed the watch of the limits.
var errWatchClosed = errors.New("watch limits: closed")

// flowTable is a worker's compiled view of [kv.Limits].
type flowTable struct {
	pausedTypes   map[string]bool
	pausedTenants map[string]bool
	types         map[string]kv.Limit // by task type
	tenants       map[string]kv.Limit // by tenant
	keys          []keyLimit
	concurrency   map[string]int // by target: its concurrency limit, if any
	weights       groupWeights   // the tenants' and the types' shares of a turn
}

type keyLimit struct {
	pattern string
	limit   kv.Limit
}

// boundLimit is a limit that applies to a task, named by its target.
type boundLimit struct {
	target string
	limit  kv.Limit
}

// compileFlow compiles l; it returns the targets it ignores (not a task
// type, tenant:NAME or key:PATTERN, or a limit that is not valid), which
// only a value written by hand can hold.
func compileFlow(l kv.Limits) (*flowTable, []string) {
	if l.Empty() {
		return nil, nil
	}
	t := &flowTable{pausedTypes: map[string]bool{}, pausedTenants: map[string]bool{},
		types: map[string]kv.Limit{}, tenants: map[string]kv.Limit{}, concurrency: map[string]int{},
		weights: groupWeights{tenants: map[string]int{}, types: map[string]int{}}}
	var ignored []string
	for target := range l.Paused {
		kind, name, err := kv.ParseTarget(target, true)
		switch {
		case err != nil:
			ignored = append(ignored, "paused "+target)
		case kind == "tenant":
			t.pausedTenants[name] = true
		default:
			t.pausedTypes[name] = true
		}
	}
	for _, target := range l.Targets() {
		limit := l.Limits[target]
		kind, name, err := kv.ParseTarget(target, false)
		if err != nil || limit.ValidateFor(kind) != nil {
			ignored = append(ignored, target)
			continue
		}
		switch {
		case limit.Weight > 0 && kind == "tenant":
			t.weights.tenants[name] = limit.Weight
		case limit.Weight > 0:
			t.weights.types[name] = limit.Weight
		}
		if !limit.Bounds() {
			continue // a weight alone: no admission
		}
		if limit.Concurrency > 0 {
			t.concurrency[target] = limit.Concurrency
		}
		switch kind {
		case "tenant":
			t.tenants[name] = limit
		case "key":
			t.keys = append(t.keys, keyLimit{pattern: name, limit: limit})
		default:
			t.types[name] = limit
		}
	}
	return t, ignored
}

func (t *flowTable) paused(taskType, tenant string) bool {
	return t.pausedBy(taskType, tenant) != ""
}

// pausedBy names the pause that holds a task of taskType and tenant back,
// as `ax limit ls` names it (the type, or "tenant:" and the tenant), or "".
func (t *flowTable) pausedBy(taskType, tenant string) string {
	switch {
	case t.pausedTypes[taskType]:
		return taskType
	case t.pausedTenants[tenant]:
		return "tenant:" + tenant
	}
	return ""
}

// match returns the limits that apply to a task, in a fixed order.
func (t *flowTable) match(taskType, tenant, key string) []boundLimit {
	var out []boundLimit
	if l, ok := t.types[taskType]; ok {
		out = append(out, boundLimit{target: taskType, limit: l})
	}
	if l, ok := t.tenants[tenant]; ok {
		out = append(out, boundLimit{target: kv.TenantTargetPrefix + tenant, limit: l})
	}
	for _, k := range t.keys {
		if kv.MatchKey(k.pattern, key) {
			out = append(out, boundLimit{target: kv.KeyTargetPrefix + k.pattern, limit: k.limit})
		}
	}
	return out
}

// limitState is a worker's flow board state.
type limitState struct {
	table atomic.Pointer[flowTable] // nil: nothing paused or limited
	ready chan struct{}             // closed once the limits were first read
	once  sync.Once
	// abort cancels the limits loop's requests: called when Start fails,
	// so that the stop that follows does not wait out a refused one.
	abort context.CancelFunc

	mu         sync.Mutex
	use        *kv.LimitUse                    // bound at first use (mu)
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

// limitUse returns the bound limits bucket.
func (w *Worker) limitUse(ctx context.Context) (*kv.LimitUse, error) {
	w.limits.mu.Lock()
	defer w.limits.mu.Unlock()
	if w.limits.use != nil {
		return w.limits.use, nil
	}
	use, err := kv.NewLimitUse(ctx, w.js, w.cfg.Names)
	if err != nil {
		return nil, err
	}
	w.limits.use = use
	return use, nil
}

// limitsLoop watches the limits in AX_CONTROL, renews the slots held here
// and tries the parked deliveries again, until every slot has returned. A
// failed watch is made again after limitsRetry; renewals go on meanwhile.
func (w *Worker) limitsLoop(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	renew := time.NewTicker(w.cfg.MemberTTL / 3)
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
		case <-w.slotsDone:
			w.closeParking()
			return
		case <-renew.C:
			w.renewSlots(ctx)
		case <-poll.C:
			w.unparkOldest()
			if slotWatch == nil && w.anyParked() {
				var err error
				if slotWatch, err = w.watchSlots(ctx); err != nil {
					w.log.Warn("slots_watch_failed", zap.Error(err))
					continue
				}
				slotUpdates = slotWatch.Updates()
			}
		case e, ok := <-slotUpdates:
			if !ok {
				_ = kv.StopWatch(slotWatch)
				slotWatch, slotUpdates = nil, nil
				w.log.Warn("slots_watch_failed", zap.Error(errWatchClosed))
				continue
			}
			w.slotsChanged(e)
		case <-retry.C:
			var err error
			if watch, err = w.watchLimits(ctx); err != nil {
				w.limits.once.Do(func() { close(w.limits.ready) }) // serve without limits meanwhile
				w.log.Warn("limits_watch_failed", zap.Error(err))
				retry.Reset(limitsRetry)
				continue
			}
			updates = watch.Updates()
		case e, ok := <-updates:
			if !ok {
				stopWatch()
				w.log.Warn("limits_watch_failed", zap.Error(errWatchClosed))
				retry.Reset(limitsRetry)
				continue
			}
			w.applyLimits(e)
		}
	}
}

// watchLimits starts a watch of the limits key.
func (w *Worker) watchLimits(ctx context.Context) (jetstream.KeyWatcher, error) {
	bctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	board, err := control.Open(bctx, w.js, w.cfg.Names)
	if err != nil {
		return nil, fmt.Errorf("bind %s: %w", w.cfg.Names.ControlBucket(), err)
	}
	watch, err := board.Watch(ctx, control.LimitsKey)
	if err != nil {
		return nil, fmt.Errorf("watch %s: %w", control.LimitsKey, err)
	}
	return watch, nil
}

// applyLimits applies an update of the limits key (nil: the watch's
// initial values were delivered).
func (w *Worker) applyLimits(e jetstream.KeyValueEntry) {
	if e == nil {
		w.limits.once.Do(func() { close(w.limits.ready) })
		return
	}
	var limits kv.Limits
	if e.Operation() == jetstream.KeyValuePut {
		var err error
		if limits, err = kv.DecodeLimits(e.Value()); err != nil {
			w.log.Error("limits_decode", zap.Uint64("revision", e.Revision()), zap.Error(err))
			return // keep the last good limits
		}
	}
	table, ignored := compileFlow(limits)
	if len(ignored) > 0 {
		w.log.Error("limits_ignored", zap.Strings("targets", ignored), zap.Uint64("revision", e.Revision()))
	}
	w.limits.table.Store(table)
	var weights groupWeights
	if table != nil {
		weights = table.weights
	}
	w.dispatch.setWeights(weights)
	w.unparkAll() // each tries the new limits
	w.log.Info("limits_changed", zap.Int("limits", len(limits.Limits)), zap.Int("paused", len(limits.Paused)))
}

// awaitLimits waits until the limits were first read, at most
// limitsFirstWait.
func (w *Worker) awaitLimits(ctx context.Context) {
	timer := time.NewTimer(limitsFirstWait)
	defer timer.Stop()
	select {
	case <-w.limits.ready:
	case <-ctx.Done():
	case <-timer.C:
		w.log.Warn("limits_slow", zap.Duration("waited", limitsFirstWait))
	}
}

// renewSlots extends every slot held here by the member TTL. A slot whose
// renewal is confirmed is trusted for another TTL (minus the margin) from
// the renewal's send; one the renewal finds gone (it expired, and another
// worker may hold it now) is lost for good; one not renewed for its TTL
// (the write failed, or the worker was frozen) is lost at the end of its
// trust ([slotHold]). Lost slots, and those not yet confirmed, are not
// renewed.
func (w *Worker) renewSlots(ctx context.Context) {
	now := time.Now()
	w.limits.mu.Lock()
	held := make(map[string]map[string]*slotHold, len(w.limits.holds))
	for target, hs := range w.limits.holds {
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
	use := w.limits.use
	w.limits.mu.Unlock()
	for target, hs := range held {
		holders := make([]string, 0, len(hs))
		for holder := range hs {
			holders = append(holders, holder)
		}
		rctx, cancel := context.WithTimeout(ctx, opTimeout)
		sent := time.Now()
		lost, err := use.Renew(rctx, target, holders, w.cfg.MemberTTL)
		cancel()
		if err != nil {
			w.log.Warn("limit_slots_not_renewed", zap.String("target", target), zap.Error(err))
			continue
		}
		for holder, h := range hs {
			if slices.Contains(lost, holder) {
				h.lose()
				continue
			}
			h.confirm(sent, w.cfg.MemberTTL, w.slotMargin())
		}
		if len(lost) > 0 {
			w.log.Warn("limit_slots_lost", zap.String("target", target), zap.Strings("lost", lost))
		}
	}
}

// trackSlot starts tracking a slot of target for holder, before the write
// that takes it: untrusted until that write is confirmed, and released
// ([Worker.releaseSlot]) if its outcome is unknown.
func (w *Worker) trackSlot(target, holder string) *slotHold {
	w.limits.mu.Lock()
	defer w.limits.mu.Unlock()
	if w.limits.holds == nil {
		w.limits.holds = map[string]map[string]*slotHold{}
	}
	if w.limits.holds[target] == nil {
		w.limits.holds[target] = map[string]*slotHold{}
	}
	h := &slotHold{}
	w.limits.holds[target][holder] = h
	return h
}

// untrackSlot stops tracking holder's slot of target.
func (w *Worker) untrackSlot(target, holder string) {
	w.limits.mu.Lock()
	defer w.limits.mu.Unlock()
	delete(w.limits.holds[target], holder)
	if len(w.limits.holds[target]) == 0 {
		delete(w.limits.holds, target)
	}
}

// admission is what a delivery admitted under the limits holds: the
// slots it took (or was handed), and the rate limits whose start it takes
// once claimed.
type admission struct {
	w      *Worker
	table  *flowTable // the limits its slots were taken under
	holder string     // its holder in AX_LIMITS: of the slots it took and the starts it reserved
	slots  []heldSlot
	rates  []boundLimit // the rate limits whose start it reserved and has not taken
	ended  bool         // its slots were passed on (only the slot running it reads or writes it)
}

// done passes on the slots the admission took, once its handler has
// returned: each to a delivery parked here for its limit ([Worker.passSlot])
// or back to AX_LIMITS. Later calls do nothing.
func (a *admission) done() {
	if a == nil || a.ended {
		return
	}
	a.ended = true
	for _, s := range a.slots {
		a.w.passSlot(a.table, s)
	}
	a.unreserve()
}

// unreserve drops the starts the admission reserved and did not take.
func (a *admission) unreserve() {
	if len(a.rates) == 0 {
		return
	}
	ctx, cancel := a.w.finalCtx()
	defer cancel()
	use, err := a.w.limitUse(ctx)
	for _, b := range a.rates {
		if err == nil {
			err = use.Unreserve(ctx, b.target, a.holder)
		}
		if err != nil {
			a.w.log.Warn("limit_unreserve_failed", zap.String("target", b.target), zap.Error(err))
		}
	}
	a.rates = nil
}

// abort gives the admission's slots back to AX_LIMITS (it was not
// admitted after all).
func (a *admission) abort() {
	a.ended = true
	for _, s := range a.slots {
		a.w.giveBack(s)
	}
	a.unreserve()
}

// admit decides, before the claim, whether a delivery's task may start
// under the mesh's pauses and limits: not while its type or tenant is
// paused; only with a slot of each concurrency limit it falls under, which
// it takes (or was handed, [Worker.passSlot]); only while each rate limit
// has a start to give (taken after the claim, [Worker.startRated], so that
// the start is counted when the handler is about to run). If not, it parks
// the delivery or naks it with a delay and reports false.
func (w *Worker) admit(d *delivery, env *envelope) (*admission, bool) {
	t := w.limits.table.Load()
	handed := w.takeHanded(d, t)
	if t == nil || env.bad != nil || env.unhandled {
		w.giveBackAll(handed)
		return nil, true
	}
	s := env.stored
	if by := t.pausedBy(s.Type, s.Tenant); by != "" {
		w.giveBackAll(handed)
		w.stats.Paused.Add(1)
		if w.pauseAside(d, env, by) {
			return nil, false
		}
		w.reportHeldBack(env, HeldPaused)
		delay := min(pausedFirstDelay<<min(max(env.delivered, 1)-1, 8), pausedMaxDelay)
		d.nakAfter(delay)
		return nil, false
	}
	bound := t.match(s.Type, s.Tenant, s.Key)
	if len(bound) == 0 {
		w.giveBackAll(handed)
		return nil, true
	}
	woken := d.woken
	d.woken = false
	var taking []string // the concurrency limits whose slot this delivery alone takes here now
	if !woken {
		// Deliveries parked here wait for a full limit of this task's, or
		// another delivery is taking a slot of it: it joins them (or waits
		// in its bucket) without asking, so that a backlog of a full limit
		// costs no round trip per delivery, and a burst of deliveries does
		// not race itself for the same slots.
		var full boundLimit
		var ok bool
		if full, taking, ok = w.waitingFor(bound); ok {
			w.giveBackAll(handed)
			w.parkOrHoldBack(d, env, full, 0)
			w.readAhead(d, env)
			return nil, false
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	adm, full, wait, err := w.takeLimits(ctx, t, bound, handed)
	w.tookSlots(taking, adm != nil)
	if err != nil {
		w.log.Warn("limit_check_failed", zap.String("task_id", env.id), zap.Error(err))
	}
	if adm != nil {
		w.noteStarts(bound)
		return adm, true
	}
	if err == nil && full.target != "" {
		w.parkOrHoldBack(d, env, full, wait)
		w.readAhead(d, env)
		return nil, false
	}
	w.holdBack(d, env, wait)
	return nil, false
}

// takeLimits takes a slot of each concurrency limit of bound (using the
// slots handed to the delivery, taken under t, where it has one) and
// checks that each rate limit has a start to give. It returns the
// admission, or nil and the concurrency limit found full, or how long to
// wait for a rate (the slots it took or was handed already given back).
func (w *Worker) takeLimits(ctx context.Context, t *flowTable, bound []boundLimit, handed []heldSlot) (*admission, boundLimit, time.Duration, error) {
	use, err := w.limitUse(ctx)
	if err != nil {
		w.giveBackAll(handed)
		return nil, boundLimit{}, 0, err
	}
	adm := &admission{w: w, table: t, holder: w.cfg.ID + "/" + nuid.Next()}
	for _, b := range bound {
		if b.limit.Concurrency == 0 {
			continue
		}
		if i := slices.IndexFunc(handed, func(s heldSlot) bool { return s.target == b.target }); i >= 0 {
			adm.slots = append(adm.slots, handed[i])
			handed = slices.Delete(handed, i, i+1)
		}
	}
	w.giveBackAll(handed) // none unless the task's limits changed: the table did not
	holder := adm.holder
	for _, b := range bound {
		if b.limit.Concurrency == 0 || slices.ContainsFunc(adm.slots, func(s heldSlot) bool { return s.target == b.target }) {
			continue
		}
		hold := w.trackSlot(b.target, holder)
		adm.slots = append(adm.slots, heldSlot{target: b.target, holder: holder, hold: hold})
		sent := time.Now()
		got, err := use.Acquire(ctx, b.target, b.limit.Concurrency, holder, w.cfg.MemberTTL)
		if err != nil || !got {
			if err == nil { // definitely not held (an error may hide a write that landed)
				adm.slots = adm.slots[:len(adm.slots)-1]
				w.untrackSlot(b.target, holder)
			}
			adm.abort()
			return nil, b, 0, err
		}
		hold.confirm(sent, w.cfg.MemberTTL, w.slotMargin())
	}
	for _, b := range bound {
		if b.limit.Rate == 0 {
			continue
		}
		wait, err := use.Reserve(ctx, b.target, b.limit.Rate, b.limit.Burst, holder, reservedFor)
		if err != nil || wait > 0 {
			adm.abort()
			return nil, b, wait, err
		}
		adm.rates = append(adm.rates, b)
		// A start reserved: the next delivery waiting here for the rate
		// tries for another (the burst, or a token due meanwhile).
		w.unpark(rateParkKey(b.target))
	}
	return adm, boundLimit{}, 0, nil
}

// startRated takes, for a claimed task, a start of each rate limit its
// admission names. If one has none left (another worker took it since
// the admission), the task is put back READY, its attempt not counted,
// and its message naked with a delay; it reports false.
func (w *Worker) startRated(adm *admission, d *delivery, env *envelope, rec *kv.Record, rev uint64) bool {
	if adm == nil || len(adm.rates) == 0 {
		return true
	}
	ctx, cancel := w.finalCtx()
	defer cancel()
	use, err := w.limitUse(ctx)
	var wait time.Duration
	var over boundLimit // the rate limit that had no start
	for len(adm.rates) > 0 && err == nil && wait == 0 {
		over = adm.rates[0]
		wait, err = use.Take(ctx, over.target, over.limit.Rate, over.limit.Burst, adm.holder)
		adm.rates = adm.rates[1:] // its reservation dropped either way
	}
	if err == nil && wait == 0 {
		return true
	}
	takeErr := err
	if takeErr != nil {
		w.log.Warn("limit_check_failed", zap.String("task_id", rec.ID), zap.Error(takeErr))
	}
	if w.fenced(d, env) {
		return false
	}
	_, _, err = w.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Worker: w.cfg.ID, Action: ActionRateLimited}, func(r *kv.Record) error {
		r.Attempt--
		return nil
	})
	if err != nil {
		w.log.Warn("put_back_failed", zap.String("task_id", rec.ID), zap.Error(err))
		w.settleFailedWrite(d, env, err)
		return false
	}
	if takeErr != nil {
		// The rate's bucket could not be read or written: naked with a
		// delay (a limit is never exceeded for want of a check), not
		// parked for a start that may never be seen.
		w.holdBack(d, env, wait)
		return false
	}
	w.parkOrHoldBack(d, env, over, wait)
	return false
}
