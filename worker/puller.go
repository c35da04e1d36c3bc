package worker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// puller pulls the messages of one (priority, shard) consumer in batches
// sized to its free credit. It holds at most budget messages of the
// consumer that no slot has taken yet, counting those a pull request still
// asks for: a credit is spent when a request asks for a message and given
// back when a slot takes the delivery (or the request ends short of it).
//
// Every message a request brings is queued for the slots, and so joins the
// held set and its heartbeats, as soon as it arrives: the loop never waits
// while a request is open, and waits for credit only between requests,
// when the server owes it nothing. So no message waits unheartbeated in
// the client's buffer however many a request carries (the hazard that kept
// nats.go's Consume, whose callback hands over one message at a time, at
// one message per request before).
//
// It pulls again only once all its credit is back (every message of the
// previous request taken by a slot), so a backlog costs one request per
// budget of messages instead of one each: with the default budget of 4,
// 1.27 requests per task (the claim's record read included) against 2.02
// with one message per request, and 6 % less CPU per task over TCP
// (docs/BENCHMARKS.md). Pulling again at half the budget made 1.51
// requests per task and no measurable saving. A message left on the
// server meanwhile waits for any worker's next request, as before.
type puller struct {
	in     *intake
	s      *shardSet
	cons   jetstream.Consumer
	p      int
	shard  int
	budget int
	// parkRoom is how many of its deliveries may park at once: half its
	// consumer's MaxAckPending (0: no bound; [delivery.room]).
	parkRoom int
	expiry   time.Duration        // how long a request waits on the server
	opts     []jetstream.FetchOpt // heartbeat, priority group, min pending

	ctx    context.Context // cancelled by stop: no request after the open one
	cancel context.CancelFunc
	// reqCtx is the open request's parent, cancelled by abort: a request
	// ended by the client drops what the server has sent it meanwhile.
	reqCtx   context.Context
	abortReq context.CancelFunc
	closed   chan struct{} // closed when the loop has returned
	// asked is closed once the first request has been handed to the
	// connection (or the loop has returned without one): [Worker.Ready]
	// waits for it.
	asked     chan struct{}
	askedOnce sync.Once

	mu    sync.Mutex
	free  int           // credit not spent (mu)
	freed chan struct{} // a token: credit came back

	unpinned sync.Once // givePin
}

func newPuller(in *intake, s *shardSet, cons jetstream.Consumer, p, shard, budget, parkRoom int, expiry time.Duration, opts []jetstream.FetchOpt) *puller {
	ctx, cancel := context.WithCancel(context.Background())
	reqCtx, abortReq := context.WithCancel(context.Background())
	pl := &puller{in: in, s: s, cons: cons, p: p, shard: shard, budget: budget, parkRoom: parkRoom,
		expiry: expiry, opts: opts, ctx: ctx, cancel: cancel, reqCtx: reqCtx, abortReq: abortReq,
		closed: make(chan struct{}), asked: make(chan struct{}), free: budget, freed: make(chan struct{}, 1)}
	in.pulling.add(pl)
	go pl.run()
	return pl
}

// give returns n credits.
func (pl *puller) give(n int) {
	if n <= 0 {
		return
	}
	pl.mu.Lock()
	pl.free += n
	pl.mu.Unlock()
	select {
	case pl.freed <- struct{}{}:
	default:
	}
}

// spend waits until the whole budget of credit is free and spends it; it
// returns 0 once the puller is stopped.
func (pl *puller) spend() int {
	for {
		if pl.ctx.Err() != nil {
			return 0
		}
		pl.mu.Lock()
		if n := pl.free; n >= pl.budget {
			pl.free = 0
			pl.mu.Unlock()
			return n
		}
		pl.mu.Unlock()
		select {
		case <-pl.ctx.Done():
			return 0
		case <-pl.freed:
		}
	}
}

// pullRetry is how long the loop first waits after a request that failed
// and brought nothing (a lost consumer, a leader change, a wrong pin); the
// wait doubles while requests keep failing, up to pullRetryMax.
const (
	pullRetry    = 250 * time.Millisecond
	pullRetryMax = 5 * time.Second
)

