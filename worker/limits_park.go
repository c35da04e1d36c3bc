package worker

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"
)

// Parking: a delivery over a full concurrency limit waits on its worker,
// held and heartbeated but out of the slots, until a slot of the limit may
// be free: one given back here (or handed to it), one given back by another
// worker (seen by the watch of AX_LIMITS), or the next poll.

// maxHandoffs bounds how many times in a row a slot passes from a finished
// task straight to a delivery parked for its limit on the same worker,
// without going through AX_LIMITS: then it is given back, and the workers
// whose deliveries wait for the limit may take it, this one too.
const maxHandoffs = 8

// turnYield is how long, after a slot's turn here ended (maxHandoffs), the
// deliveries parked here for its limit leave it to the other workers'
// parked deliveries, which learn of it from the watch of AX_LIMITS within
// a millisecond or two; if none takes it, one parked here does then.
const turnYield = 10 * time.Millisecond

// heldSlot is a concurrency limit's slot held here: its target, its holder
// in AX_LIMITS, and how many times in a row it was handed on here.
type heldSlot struct {
	target   string
	holder   string
	hold     *slotHold // whether it is still trusted
	handoffs int
}

// passSlot passes on slot s, taken under table, of a task whose handler
// has returned: to the oldest delivery parked here for its limit, which
// then starts without a round trip to AX_LIMITS (the slot keeps its holder
// and its expiry, renewed here), while the limits are still those it was
// taken under and it was not handed on maxHandoffs times in a row; else
// back to AX_LIMITS ([Worker.giveBack]). Handing on never adds a slot: the
// slots held here stay as many.
func (w *Worker) passSlot(table *flowTable, s heldSlot) {
	if !s.hold.holds(time.Now()) {
		// Lost (not renewed within its TTL, or found gone): never handed
		// on. Its holder is removed from AX_LIMITS, in case it is still
		// there, and the deliveries parked here take slots afresh.
		w.giveBack(s)
		return
	}
	if s.handoffs < maxHandoffs && w.limits.table.Load() == table {
		w.limits.mu.Lock()
		d := w.popParked(s.target)
		w.limits.mu.Unlock()
		if d != nil {
			s.handoffs++
			d.handed = append(d.handed, s)
			d.handedUnder = table
			w.stats.HandedOn.Add(1)
			w.redispatch(d, true)
			return
		}
	}
	if s.handoffs >= maxHandoffs {
		// Its turn here is over: the deliveries parked here leave the slot
		// to the other workers for turnYield, so that the worker that gave
		// it back does not always win it again.
		w.limits.mu.Lock()
		if w.limits.yields == nil {
			w.limits.yields = map[string]time.Time{}
		}
		w.limits.yields[s.target] = time.Now().Add(turnYield)
		w.wakeAfter(s.target, turnYield)
		w.limits.mu.Unlock()
		w.releaseSlot(s)
		return
	}
	w.giveBack(s)
}

// giveBack removes s's holder from AX_LIMITS and wakes the oldest delivery
// parked here for its limit.
func (w *Worker) giveBack(s heldSlot) {
	w.releaseSlot(s)
	w.unpark(s.target) // the slot given back: the oldest waiting here tries it
}

// releaseSlot removes s's holder from AX_LIMITS.
func (w *Worker) releaseSlot(s heldSlot) {
	w.limits.mu.Lock()
	use := w.limits.use
	w.limits.mu.Unlock()
	if use != nil { // bound before any slot was taken
		ctx, cancel := w.finalCtx()
		if err := use.Release(ctx, s.target, s.holder); err != nil {
			w.log.Warn("limit_release_failed", zap.String("target", s.target), zap.Error(err))
		}
		cancel()
	}
	w.untrackSlot(s.target, s.holder)
}

func (w *Worker) giveBackAll(slots []heldSlot) {
	for _, s := range slots {
		w.giveBack(s)
	}
}

// takeHanded takes from d the slots handed to it, if the limits are still
// t, those they were taken under; else it gives them back and returns
// none.
func (w *Worker) takeHanded(d *delivery, t *flowTable) []heldSlot {
	handed, under := d.handed, d.handedUnder
	d.handed, d.handedUnder = nil, nil
	if len(handed) > 0 && under != t {
		w.giveBackAll(handed)
		return nil
	}
	// A slot lost since it was handed on is given back: the admission
	// takes one afresh.
	now := time.Now()
	kept := handed[:0]
	for _, s := range handed {
		if s.hold.holds(now) {
			kept = append(kept, s)
		} else {
			w.giveBack(s)
		}
	}
	return kept
}

