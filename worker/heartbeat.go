package worker

import (
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// delivery is one message the worker holds, queued or running.
type delivery struct {
	msg      jetstream.Msg
	meta     *jetstream.MsgMetadata // parsed once on receipt; nil if unreadable
	priority int
	shard    int
	since    time.Time     // when the task began to wait: the dispatch order
	order    uint64        // arrival at the dispatch queue: breaks ties
	taken    chan struct{} // closed when a slot takes it from the queue

	mu       sync.Mutex
	lastBeat time.Time // last ack-wait reset: receipt (one message per pull, so it is the delivery) or a confirmed in-progress (mu)
	settled  bool      // acked, naked or termed: no more heartbeats (mu)
}

// settle marks d as answered, under its lock, and runs answer once.
func (d *delivery) settle(answer func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return nil
	}
	d.settled = true
	return answer()
}

// heldSet tracks the deliveries the worker holds.
type heldSet struct {
	mu    sync.Mutex
	items map[*delivery]struct{}
}

func (h *heldSet) add(d *delivery) {
	h.mu.Lock()
	h.items[d] = struct{}{}
	h.mu.Unlock()
}

func (h *heldSet) remove(d *delivery) {
	h.mu.Lock()
	delete(h.items, d)
	h.mu.Unlock()
}

func (h *heldSet) snapshot() []*delivery {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*delivery, 0, len(h.items))
	for d := range h.items {
		out = append(out, d)
	}
	return out
}

// heartbeats sends an in-progress to every held message that has gone a
// third of the ack wait without one, so that JetStream redelivers only the
// messages of a worker that stopped beating (it died, froze or was cut off).
//
// A heartbeat counts (it moves lastBeat, which [Worker.watchClaim] reads)
// only once a flush round trip has confirmed that the server has it: an
// in-progress buffered on a connection cut off from the server resets no
// ack wait, and the handler must stop before another worker can take its
// task over.
func (w *Worker) heartbeats() {
	every := w.cfg.AckWait / 3
	tick := time.NewTicker(max(every/4, 50*time.Millisecond))
	defer tick.Stop()
	var sent []*delivery
	for {
		select {
		case <-w.slotsDone: // every held task has been settled
			return
		case <-tick.C:
		}
		now := time.Now()
		sent = sent[:0]
		for _, d := range w.held.snapshot() {
			d.mu.Lock()
			if !d.settled && now.Sub(d.lastBeat) >= every {
				if err := d.msg.InProgress(); err != nil {
					w.log.Debug("heartbeat_failed", zap.Error(err))
				} else {
					sent = append(sent, d)
				}
			}
			d.mu.Unlock()
		}
		if len(sent) == 0 {
			continue
		}
		if err := w.js.Conn().FlushTimeout(every / 2); err != nil {
			w.log.Warn("heartbeats_unconfirmed", zap.Int("messages", len(sent)), zap.Error(err))
			continue // sent again next tick; the claims lapse unless one gets through
		}
		for _, d := range sent {
			d.mu.Lock()
			if d.lastBeat.Before(now) {
				d.lastBeat = now // when it was sent: the server reset the ack wait later
			}
			d.mu.Unlock()
		}
	}
}
