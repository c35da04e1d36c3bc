package worker

import (
	"math/rand/v2"
	"time"
)

// Parking: a delivery over a full concurrency limit waits on its worker,
// held and heartbeated but out of the slots, until a slot of the limit may
// be free: one given back here (or handed to it), one given back by another
// worker (seen by the watch of AX_LIMITS), or the next poll.

// reservePark reports whether key has room for d, one more delivery
// parked here: at most maxParked for the key, at most d's consumer room
// from its consumer (half its MaxAckPending: the other half is left to the
// consumer's other tasks), and at most the parking room's bytes
// (maxParkedBytes) in all. It reserves d's bytes and its place among its
// consumer's at once, so that the slots admitting deliveries together
// cannot overfill them ([gate.parkHeld] parks d, or gives them back).
func (g *gate) reservePark(key string, d *delivery) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	size := parkedSize(d)
	c := consumerOf(d)
	if g.closed || len(g.parked[key]) >= maxParked || g.bytes+size > g.room ||
		(d.flow.room > 0 && g.byConsumer[c] >= d.flow.room) {
		return false
	}
	g.bytes += size
	if d.flow.room > 0 {
		if g.byConsumer == nil {
			g.byConsumer = map[consumerRef]int{}
		}
		g.byConsumer[c]++
	}
	return true
}