func (pl *puller) run() {
	defer func() {
		pl.markAsked()
		pl.abortReq()
		pl.in.pulling.remove(pl)
		close(pl.closed)
	}()
	retry := pullRetry
	for {
		if st := pl.in.js.Conn().Status(); st != nats.CONNECTED {
			if st == nats.CLOSED {
				return // for good: a closed connection does not reopen
			}
			// Reconnecting: a request now would only wait in nats.go's
			// reconnect buffer (and a Fetch that finds it full leaks its
			// inbox subscription, v1.55.0). Look again shortly, so that
			// pulling resumes soon after the connection is back.
			if !pl.wait(pullRetry) {
				return
			}
			continue
		}
		n := pl.spend()
		if n == 0 {
			return
		}
		got, err := pl.pull(n)
		pl.give(n - got)
		if err == nil || got > 0 || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			retry = pullRetry
			continue
		}
		pl.in.consumeError(err)
		if errors.Is(err, nats.ErrConnectionClosed) || pl.in.js.Conn().IsClosed() {
			return
		}
		if pl.in.js.Conn().Status() == nats.CONNECTED &&
			(errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrPinIDMismatch)) {
			// The request may be lost, or the pin lapsed while the puller
			// waited for credit (nats.go dropped it): ask again at once.
			// Each such request lasted two heartbeats, or ended on a pin
			// it no longer sends, so this does not spin.
			continue
		}
		if !pl.wait(retry) {
			return
		}
		retry = min(2*retry, pullRetryMax)
	}
}

// wait pauses the loop for d; it reports false once the puller is stopped.
func (pl *puller) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-pl.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// pull sends one request for n messages and queues each as it arrives,
// until the request is filled or expires or the puller stops.
func (pl *puller) pull(n int) (int, error) {
	ctx, cancel := context.WithTimeout(pl.reqCtx, pl.expiry)
	defer cancel()
	batch, err := pl.cons.Fetch(n, append(pl.opts, jetstream.FetchContext(ctx))...)
	pl.markAsked() // Fetch returns once its request is written to the connection
	if err != nil {
		return 0, err
	}
	got := 0
	for msg := range batch.Messages() {
		got++
		pl.in.receive(pl, msg)
	}
	return got, batch.Error()
}

// stop ends pulling without ending the open request, if any: the request
// runs to its end (filled, expired, two heartbeats missed, or a wrong pin
// once the new owner unpins), and each message it brings is handed back
// at once ([intake.receive]). Ending the request from the client instead would
// drop what the server had sent it and not yet delivered (in flight, or
// in nats.go's subscription when its fetch ends): the server counts those
// delivered, so each would wait out its ack wait before any worker could
// take it (TestShardMovesLoseNoDelivery). So a stopped puller's request
// lingers up to its expiry beside its successor's, costing at most its
// credit in messages handed back once each.
func (pl *puller) stop() { pl.cancel() }

// givePin, for a stopped puller whose lingering request was sent a
// message under pinned_client, unpins the consumer's group once: the
// server pins the first request that carries no pin id when a message
// comes and no one holds the pin, which can be this request, ahead of the
// new owner's; without the unpin the pin would stay with a client that
// pulls no more until PinnedTTL. Unpinned, the request is refused (its pin
// id no longer matches) and the next request is pinned
// (TestShardMoveAttackPinnedLingeringTakesPin).
func (pl *puller) givePin() {
	pl.unpinned.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := pl.in.unpin(ctx, pl.p, pl.cons.CachedInfo().Name); err != nil {
			pl.in.log.Debug("unpin_failed", zap.String("consumer", pl.cons.CachedInfo().Name), zap.Error(err))
		}
	})
}

// markAsked closes asked once.
func (pl *puller) markAsked() { pl.askedOnce.Do(func() { close(pl.asked) }) }

// stopped reports whether stop (or abort) was called.
func (pl *puller) stopped() bool { return pl.ctx.Err() != nil }

// abort stops pulling and ends the open request now: for a worker that
// stops, whose requests must not outlive it, before it hands back what it
// holds. What the server was sending the request at that moment is left
// to its ack wait.
func (pl *puller) abort() {
	pl.cancel()
	pl.abortReq()
}

// done is closed once the loop has returned.
func (pl *puller) done() <-chan struct{} { return pl.closed }

// pullerSet holds the pullers whose loop has not returned, stopped ones
// whose request lingers included, so that a stopping worker can end them.
type pullerSet struct {
	mu  sync.Mutex
	all map[*puller]struct{}
}

func (s *pullerSet) add(pl *puller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.all == nil {
		s.all = map[*puller]struct{}{}
	}
	s.all[pl] = struct{}{}
}

func (s *pullerSet) remove(pl *puller) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.all, pl)
}

// abort ends every puller's request and waits until their loops have
// returned, for at most 5 seconds.
func (s *pullerSet) abort() {
	s.mu.Lock()
	all := make([]*puller, 0, len(s.all))
	for pl := range s.all {
		all = append(all, pl)
	}
	s.mu.Unlock()
	for _, pl := range all {
		pl.abort()
	}
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for _, pl := range all {
		select {
		case <-pl.done():
		case <-deadline.C:
			return
		}
	}
}