// returnHanded gives back the slots handed to d that its admission did not
// take: d was dropped before it (the worker stopping, its shard moved, its
// claim lapsed, its task in flight here already). Every path that lets go
// of a delivery calls it, so that a handed slot is never left held.
func (w *Worker) returnHanded(d *delivery) {
	if len(d.handed) > 0 {
		handed := d.handed
		d.handed, d.handedUnder = nil, nil
		w.giveBackAll(handed)
	}
}

// rateParkKey is the key in limitState.parked of the deliveries waiting
// for a start of target's rate limit (a target's concurrency limit is
// keyed by the target itself).
func rateParkKey(target string) string { return "rate " + target }

// parkKey is the key in limitState.parked of the deliveries waiting for
// b: its rate's if it has no concurrency limit.
func parkKey(b boundLimit) string {
	if b.limit.Concurrency > 0 {
		return b.target
	}
	return rateParkKey(b.target)
}

// parkOrHoldBack parks d for the limit b, full or without a start to give
// for wait, if it has room here, else steps it aside into AX_DELAYED
// ([Worker.stepAside]).
func (w *Worker) parkOrHoldBack(d *delivery, env *envelope, b boundLimit, wait time.Duration) {
	key := parkKey(b)
	if !w.reservePark(key, d) {
		w.stepAside(d, env, b, wait)
		return
	}
	// Parked rather than naked: it waits here, heartbeated, holding no
	// slot, and tries again when a slot of the limit is given back, when
	// the rate's next start is due, or at the next poll.
	w.stats.Limited.Add(1)
	w.reportHeldBack(env, HeldLimited)
	d.park, d.parkWait = key, wait
}

// waitingFor returns a limit of bound that deliveries parked here wait
// for, or whose slot one is taking here now. If there is none, the caller
// is to take the slots of bound's concurrency limits alone: it returns
// their targets, marked as being taken ([Worker.tookSlots] ends that).
func (w *Worker) waitingFor(bound []boundLimit) (boundLimit, []string, bool) {
	w.limits.mu.Lock()
	defer w.limits.mu.Unlock()
	for _, b := range bound {
		if (b.limit.Concurrency > 0 && (len(w.limits.parked[b.target]) > 0 || w.limits.taking[b.target])) ||
			(b.limit.Rate > 0 && len(w.limits.parked[rateParkKey(b.target)]) > 0) {
			return b, nil, true
		}
	}
	var taking []string
	for _, b := range bound {
		if b.limit.Concurrency > 0 {
			if w.limits.taking == nil {
				w.limits.taking = map[string]bool{}
			}
			w.limits.taking[b.target] = true
			taking = append(taking, b.target)
		}
	}
	return boundLimit{}, taking, false
}

// tookSlots ends the takes of the slots of targets that
// [Worker.waitingFor] marked: the deliveries parked meanwhile take theirs
// now ([Worker.fill]) if the take got a slot (more may be free) or if a
// slot was given back meanwhile.
func (w *Worker) tookSlots(targets []string, got bool) {
	for _, target := range targets {
		w.limits.mu.Lock()
		delete(w.limits.taking, target)
		again := got || w.limits.refill[target]
		delete(w.limits.refill, target)
		w.limits.mu.Unlock()
		if again {
			w.fill(target)
		}
	}
}

// fill takes, in one write to AX_LIMITS, slots of target's concurrency
// limit for the deliveries parked here for it, as many as are free, and
// hands one to each, oldest first: they start as a finished task's slot
// handed on does ([Worker.passSlot]). At most one take of a limit's slots
// is in flight here: asked meanwhile, fill runs again once it ends. It
// does nothing while the deliveries parked here yield the limit's slots to
// the other workers.
func (w *Worker) fill(target string) {
	t := w.limits.table.Load()
	w.limits.mu.Lock()
	defer w.limits.mu.Unlock()
	parked := len(w.limits.parked[target])
	if parked == 0 || w.limits.closed || w.yielding(target) {
		return
	}
	if w.limits.taking[target] {
		if w.limits.refill == nil {
			w.limits.refill = map[string]bool{}
		}
		w.limits.refill[target] = true
		return
	}
	limit := 0
	if t != nil {
		limit = t.concurrency[target]
	}
	if limit == 0 {
		return // no longer a concurrency limit: the change of the limits woke every parked delivery
	}
	if w.limits.taking == nil {
		w.limits.taking = map[string]bool{}
	}
	w.limits.taking[target] = true
	w.loops.Add(1) // before the limits loop ends: it sets closed under mu
	go w.fillSlots(t, target, limit, min(parked, limit))
}

