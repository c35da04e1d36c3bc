package worker

import (
	"context"
	"sync"
	"time"
)

// A slot of a concurrency limit is held in AX_LIMITS until an expiry that
// the worker renews (every MemberTTL/3); another worker drops an expired
// slot and takes it. A worker that was frozen, or could not reach the
// server, for longer than its slots' TTL has lost them, whatever it
// believes. So the worker trusts a slot only as a [Lease] is trusted: from
// the send time of the last acquire or renewal that AX_LIMITS confirmed,
// for the TTL minus a margin, on the monotonic clock (which runs on while
// the process is frozen). Past that, or once a renewal finds the slot gone,
// the slot is lost for good: it is not renewed, not handed on to a parked
// delivery, not counted as held; a task about to start on it is put back;
// the handler running on it sees [Task.Held] false and its context
// cancelled with [ErrLimitSlotLost].

// slotHold is this worker's trust in one slot of a concurrency limit.
type slotHold struct {
	mu        sync.Mutex
	until     time.Time // trusted before it: the last confirmed send time + TTL - margin (mu)
	confirmed bool      // an acquire or a renewal was confirmed (mu)
	lost      bool      // past until, or found gone: sticky (mu)
	onLost    []func()  // called once when a renewal finds the slot gone (mu)
}

// confirm records an acquire or a renewal of the slot sent at sent and
// confirmed by AX_LIMITS, which then holds it until at least sent + ttl:
// the slot is trusted until sent + ttl - margin. A lost slot stays lost.
func (h *slotHold) confirm(sent time.Time, ttl, margin time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost {
		return
	}
	if until := sent.Add(ttl - margin); until.After(h.until) {
		h.until = until
	}
	h.confirmed = true
}

// holds reports whether the slot is still trusted at now: confirmed, not
// found gone, and now before its trust ends. The first time it is not
// (once confirmed), the slot is lost for good.
func (h *slotHold) holds(now time.Time) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost || !h.confirmed {
		return false
	}
	if !now.Before(h.until) {
		h.lost = true
		return false
	}
	return true
}

// lose marks the slot lost for good, a renewal having found it gone, and
// tells the watches of the tasks running on it.
func (h *slotHold) lose() {
	h.mu.Lock()
	h.lost = true
	fns := h.onLost
	h.onLost = nil
	h.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// notifyLost calls f when a renewal finds the slot gone (at once if it is
// lost already).
func (h *slotHold) notifyLost(f func()) {
	h.mu.Lock()
	if h.lost {
		h.mu.Unlock()
		f()
		return
	}
	h.onLost = append(h.onLost, f)
	h.mu.Unlock()
}

// trustedUntil returns when the slot stops being trusted (the zero time if
// it is lost or was never confirmed).
func (h *slotHold) trustedUntil() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lost || !h.confirmed {
		return time.Time{}
	}
	return h.until
}

// slotMargin is how much earlier than AX_LIMITS's expiry a worker stops
// trusting a slot: half a renewal period, for the clocks of the workers
// that compare the expiry and the time a write takes to reach the server.
func (g *gate) slotMargin() time.Duration { return g.ttl / 6 }

// holdsSlots reports whether every slot of the ticket is still trusted
// (true when it holds none).
func (tk *ticket) holdsSlots() bool {
	if tk == nil {
		return true
	}
	now := time.Now()
	for _, s := range tk.slots {
		if !s.hold.holds(now) {
			return false
		}
	}
	return true
}

// watchSlots cancels a running task's context with [ErrLimitSlotLost] once
// a slot of its ticket is no longer trusted. Like [claimer.watchClaim] (claimwatch.go)
// it is a courtesy to the handler, run by a timer that a frozen process
// runs late: what fences is [Task.Held], which checks the slots
// synchronously. It returns a function that stops the watch.
func (tk *ticket) watchSlots(cancel context.CancelCauseFunc) (stop func() bool) {
	if tk == nil || len(tk.slots) == 0 {
		return func() bool { return false }
	}
	var timer *time.Timer
	next := func() time.Duration {
		var first time.Time
		for _, s := range tk.slots {
			until := s.hold.trustedUntil()
			if until.IsZero() {
				return -1
			}
			if first.IsZero() || until.Before(first) {
				first = until
			}
		}
		return time.Until(first)
	}
	check := func() {
		if left := next(); left > 0 && tk.holdsSlots() {
			timer.Reset(left)
			return
		}
		cancel(ErrLimitSlotLost)
	}
	timer = time.AfterFunc(time.Hour, check)
	timer.Reset(max(next(), 0))
	for _, s := range tk.slots {
		s.hold.notifyLost(func() { timer.Reset(0) })
	}
	return timer.Stop
}
