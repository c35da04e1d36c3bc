package worker

import (
	"slices"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"
)

// Hand-offs: the slot of a concurrency limit that a finished task held
// goes straight to a delivery parked here for the limit, and the slots
// given back elsewhere are taken for the deliveries parked here, several
// in one write.

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
// back to AX_LIMITS ([gate.giveBack]). Handing on never adds a slot: the
// slots held here stay as many.
func (g *gate) passSlot(table *flowTable, s heldSlot) {
	if !s.hold.holds(time.Now()) {
		// Lost (not renewed within its TTL, or found gone): never handed
		// on. Its holder is removed from AX_LIMITS, in case it is still
		// there, and the deliveries parked here take slots afresh.
		g.giveBack(s)
		return
	}
	if s.handoffs < maxHandoffs && g.table.Load() == table {
		g.mu.Lock()
		d := g.popParked(s.target)
		g.mu.Unlock()
		if d != nil {
			s.handoffs++
			d.flow.handed = append(d.flow.handed, s)
			d.flow.handedUnder = table
			g.stats.HandedOn.Add(1)
			g.redispatch(d, true)
			return
		}
	}
	if s.handoffs >= maxHandoffs {
		// Its turn here is over: the deliveries parked here leave the slot
		// to the other workers for turnYield, so that the worker that gave
		// it back does not always win it again.
		g.mu.Lock()
		if g.yields == nil {
			g.yields = map[string]time.Time{}
		}
		g.yields[s.target] = time.Now().Add(turnYield)
		g.wakeAfter(s.target, turnYield)
		g.mu.Unlock()
		g.releaseSlot(s)
		return
	}
	g.giveBack(s)
}

// giveBack removes s's holder from AX_LIMITS and wakes the oldest delivery
// parked here for its limit.
func (g *gate) giveBack(s heldSlot) {
	g.releaseSlot(s)
	g.unpark(s.target) // the slot given back: the oldest waiting here tries it
}

// releaseSlot removes s's holder from AX_LIMITS.
func (g *gate) releaseSlot(s heldSlot) {
	g.mu.Lock()
	use := g.use
	g.mu.Unlock()
	if use != nil { // bound before any slot was taken
		if err := use.Release(g.finalCtx(), s.target, s.holder); err != nil {
			g.log.Warn("limit_release_failed", zap.String("target", s.target), zap.Error(err))
		}
	}
	g.untrackSlot(s.target, s.holder)
}

func (g *gate) giveBackAll(slots []heldSlot) {
	for _, s := range slots {
		g.giveBack(s)
	}
}

// takeHanded takes from d the slots handed to it, if the limits are still
// t, those they were taken under; else it gives them back and returns
// none.
func (g *gate) takeHanded(d *delivery, t *flowTable) []heldSlot {
	handed, under := d.flow.handed, d.flow.handedUnder
	d.flow.handed, d.flow.handedUnder = nil, nil
	if len(handed) > 0 && under != t {
		g.giveBackAll(handed)
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
			g.giveBack(s)
		}
	}
	return kept
}

// returnHanded gives back the slots handed to d that its admission did not
// take: d was dropped before it (the worker stopping, its shard moved, its
// claim lapsed, its task in flight here already). Every path that lets go
// of a delivery calls it, so that a handed slot is never left held.
func (g *gate) returnHanded(d *delivery) {
	if len(d.flow.handed) > 0 {
		handed := d.flow.handed
		d.flow.handed, d.flow.handedUnder = nil, nil
		g.giveBackAll(handed)
	}
}

// rateParkKey is the key in gate.parked of the deliveries waiting
// for a start of target's rate limit (a target's concurrency limit is
// keyed by the target itself).
func rateParkKey(target string) string { return "rate " + target }

// parkKey is the key in gate.parked of the deliveries waiting for
// b: its rate's if it has no concurrency limit.
func parkKey(b boundLimit) string {
	if b.limit.Concurrency > 0 {
		return b.target
	}
	return rateParkKey(b.target)
}

// waitingFor returns a limit of bound that deliveries parked here wait
// for, or whose slot one is taking here now. If there is none, the caller
// is to take the slots of bound's concurrency limits alone: it returns
// their targets, marked as being taken ([gate.tookSlots] ends that).
func (g *gate) waitingFor(bound []boundLimit) (boundLimit, []string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, b := range bound {
		if (b.limit.Concurrency > 0 && (len(g.parked[b.target]) > 0 || g.taking[b.target])) ||
			(b.limit.Rate > 0 && len(g.parked[rateParkKey(b.target)]) > 0) {
			return b, nil, true
		}
	}
	var taking []string
	for _, b := range bound {
		if b.limit.Concurrency > 0 {
			if g.taking == nil {
				g.taking = map[string]bool{}
			}
			g.taking[b.target] = true
			taking = append(taking, b.target)
		}
	}
	return boundLimit{}, taking, false
}