// fillSlots takes up to n slots of target's concurrency limit, taken under
// t, for the deliveries parked here for it; see [Worker.fill].
func (w *Worker) fillSlots(t *flowTable, target string, limit, n int) {
	defer w.loops.Done()
	ctx, cancel := w.finalCtx()
	defer cancel()
	holders := make([]string, n)
	holds := make(map[string]*slotHold, n)
	for i := range holders {
		holders[i] = w.cfg.ID + "/" + nuid.Next()
		holds[holders[i]] = w.trackSlot(target, holders[i])
	}
	use, err := w.limitUse(ctx)
	var got []string
	sent := time.Now()
	if err == nil {
		got, err = use.AcquireSome(ctx, target, limit, holders, w.cfg.MemberTTL)
	}
	if err != nil {
		w.log.Warn("limit_check_failed", zap.String("target", target), zap.Error(err))
		for _, h := range holders { // an error may hide a write that landed
			w.releaseSlot(heldSlot{target: target, holder: h})
		}
		got = nil
	}
	for _, h := range holders {
		switch {
		case err != nil:
		case slices.Contains(got, h):
			holds[h].confirm(sent, w.cfg.MemberTTL, w.slotMargin())
		default:
			w.untrackSlot(target, h) // definitely not held
		}
	}
	w.limits.mu.Lock()
	var ds []*delivery
	for range got {
		d := w.popParked(target)
		if d == nil {
			break
		}
		ds = append(ds, d)
	}
	delete(w.limits.taking, target)
	again := w.limits.refill[target]
	delete(w.limits.refill, target)
	w.limits.mu.Unlock()
	for i, d := range ds {
		d.handed = append(d.handed, heldSlot{target: target, holder: got[i], hold: holds[got[i]]})
		d.handedUnder = t
		w.redispatch(d, true)
	}
	for _, h := range got[len(ds):] { // the deliveries parked here ran out meanwhile
		w.releaseSlot(heldSlot{target: target, holder: h, hold: holds[h]})
	}
	if again {
		w.fill(target)
	}
}

// reservePark reports whether key has room for d, one more delivery
// parked here: at most maxParked for the key, at most d's consumer room
// from its consumer (half its MaxAckPending: the other half is left to the
// consumer's other tasks), and at most the parking room's bytes
// (maxParkedBytes) in all. It reserves d's bytes and its place among its
// consumer's at once, so that the slots admitting deliveries together
// cannot overfill them ([Worker.parkHeld] parks d, or gives them back).
func (w *Worker) reservePark(key string, d *delivery) bool {
	w.limits.mu.Lock()
	defer w.limits.mu.Unlock()
	size := parkedSize(d)
	c := consumerOf(d)
	if w.limits.closed || len(w.limits.parked[key]) >= maxParked || w.limits.bytes+size > w.limits.room ||
		(d.room > 0 && w.limits.byConsumer[c] >= d.room) {
		return false
	}
	w.limits.bytes += size
	if d.room > 0 {
		if w.limits.byConsumer == nil {
			w.limits.byConsumer = map[consumerRef]int{}
		}
		w.limits.byConsumer[c]++
	}
	return true
}

// unreservePark gives back what [Worker.reservePark] reserved for d.
// limits.mu must be held.
func (w *Worker) unreservePark(d *delivery) {
	w.limits.bytes -= parkedSize(d)
	if d.room > 0 {
		c := consumerOf(d)
		if w.limits.byConsumer[c] <= 1 {
			delete(w.limits.byConsumer, c)
		} else {
			w.limits.byConsumer[c]--
		}
	}
}

