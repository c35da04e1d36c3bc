package worker

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// A consume context that misses two idle heartbeats is replaced by a fresh
// one. nats.go (v1.55.0) answers a missed heartbeat by sending a new pull
// request without withdrawing the open one, and from then on counts only
// one request as open: each time one of them ends, it sends another, so the
// context keeps one extra request, heartbeating, for as long as it lives.
// A worker that was frozen or starved for two heartbeats (a
// loaded machine, a long pause) came back with one extra request per
// context per stall, for good; on a loaded machine the extra heartbeats
// caused more misses, and the requests piled up until the process could not
// keep up. A replaced context is drained: its inbox goes, and the server
// drops the requests it left (they have no interest any more).

// renewal asks for the consume context cc of (p, shard) of set s to be
// replaced.
type renewal struct {
	s        *shardSet
	p, shard int
	cc       jetstream.ConsumeContext
}

// renewQueue is how many renewals may wait; more are dropped (the context
// misses its heartbeats again and asks again).
const renewQueue = 1024

// consumeErrors returns the error handler of a consume context of (p, shard)
// of set s: it logs what the context reports and asks for the context to be
// replaced when it missed its heartbeats. Only a lost consumer is a
// warning.
func (w *Worker) consumeErrors(s *shardSet, p, shard int) jetstream.ConsumeErrHandler {
	return func(cc jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			w.log.Warn("consume_error", zap.Error(err))
			return
		}
		w.log.Debug("consume_error", zap.Error(err))
		if errors.Is(err, jetstream.ErrNoHeartbeat) {
			select {
			case w.renewals <- renewal{s: s, p: p, shard: shard, cc: cc}:
			default:
			}
		}
	}
}

// renewContexts replaces the consume contexts handed to it (see
// [Worker.consumeErrors]) until the worker stops.
func (w *Worker) renewContexts() {
	for {
		select {
		case <-w.stopCh:
			return
		case r := <-w.renewals:
			w.renew(r)
		}
	}
}

// renew replaces r's consume context with a fresh one in the same mode, if
// it is still one of its shard's, and drains the old one.
func (w *Worker) renew(r renewal) {
	r.s.locks[r.shard].Lock()
	i := slices.Index(r.s.ccs[r.shard], r.cc)
	if i < 0 || w.stopping.Load() {
		r.s.locks[r.shard].Unlock()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	cc, err := w.consumeShard(ctx, r.s, r.p, r.shard, r.s.modes[r.shard])
	cancel()
	if err != nil {
		r.s.locks[r.shard].Unlock()
		// The old context still pulls (nats.go asked again); it is
		// replaced at its next miss.
		w.log.Warn("consume_renew_failed", zap.Int("priority", r.p), zap.Int("shard", r.shard), zap.Error(err))
		return
	}
	r.s.ccs[r.shard][i] = cc
	r.s.locks[r.shard].Unlock()
	w.log.Debug("consume_renewed", zap.Int("priority", r.p), zap.Int("shard", r.shard))
	w.loops.Go(func() { drain([]jetstream.ConsumeContext{r.cc}) })
}
