package worker

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/nats-io/nats.go/jetstream"
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
	if s.handoffs < maxHandoffs && w.limits.table.Load() == table {
		w.limits.mu.Lock()
		d := w.popParked(s.target)
		w.limits.mu.Unlock()
		if d != nil {
			s.handoffs++
			d.handed = append(d.handed, s)
			d.handedUnder = table
			w.stats.HandedOn.Add(1)
			w.redispatch(d)
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
	w.noteHold(s.target, s.holder, false)
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
	return handed
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
// for wait, if it has room here, else naks it with a delay
// ([Worker.holdBack]).
func (w *Worker) parkOrHoldBack(d *delivery, env *envelope, b boundLimit, wait time.Duration) {
	key := parkKey(b)
	if !w.parkRoom(key) {
		w.holdBack(d, env, wait)
		return
	}
	// Parked rather than naked: it waits here, heartbeated, holding no
	// slot, and tries again when a slot of the limit is given back, when
	// the rate's next start is due, or at the next poll.
	w.stats.Limited.Add(1)
	w.heldBack(env, HeldLimited)
	d.park, d.parkWait = key, wait
}

// parkedFor returns a limit of bound that deliveries wait for, parked
// here.
func (w *Worker) parkedFor(bound []boundLimit) (boundLimit, bool) {
	w.limits.mu.Lock()
	defer w.limits.mu.Unlock()
	for _, b := range bound {
		if (b.limit.Concurrency > 0 && len(w.limits.parked[b.target]) > 0) ||
			(b.limit.Rate > 0 && len(w.limits.parked[rateParkKey(b.target)]) > 0) {
			return b, true
		}
	}
	return boundLimit{}, false
}

// parkRoom reports whether key has room for one more parked delivery
// here: at most maxParked, a bounded number of messages, enough to use the
// whole limit and few enough to leave the consumers' ack-pending room to
// the other tasks.
func (w *Worker) parkRoom(key string) bool {
	w.limits.mu.Lock()
	defer w.limits.mu.Unlock()
	return !w.limits.closed && len(w.limits.parked[key]) < maxParked
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

// unpark hands the oldest delivery parked for target back to the slots,
// unless they yield its slots to the other workers now.
func (w *Worker) unpark(target string) {
	w.limits.mu.Lock()
	var d *delivery
	if !w.yielding(target) {
		d = w.popParked(target)
	}
	w.limits.mu.Unlock()
	if d != nil {
		w.redispatch(d)
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
	if len(q) == 1 {
		delete(w.limits.parked, target)
	} else {
		w.limits.parked[target] = q[1:]
	}
	return d
}

// redispatch queues a parked delivery for the slots again; it holds no
// puller credit (given back when a slot first took it).
func (w *Worker) redispatch(d *delivery) {
	d.from = nil
	d.woken = true
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

// unparkAll hands every parked delivery back to the slots.
func (w *Worker) unparkAll() {
	w.limits.mu.Lock()
	parked := w.limits.parked
	w.limits.parked = nil
	w.limits.mu.Unlock()
	for _, q := range parked {
		for _, d := range q {
			w.redispatch(d)
		}
	}
}

// closeParking naks every parked delivery and parks no more: the slots
// have returned.
func (w *Worker) closeParking() {
	w.limits.mu.Lock()
	parked := w.limits.parked
	w.limits.parked, w.limits.closed = nil, true
	w.limits.wakes = nil
	w.limits.mu.Unlock()
	for _, q := range parked {
		for _, d := range q {
			w.release(d)
		}
	}
}

// holdBack naks a delivery held back by a limit: after wait, or the
// limited delay of its delivery count if longer, plus up to half of it.
func (w *Worker) holdBack(d *delivery, env *envelope, wait time.Duration) {
	w.stats.Limited.Add(1)
	w.heldBack(env, HeldLimited)
	delay := max(wait, limitedFirstDelay<<min(max(env.delivered, 1)-1, 8))
	delay = min(delay, limitedMaxDelay)
	delay += rand.N(delay/2 + 1)
	_ = d.settle(func() error { return d.msg.NakWithDelay(delay) })
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

// slotsChanged wakes, on a change of a limit's slots in AX_LIMITS (another
// worker gave one back, or took one), as many deliveries parked here for
// the limit as it has slots free: each tries to take one.
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
	for range t.concurrency[target] - held {
		w.limits.mu.Lock()
		var d *delivery
		if !w.yielding(target) {
			d = w.popParked(target)
		}
		w.limits.mu.Unlock()
		if d == nil {
			return
		}
		w.redispatch(d)
	}
}