// consumerRef names a shard consumer: its set, priority and shard.
type consumerRef struct {
	set      *shardSet
	priority int
	shard    int
}

func consumerOf(d *delivery) consumerRef {
	return consumerRef{set: d.set, priority: d.priority, shard: d.shard}
}

// parkedSize is what a parked delivery counts against maxParkedBytes.
func parkedSize(d *delivery) int { return len(d.msg.Data()) }

// unreserveAll gives back what [Worker.reservePark] reserved for the
// deliveries of parked. limits.mu must be held.
func (w *Worker) unreserveAll(parked map[string][]*delivery) {
	for _, q := range parked {
		for _, d := range q {
			w.unreservePark(d)
		}
	}
}

// parkHeld parks d if its admission asked for it (d.park), once process
// has returned; the slot calls it. It reports whether d is still held.
func (w *Worker) parkHeld(d *delivery) bool {
	target := d.park
	if target == "" {
		return false
	}
	d.park = ""
	w.limits.mu.Lock()
	if w.limits.closed {
		w.unreservePark(d)
		w.limits.mu.Unlock()
		w.release(d)
		return true
	}
	if w.limits.parked == nil {
		w.limits.parked = map[string][]*delivery{}
	}
	w.limits.parked[target] = append(w.limits.parked[target], d)
	if d.parkWait > 0 {
		w.wakeAfter(target, d.parkWait)
	}
	d.parkWait = 0
	w.limits.mu.Unlock()
	return true
}

// wakeAfter wakes the oldest delivery parked for key after wait (when the
// next start of its rate limit is due), unless a wake of key is due
// sooner. limits.mu must be held.
func (w *Worker) wakeAfter(key string, wait time.Duration) {
	due := time.Now().Add(wait)
	if at, ok := w.limits.wakes[key]; ok && !at.After(due) {
		return
	}
	if w.limits.wakes == nil {
		w.limits.wakes = map[string]time.Time{}
	}
	w.limits.wakes[key] = due
	time.AfterFunc(wait, func() {
		w.limits.mu.Lock()
		if at, ok := w.limits.wakes[key]; ok && at.Equal(due) {
			delete(w.limits.wakes, key)
		}
		w.limits.mu.Unlock()
		w.unpark(key)
	})
}

// unpark hands the oldest delivery parked for key back to the slots; for
// a concurrency limit it takes the slots free for the deliveries parked
// here ([Worker.fill], which leaves them to the other workers while a turn
// here has just ended).
func (w *Worker) unpark(key string) {
	if t := w.limits.table.Load(); t != nil && t.concurrency[key] > 0 {
		w.fill(key)
		return
	}
	w.limits.mu.Lock()
	d := w.popParked(key)
	w.limits.mu.Unlock()
	if d != nil {
		w.redispatch(d, true)
	}
}

// yielding reports whether the deliveries parked here for target leave
// its slots to the other workers now, its turn here having just ended.
// limits.mu must be held.
func (w *Worker) yielding(target string) bool {
	until, ok := w.limits.yields[target]
	if ok && !time.Now().Before(until) {
		delete(w.limits.yields, target)
		return false
	}
	return ok
}

// popParked takes the oldest delivery parked for target, or nil.
// limits.mu must be held.
func (w *Worker) popParked(target string) *delivery {
	q := w.limits.parked[target]
	if len(q) == 0 {
		return nil
	}
	d := q[0]
	q[0] = nil
	w.unreservePark(d)
	if len(q) == 1 {
		delete(w.limits.parked, target)
	} else {
		w.limits.parked[target] = q[1:]
	}
	return d
}

// redispatch queues a parked delivery for the slots again, woken (see
// [delivery.woken]) or to take its group's turn again ([Worker.unparkAll]);
// it holds no puller credit (given back when a slot first took it).
func (w *Worker) redispatch(d *delivery, woken bool) {
	d.from = nil
	d.woken = woken
	if !w.dispatch.push(d) {
		w.release(d) // the worker is stopping
	}
}

// unparkOldest hands the oldest delivery of each limit back to the slots.
func (w *Worker) unparkOldest() {
	w.limits.mu.Lock()
	targets := make([]string, 0, len(w.limits.parked))
	for t := range w.limits.parked {
		targets = append(targets, t)
	}
	w.limits.mu.Unlock()
	for _, t := range targets {
		w.unpark(t)
	}
}

