package worker

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/nats-io/nuid"
	"go.uber.org/zap"
)

// flowTask is what the gate reads of a delivery's task.
type flowTask struct {
	id, typ, tenant, key string
	// exempt: no pause or limit applies (a message that breaks the
	// contract, or a task no handler here takes: it is not run).
	exempt bool
}

// verdictKind is what the gate decided for a delivery it did not admit.
type verdictKind int

const (
	// admitRun: the task may start now, under its ticket (nil when no
	// limit applies).
	admitRun verdictKind = iota
	// admitPaused: its type or tenant is paused (verdict.by): naked with
	// a delay ([pausedDelay]), or moved aside once the pause lasts.
	admitPaused
	// admitParked: it waits parked here for its limit; the slot that holds
	// it parks it once done with it ([gate.parkHeld]).
	admitParked
	// admitStepAside: its limit (verdict.limit) is full, or has no start
	// to give for verdict.wait, and there is no room to park it here: it
	// steps aside into AX_DELAYED, or is naked if it cannot.
	admitStepAside
	// admitHoldBack: the limits could not be checked (or a rate's start
	// is due after verdict.wait): naked with a delay ([gate.limitedNakDelay]).
	admitHoldBack
)

// verdict is the gate's decision on a delivery that may not start now.
type verdict struct {
	kind  verdictKind
	by    string        // admitPaused: the pause, as `ax limit ls` names it
	limit boundLimit    // admitStepAside: the limit that holds it back
	wait  time.Duration // admitStepAside, admitHoldBack: when its rate's next start is due
}

// ticket is what a delivery admitted under the limits holds: the slots
// it took (or was handed), and the rate limits whose start it takes once
// claimed ([ticket.takeStarts]).
type ticket struct {
	g      *gate
	table  *flowTable // the limits its slots were taken under
	holder string     // its holder in AX_LIMITS: of the slots it took and the starts it reserved
	slots  []heldSlot
	rates  []boundLimit // the rate limits whose start it reserved and has not taken
	ended  bool         // its slots were passed on (only the slot running it reads or writes it)
}

// done passes on the slots the ticket took, once its handler has
// returned: each to a delivery parked here for its limit ([gate.passSlot])
// or back to AX_LIMITS. Later calls do nothing.
func (tk *ticket) done() {
	if tk == nil || tk.ended {
		return
	}
	tk.ended = true
	for _, s := range tk.slots {
		tk.g.passSlot(tk.table, s)
	}
	tk.unreserve()
}

// unreserve drops the starts the ticket reserved and did not take.
func (tk *ticket) unreserve() {
	if len(tk.rates) == 0 {
		return
	}
	ctx := tk.g.finalCtx()
	use, err := tk.g.store(ctx)
	for _, b := range tk.rates {
		if err == nil {
			err = use.Unreserve(ctx, b.target, tk.holder)
		}
		if err != nil {
			tk.g.log.Warn("limit_unreserve_failed", zap.String("target", b.target), zap.Error(err))
		}
	}
	tk.rates = nil
}

// abort gives the ticket's slots back to AX_LIMITS (it was not admitted
// after all).
func (tk *ticket) abort() {
	tk.ended = true
	for _, s := range tk.slots {
		tk.g.giveBack(s)
	}
	tk.unreserve()
}

// takeStarts takes, for a claimed task, a start of each rate limit its
// ticket names. If one has none left (another worker took it since the
// admission), it returns that limit and when its next start is due, or
// the error that kept it from knowing; the task is then to be put back.
func (tk *ticket) takeStarts() (over boundLimit, wait time.Duration, err error) {
	if tk == nil || len(tk.rates) == 0 {
		return boundLimit{}, 0, nil
	}
	ctx := tk.g.finalCtx()
	use, err := tk.g.store(ctx)
	for len(tk.rates) > 0 && err == nil && wait == 0 {
		over = tk.rates[0]
		wait, err = use.Take(ctx, over.target, over.limit.Rate, over.limit.Burst, tk.holder)
		tk.rates = tk.rates[1:] // its reservation dropped either way
	}
	if err == nil && wait == 0 {
		return boundLimit{}, 0, nil
	}
	return over, wait, err
}