// tookSlots ends the takes of the slots of targets that
// [gate.waitingFor] marked: the deliveries parked meanwhile take theirs
// now ([gate.fill]) if the take got a slot (more may be free) or if a
// slot was given back meanwhile.
func (g *gate) tookSlots(targets []string, got bool) {
	for _, target := range targets {
		g.mu.Lock()
		delete(g.taking, target)
		again := got || g.refill[target]
		delete(g.refill, target)
		g.mu.Unlock()
		if again {
			g.fill(target)
		}
	}
}

// fill takes, in one write to AX_LIMITS, slots of target's concurrency
// limit for the deliveries parked here for it, as many as are free, and
// hands one to each, oldest first: they start as a finished task's slot
// handed on does ([gate.passSlot]). At most one take of a limit's slots
// is in flight here: asked meanwhile, fill runs again once it ends. It
// does nothing while the deliveries parked here yield the limit's slots to
// the other workers.
func (g *gate) fill(target string) {
	t := g.table.Load()
	g.mu.Lock()
	defer g.mu.Unlock()
	parked := len(g.parked[target])
	if parked == 0 || g.closed || g.yielding(target) {
		return
	}
	if g.taking[target] {
		if g.refill == nil {
			g.refill = map[string]bool{}
		}
		g.refill[target] = true
		return
	}
	limit := 0
	if t != nil {
		limit = t.concurrency[target]
	}
	if limit == 0 {
		return // no longer a concurrency limit: the change of the limits woke every parked delivery
	}
	if g.taking == nil {
		g.taking = map[string]bool{}
	}
	g.taking[target] = true
	g.fills.Add(1) // before the gate's loop ends: it sets closed under mu
	go g.fillSlots(t, target, limit, min(parked, limit))
}

// fillSlots takes up to n slots of target's concurrency limit, taken under
// t, for the deliveries parked here for it; see [gate.fill].
func (g *gate) fillSlots(t *flowTable, target string, limit, n int) {
	defer g.fills.Done()
	ctx := g.finalCtx()
	holders := make([]string, n)
	holds := make(map[string]*slotHold, n)
	for i := range holders {
		holders[i] = g.id + "/" + nuid.Next()
		holds[holders[i]] = g.trackSlot(target, holders[i])
	}
	use, err := g.store(ctx)
	var got []string
	sent := time.Now()
	if err == nil {
		got, err = use.AcquireSome(ctx, target, limit, holders, g.ttl)
	}
	if err != nil {
		g.log.Warn("limit_check_failed", zap.String("target", target), zap.Error(err))
		for _, h := range holders { // an error may hide a write that landed
			g.releaseSlot(heldSlot{target: target, holder: h})
		}
		got = nil
	}
	for _, h := range holders {
		switch {
		case err != nil:
		case slices.Contains(got, h):
			holds[h].confirm(sent, g.ttl, g.slotMargin())
		default:
			g.untrackSlot(target, h) // definitely not held
		}
	}
	g.mu.Lock()
	var ds []*delivery
	for range got {
		d := g.popParked(target)
		if d == nil {
			break
		}
		ds = append(ds, d)
	}
	delete(g.taking, target)
	again := g.refill[target]
	delete(g.refill, target)
	g.mu.Unlock()
	for i, d := range ds {
		d.flow.handed = append(d.flow.handed, heldSlot{target: target, holder: got[i], hold: holds[got[i]]})
		d.flow.handedUnder = t
		g.redispatch(d, true)
	}
	for _, h := range got[len(ds):] { // the deliveries parked here ran out meanwhile
		g.releaseSlot(heldSlot{target: target, holder: h, hold: holds[h]})
	}
	if again {
		g.fill(target)
	}
}

// slotsChanged takes, on a change of a limit's slots in AX_LIMITS
// (another worker gave one back, or took one) that left some free, those
// free for the deliveries parked here for the limit ([gate.fill]).
func (g *gate) slotsChanged(e jetstream.KeyValueEntry) {
	t := g.table.Load()
	if t == nil || e.Operation() != jetstream.KeyValuePut {
		return
	}
	target, held, err := kv.SlotsHeld(e.Value(), time.Now())
	if err != nil {
		g.log.Warn("slots_decode", zap.String("key", e.Key()), zap.Error(err))
		return
	}
	if held < t.concurrency[target] {
		g.fill(target)
	}
}