// unparkAll hands every parked delivery back to the slots, the limits
// having changed. Not woken: each takes its group's turn again, as a new
// delivery does, so that a whole parked backlog does not go before every
// other group's deliveries; and the first of each limit tries the new
// limits for those behind it, which park again without asking if it is
// still full, or take their slots together ([Worker.tookSlots]) if not.
func (w *Worker) unparkAll() {
	w.limits.mu.Lock()
	parked := w.limits.parked
	w.limits.parked = nil
	w.unreserveAll(parked)
	w.limits.mu.Unlock()
	for _, q := range parked {
		for _, d := range q {
			w.redispatch(d, false)
		}
	}
}

// closeParking naks every parked delivery and parks no more: the slots
// have returned.
func (w *Worker) closeParking() {
	w.limits.mu.Lock()
	parked := w.limits.parked
	w.limits.parked, w.limits.closed = nil, true
	w.unreserveAll(parked)
	w.limits.wakes = nil
	w.limits.mu.Unlock()
	for _, q := range parked {
		for _, d := range q {
			w.release(d)
		}
	}
}

// readAhead reads the record of d's task when d is to park (d.park set),
// unless it was read at an earlier park: once a slot is handed to d, its
// claim is then one compare-and-set ([Worker.readAheadClaimable]), and the
// limit's slot waits one round trip less for its next task. A failed read
// is left to the claim.
func (w *Worker) readAhead(d *delivery, env *envelope) {
	if d.park == "" || d.readAhead != nil || env.bad != nil || (env.opts.Gen == 0 && !env.recorded) {
		return // a raw publish's record may not exist yet: the claim creates it
	}
	if rec, rev, err := w.store.Get(w.ops.get(), env.ref); err == nil {
		d.readAhead = &recordRead{rec: rec, rev: rev}
	}
}

// readAheadClaimable takes the record read ahead for d, if any, and returns
// it if the claim can start from it: READY or RETRYING, bound to d's
// message, so that all the claim does with it is its compare-and-set to
// RUNNING. Any other state is read again: the claim's other decisions
// (drop, wait) are made on a fresh read only.
func (w *Worker) readAheadClaimable(d *delivery, env *envelope) *recordRead {
	r := d.readAhead
	d.readAhead = nil
	if r == nil || (r.rec.State != kv.StateReady && r.rec.State != kv.StateRetrying) || !r.rec.Names(w.cfg.Names, env.stream, env.seq) {
		return nil
	}
	return r
}

// holdBack naks a delivery held back by a limit: after wait, or the
// limited delay of its delivery count if longer, plus up to half of it.
func (w *Worker) holdBack(d *delivery, env *envelope, wait time.Duration) {
	w.stats.Limited.Add(1)
	w.reportHeldBack(env, HeldLimited)
	delay := max(wait, limitedFirstDelay<<min(max(env.delivered, 1)-1, 8))
	delay = min(delay, limitedMaxDelay)
	delay += rand.N(delay/2 + 1)
	d.nakAfter(delay)
}

// anyParked reports whether deliveries are parked here.
func (w *Worker) anyParked() bool {
	w.limits.mu.Lock()
	defer w.limits.mu.Unlock()
	return len(w.limits.parked) > 0
}

// watchSlots starts a watch of the slots of every concurrency limit.
func (w *Worker) watchSlots(ctx context.Context) (jetstream.KeyWatcher, error) {
	use, err := w.limitUse(ctx)
	if err != nil {
		return nil, err
	}
	return use.WatchSlots(ctx)
}

// slotsChanged takes, on a change of a limit's slots in AX_LIMITS
// (another worker gave one back, or took one) that left some free, those
// free for the deliveries parked here for the limit ([Worker.fill]).
func (w *Worker) slotsChanged(e jetstream.KeyValueEntry) {
	t := w.limits.table.Load()
	if t == nil || e.Operation() != jetstream.KeyValuePut {
		return
	}
	target, held, err := kv.SlotsHeld(e.Value(), time.Now())
	if err != nil {
		w.log.Warn("slots_decode", zap.String("key", e.Key()), zap.Error(err))
		return
	}
	if held < t.concurrency[target] {
		w.fill(target)
	}
}
