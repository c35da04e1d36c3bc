package worker

import (
	"sync"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// delivery is one message the worker holds, queued or running.
type delivery struct {
	msg      jetstream.Msg
	meta     *jetstream.MsgMetadata // parsed once on receipt; nil if unreadable
	set      *shardSet              // the consumers it came from
	from     *puller                // the puller whose credit it holds until a slot takes it; nil in tests
	priority int
	shard    int
	since    time.Time   // when the task began to wait: the dispatch order
	aged     bool        // since is from aging's copy: the task was lifted
	order    uint64      // arrival at the dispatch queue: breaks ties
	log      *zap.Logger // the worker's; nil in tests
	// flow is the gate's state of the delivery: where it parks, the slots
	// handed to it, its record read ahead ([flowState]).
	flow flowState

	mu       sync.Mutex
	lastBeat time.Time // last ack-wait reset: receipt (queued as it arrives, so it is the delivery) or the send time of an answered in-progress (mu)
	lapsed   bool      // the claim lapsed: sticky, no more heartbeats, no writes (mu)
	settled  bool      // acked, naked or termed: no more heartbeats (mu)
}

// recordRead is a task's record and its revision, as read.
type recordRead struct {
	rec *kv.Record
	rev uint64
}

// holds reports whether d's claim still holds at now: it lapses for good
// once now is lapse or more past its last confirmed ack-wait reset, and no
// later heartbeat revives it (JetStream may have redelivered the message
// to another worker in between). mu must be held.
func (d *delivery) holds(now time.Time, lapse time.Duration) bool {
	if d.lapsed {
		return false
	}
	if now.Sub(d.lastBeat) >= lapse {
		d.lapsed = true
		return false
	}
	return true
}

// alive is [delivery.holds] at the current time, taking mu.
func (d *delivery) alive(lapse time.Duration) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.holds(time.Now(), lapse)
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

// ackProgress is the in-progress acknowledgement (nats-server
// server/consumer.go AckProgress, "+WPI").
var ackProgress = []byte("+WPI")

// heartbeats sends an in-progress to every held message that has gone a
// third of the ack wait without one, so that JetStream redelivers only the
// messages of a worker that stopped beating (it died, froze or was cut off).
// It returns once done is closed: every held task has been settled.
func (cl *claimer) heartbeats(done <-chan struct{}) {
	every := cl.cfg.AckWait / 3
	tick := time.NewTicker(max(every/4, 50*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		cl.beat(time.Now(), every)
	}
}

// beat sends one round of heartbeats: an in-progress to each held message
// due one, as a request, all at once, and waits for the answers (at most
// half a heartbeat period).
//
// A heartbeat counts (it moves lastBeat, which [delivery.holds] reads) only
// once the consumer has answered it: nats-server v2.15.2
// server/consumer.go processAck (lines 2839-2882) handles "+WPI" with
// progressUpdate (line 2885) and then, since the ack carries a reply
// subject, "Ack the ack if requested" with sendAckReply (lines 2877-2881).
// processAck runs on the server of the consumer (its leader in a cluster),
// so the answer proves the reset reached the consumer, not only the
// connected server as a flush would. progressUpdate resets whichever
// delivery of the sequence is pending, and answers even when that is a
// redelivery to another worker; so an answer counts only if it arrives
// while the claim still holds (before the lapse, five sixths of the ack
// wait after the last counted reset, which is before the server can have
// redelivered), and a lapsed claim never beats again.
func (cl *claimer) beat(now time.Time, every time.Duration) {
	lapse := cl.lapse()
	var due []*delivery
	for _, d := range cl.held.snapshot() {
		if skip := cl.cfg.Test.SkipHeartbeat; skip != nil && d.meta != nil && skip(d.meta.NumDelivered) {
			continue
		}
		d.mu.Lock()
		if !d.settled && d.holds(now, lapse) && now.Sub(d.lastBeat) >= every {
			due = append(due, d)
		}
		d.mu.Unlock()
	}
	if len(due) == 0 {
		return
	}
	nc := cl.conn
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failed int
	var lastErr error
	for _, d := range due {
		wg.Go(func() {
			_, err := nc.Request(d.msg.Reply(), ackProgress, every/2)
			if err != nil {
				mu.Lock()
				failed, lastErr = failed+1, err
				mu.Unlock()
				return // sent again next tick; the claim lapses unless one is answered
			}
			d.mu.Lock()
			if !d.settled && d.holds(time.Now(), lapse) && d.lastBeat.Before(now) {
				d.lastBeat = now // when it was sent: the server reset the ack wait later
			}
			d.mu.Unlock()
		})
	}
	wg.Wait()
	if failed > 0 {
		cl.log.Warn("heartbeats_unconfirmed", zap.Int("messages", failed), zap.Error(lastErr))
	}
}