// unreservePark gives back what [gate.reservePark] reserved for d.
// limits.mu must be held.
func (g *gate) unreservePark(d *delivery) {
	g.bytes -= parkedSize(d)
	if d.flow.room > 0 {
		c := consumerOf(d)
		if g.byConsumer[c] <= 1 {
			delete(g.byConsumer, c)
		} else {
			g.byConsumer[c]--
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

// unreserveAll gives back what [gate.reservePark] reserved for the
// deliveries of parked. limits.mu must be held.
func (g *gate) unreserveAll(parked map[string][]*delivery) {
	for _, q := range parked {
		for _, d := range q {
			g.unreservePark(d)
		}
	}
}

// parkHeld parks d if its admission asked for it (d.flow.park), once process
// has returned; the slot calls it. It reports whether d is still held.
func (g *gate) parkHeld(d *delivery) bool {
	target := d.flow.park
	if target == "" {
		return false
	}
	d.flow.park = ""
	g.mu.Lock()
	if g.closed {
		g.unreservePark(d)
		g.mu.Unlock()
		g.dropFunc(d)
		return true
	}
	if g.parked == nil {
		g.parked = map[string][]*delivery{}
	}
	g.parked[target] = append(g.parked[target], d)
	if d.flow.parkWait > 0 {
		g.wakeAfter(target, d.flow.parkWait)
	}
	d.flow.parkWait = 0
	g.mu.Unlock()
	return true
}

// wakeAfter wakes the oldest delivery parked for key after wait (when the
// next start of its rate limit is due), unless a wake of key is due
// sooner. limits.mu must be held.
func (g *gate) wakeAfter(key string, wait time.Duration) {
	due := time.Now().Add(wait)
	if at, ok := g.wakes[key]; ok && !at.After(due) {
		return
	}
	if g.wakes == nil {
		g.wakes = map[string]time.Time{}
	}
	g.wakes[key] = due
	time.AfterFunc(wait, func() {
		g.mu.Lock()
		if at, ok := g.wakes[key]; ok && at.Equal(due) {
			delete(g.wakes, key)
		}
		g.mu.Unlock()
		g.unpark(key)
	})
}

// unpark hands the oldest delivery parked for key back to the slots; for
// a concurrency limit it takes the slots free for the deliveries parked
// here ([gate.fill], which leaves them to the other workers while a turn
// here has just ended).
func (g *gate) unpark(key string) {
	if t := g.table.Load(); t != nil && t.concurrency[key] > 0 {
		g.fill(key)
		return
	}
	g.mu.Lock()
	d := g.popParked(key)
	g.mu.Unlock()
	if d != nil {
		g.redispatch(d, true)
	}
}

// yielding reports whether the deliveries parked here for target leave
// its slots to the other workers now, its turn here having just ended.
// limits.mu must be held.
func (g *gate) yielding(target string) bool {
	until, ok := g.yields[target]
	if ok && !time.Now().Before(until) {
		delete(g.yields, target)
		return false
	}
	return ok
}

// popParked takes the oldest delivery parked for target, or nil.
// limits.mu must be held.
func (g *gate) popParked(target string) *delivery {
	q := g.parked[target]
	if len(q) == 0 {
		return nil
	}
	d := q[0]
	q[0] = nil
	g.unreservePark(d)
	if len(q) == 1 {
		delete(g.parked, target)
	} else {
		g.parked[target] = q[1:]
	}
	return d
}

// redispatch queues a parked delivery for the slots again, woken (see
// [delivery.woken]) or to take its group's turn again ([gate.unparkAll]);
func (g *gate) redispatch(d *delivery, woken bool) {
	d.flow.woken = woken
	g.wakeFunc(d)
}

// unparkOldest hands the oldest delivery of each limit back to the slots.
func (g *gate) unparkOldest() {
	g.mu.Lock()
	targets := make([]string, 0, len(g.parked))
	for t := range g.parked {
		targets = append(targets, t)
	}
	g.mu.Unlock()
	for _, t := range targets {
		g.unpark(t)
	}
}

// unparkAll hands every parked delivery back to the slots, the limits
// having changed. Not woken: each takes its group's turn again, as a new
// delivery does, so that a whole parked backlog does not go before every
// other group's deliveries; and the first of each limit tries the new
// limits for those behind it, which park again without asking if it is
// still full, or take their slots together ([gate.tookSlots]) if not.
func (g *gate) unparkAll() {
	g.mu.Lock()
	parked := g.parked
	g.parked = nil
	g.unreserveAll(parked)
	g.mu.Unlock()
	for _, q := range parked {
		for _, d := range q {
			g.redispatch(d, false)
		}
	}
}

// closeParking naks every parked delivery and parks no more: the slots
// have returned.
func (g *gate) closeParking() {
	g.mu.Lock()
	parked := g.parked
	g.parked, g.closed = nil, true
	g.unreserveAll(parked)
	g.wakes = nil
	g.mu.Unlock()
	for _, q := range parked {
		for _, d := range q {
			g.dropFunc(d)
		}
	}
}

// anyParked reports whether deliveries are parked here.
func (g *gate) anyParked() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.parked) > 0
}

// asideWait is how long a task held back by b waits in AX_DELAYED when it
// steps aside, having stepped aside before times: the time the deliveries
// parked here for b take to start, at the rate b's tasks were admitted here
// lately (for a rate limit, at most its rate), plus up to a quarter of it
// at random, within asideMin and asideMax. With no start of b seen here
// yet, asideFirst doubled for each time before.
func (g *gate) asideWait(b boundLimit, before int) time.Duration {
	key := parkKey(b)
	g.mu.Lock()
	parked := len(g.parked[key])
	interval := time.Duration(0)
	if m := g.starts[b.target]; m != nil {
		interval = m.interval
	}
	g.mu.Unlock()
	if b.limit.Rate > 0 {
		interval = max(interval, time.Duration(float64(time.Second)/b.limit.Rate))
	}
	d := asideFirst << min(before, 16)
	if interval > 0 {
		d = time.Duration(parked+1) * interval
	}
	d = min(max(d, asideMin), asideMax)
	return d + rand.N(d/4+1)
}

// startMeter follows how often a limit's tasks are admitted on a worker:
// a moving average of the time between two admissions.
type startMeter struct {
	last     time.Time
	interval time.Duration
}

// noteStarts notes an admission under each limit of bound.
func (g *gate) noteStarts(bound []boundLimit) {
	now := time.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, b := range bound {
		if b.limit.Concurrency == 0 && b.limit.Rate == 0 {
			continue
		}
		if g.starts == nil {
			g.starts = map[string]*startMeter{}
		}
		m := g.starts[b.target]
		if m == nil {
			g.starts[b.target] = &startMeter{last: now}
			continue
		}
		gap := min(now.Sub(m.last), asideMax) // an idle hour says little of the next seconds
		m.last = now
		if m.interval == 0 {
			m.interval = gap
		} else {
			m.interval = (9*m.interval + gap) / 10
		}
	}
}