// admit decides, before the claim, whether d's task may start under the
// mesh's pauses and limits: not while its type or tenant is paused; only
// with a slot of each concurrency limit it falls under, which it takes (or
// was handed, [gate.passSlot]); only while each rate limit has a start to
// give (taken after the claim, [ticket.takeStarts], so that the start is
// counted when the handler is about to run). If it may, it returns its
// ticket (nil if no limit applies) and a verdict of admitRun; if not, the
// verdict says what is to be done with d.
func (g *gate) admit(d *delivery, task flowTask) (*ticket, verdict) {
	t := g.table.Load()
	handed := g.takeHanded(d, t)
	if t == nil || task.exempt {
		g.giveBackAll(handed)
		return nil, verdict{}
	}
	if by := t.pausedBy(task.typ, task.tenant); by != "" {
		g.giveBackAll(handed)
		g.stats.Paused.Add(1)
		return nil, verdict{kind: admitPaused, by: by}
	}
	bound := t.match(task.typ, task.tenant, task.key)
	if len(bound) == 0 {
		g.giveBackAll(handed)
		return nil, verdict{}
	}
	woken := d.flow.woken
	d.flow.woken = false
	var taking []string // the concurrency limits whose slot this delivery alone takes here now
	if !woken {
		// Deliveries parked here wait for a full limit of this task's, or
		// another delivery is taking a slot of it: it joins them (or waits
		// in its bucket) without asking, so that a backlog of a full limit
		// costs no round trip per delivery, and a burst of deliveries does
		// not race itself for the same slots.
		var full boundLimit
		var ok bool
		if full, taking, ok = g.waitingFor(bound); ok {
			g.giveBackAll(handed)
			return nil, g.park(d, task, full, 0)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	tk, full, wait, err := g.takeLimits(ctx, t, bound, handed)
	g.tookSlots(taking, tk != nil)
	if err != nil {
		g.log.Warn("limit_check_failed", zap.String("task_id", task.id), zap.Error(err))
	}
	if tk != nil {
		g.noteStarts(bound)
		return tk, verdict{}
	}
	if err == nil && full.target != "" {
		return nil, g.park(d, task, full, wait)
	}
	return nil, verdict{kind: admitHoldBack, wait: wait}
}

// takeLimits takes a slot of each concurrency limit of bound (using the
// slots handed to the delivery, taken under t, where it has one) and
// checks that each rate limit has a start to give. It returns the ticket,
// or nil and the concurrency limit found full, or how long to wait for a
// rate (the slots it took or was handed already given back).
func (g *gate) takeLimits(ctx context.Context, t *flowTable, bound []boundLimit, handed []heldSlot) (*ticket, boundLimit, time.Duration, error) {
	use, err := g.store(ctx)
	if err != nil {
		g.giveBackAll(handed)
		return nil, boundLimit{}, 0, err
	}
	tk := &ticket{g: g, table: t, holder: g.id + "/" + nuid.Next()}
	for _, b := range bound {
		if b.limit.Concurrency == 0 {
			continue
		}
		if i := slices.IndexFunc(handed, func(s heldSlot) bool { return s.target == b.target }); i >= 0 {
			tk.slots = append(tk.slots, handed[i])
			handed = slices.Delete(handed, i, i+1)
		}
	}
	g.giveBackAll(handed) // none unless the task's limits changed: the table did not
	holder := tk.holder
	for _, b := range bound {
		if b.limit.Concurrency == 0 || slices.ContainsFunc(tk.slots, func(s heldSlot) bool { return s.target == b.target }) {
			continue
		}
		hold := g.trackSlot(b.target, holder)
		tk.slots = append(tk.slots, heldSlot{target: b.target, holder: holder, hold: hold})
		sent := time.Now()
		got, err := use.Acquire(ctx, b.target, b.limit.Concurrency, holder, g.ttl)
		if err != nil || !got {
			if err == nil { // definitely not held (an error may hide a write that landed)
				tk.slots = tk.slots[:len(tk.slots)-1]
				g.untrackSlot(b.target, holder)
			}
			tk.abort()
			return nil, b, 0, err
		}
		hold.confirm(sent, g.ttl, g.slotMargin())
	}
	for _, b := range bound {
		if b.limit.Rate == 0 {
			continue
		}
		wait, err := use.Reserve(ctx, b.target, b.limit.Rate, b.limit.Burst, holder, reservedFor)
		if err != nil || wait > 0 {
			tk.abort()
			return nil, b, wait, err
		}
		tk.rates = append(tk.rates, b)
		// A start reserved: the next delivery waiting here for the rate
		// tries for another (the burst, or a token due meanwhile).
		g.unpark(rateParkKey(b.target))
	}
	return tk, boundLimit{}, 0, nil
}

// park parks d for the limit b, full or without a start to give for
// wait, if it has room here (the slot that holds d parks it once done
// with it, [gate.parkHeld]); else d is to step aside into AX_DELAYED.
func (g *gate) park(d *delivery, task flowTask, b boundLimit, wait time.Duration) verdict {
	key := parkKey(b)
	if !g.reservePark(key, d) {
		return verdict{kind: admitStepAside, limit: b, wait: wait}
	}
	// Parked rather than naked: it waits here, heartbeated, holding no
	// slot, and tries again when a slot of the limit is given back, when
	// the rate's next start is due, or at the next poll.
	g.stats.Limited.Add(1)
	g.reportHeldBack(task.typ, task.tenant, HeldLimited)
	d.flow.park, d.flow.parkWait = key, wait
	return verdict{kind: admitParked}
}

// limitedNakDelay counts a delivery held back by a limit and returns the delay of
// its nak: wait, or the limited delay of its delivery count if longer,
// plus up to half of it.
func (g *gate) limitedNakDelay(task flowTask, delivered uint64, wait time.Duration) time.Duration {
	g.stats.Limited.Add(1)
	g.reportHeldBack(task.typ, task.tenant, HeldLimited)
	delay := max(wait, limitedFirstDelay<<min(max(delivered, 1)-1, 8))
	delay = min(delay, limitedMaxDelay)
	return delay + rand.N(delay/2+1)
}

// pausedDelay is the nak delay of a paused task's delivered-th delivery.
func pausedDelay(delivered uint64) time.Duration {
	return min(pausedFirstDelay<<min(max(delivered, 1)-1, 8), pausedMaxDelay)
}
