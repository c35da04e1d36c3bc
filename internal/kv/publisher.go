package kv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of [PublisherConfig].
const (
	DefaultPublishWindow  = 4_000
	DefaultPublishTimeout = 10 * time.Second
)

// noRespondersStatus is the status of the reply the server sends when no
// stream stores a publish's subject.
const noRespondersStatus = "503"

// PublisherConfig configures a [Publisher].
type PublisherConfig struct {
	// MaxPending bounds the publishes in flight, of all the publisher's
	// callers together. Default 4,000 ([DefaultPublishWindow]).
	MaxPending int
	// Timeout is how long a publish waits for its acknowledgement before
	// it fails with [jetstream.ErrAsyncPublishTimeout]. Default 10s.
	Timeout time.Duration
}

func (c *PublisherConfig) withDefaults() *PublisherConfig {
	if c == nil {
		c = &PublisherConfig{}
	}
	out := *c
	out.MaxPending = cmp.Or(out.MaxPending, DefaultPublishWindow)
	out.Timeout = cmp.Or(out.Timeout, DefaultPublishTimeout)
	return &out
}

func (c *PublisherConfig) validate() error {
	if c.MaxPending < 1 {
		return fmt.Errorf("publisher config: MaxPending %d must be positive", c.MaxPending)
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("publisher config: Timeout %s must be positive", c.Timeout)
	}
	return nil
}

// Publisher sends many JetStream publishes at once and reads their
// acknowledgements by hand ([readPubAck]): what nats.go's asynchronous
// publish does, without a future and two channels per publish, and
// without encoding/json. A call of [Publisher.PublishAll] subscribes to an
// inbox of its own, sends each message with a reply subject of that inbox
// and a token of its own, keeps at most MaxPending publishes of all calls
// in flight, and reads the replies on its own goroutine: it starts none,
// and leaves no subscription behind. It is safe for concurrent use.
type Publisher struct {
	nc      *nats.Conn
	cfg     *PublisherConfig
	window  chan struct{} // a token per publish in flight, of all calls
	streams streamNames
}

// NewPublisher returns a publisher on nc.
func NewPublisher(nc *nats.Conn, cfg *PublisherConfig) (*Publisher, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Publisher{nc: nc, cfg: cfg, window: make(chan struct{}, cfg.MaxPending)}, nil
}

// Published is the outcome of one publish of [Publisher.PublishAll].
type Published struct {
	// Ack is the acknowledgement of a stored (or de-duplicated) publish.
	Ack jetstream.PubAck
	// Err is why the publish has no acknowledgement: the server's refusal
	// (a [*jetstream.APIError], so [IsRevisionMismatch] reads a lost
	// compare-and-set), [jetstream.ErrNoStreamResponse] when no stream
	// stores the subject (after nats.go's retries of it: two, 250 ms
	// apart), [jetstream.ErrAsyncPublishTimeout], the context's error, or
	// the connection's.
	Err error
}

// PublishAll publishes every message and returns their outcomes, in the
// order of msgs, once each has one. It sets each message's Reply. It
// returns early when ctx ends: a message then still in flight may have
// been stored, and its outcome is ctx's error. A publish that timed out
// is not sent again (its caller may, with the same Nats-Msg-Id).
func (p *Publisher) PublishAll(ctx context.Context, msgs []*nats.Msg) []Published {
	out := make([]Published, len(msgs))
	if len(msgs) == 0 {
		return out
	}
	if len(msgs) == 1 {
		out[0] = p.publishOne(ctx, msgs[0])
		return out
	}
	inbox := p.nc.NewInbox() + "."
	// Room for every reply that may be due at once, and as many again for
	// late replies to publishes that timed out; a reply that finds it full
	// is dropped (nats.go's slow consumer) and its publish times out.
	replies := make(chan *nats.Msg, 2*min(len(msgs), p.cfg.MaxPending))
	sub, err := p.nc.ChanSubscribe(inbox+"*", replies)
	if err != nil {
		for i := range out {
			out[i].Err = fmt.Errorf("subscribe to publish acknowledgements: %w", err)
		}
		return out
	}
	defer func() { _ = sub.Unsubscribe() }()
	r := &publishRun{p: p, msgs: msgs, out: out, inbox: inbox, state: make([]publishState, len(msgs))}
	defer r.stop()
	next := 0 // the first message not yet sent
	low := 0  // once the window is full: send again when r.held is down to low
	for next < len(msgs) || r.held > 0 {
		// Send what the window takes without waiting. When it is full, wait
		// until half of this call's publishes are answered before sending
		// more (as nats.go waits for all of them): sent one per answer,
		// each publish would leave in a write of its own.
		if next < len(msgs) && r.held <= low {
			for next < len(msgs) && r.acquire() {
				r.send(next)
				next++
			}
			low = r.held / 2
		}
		var window chan<- struct{}
		if next < len(msgs) && r.held == 0 { // the window is others': wait for a token
			window = p.window
		}
		var due <-chan time.Time
		if r.timer != nil {
			due = r.timer.C
		}
		select {
		case window <- struct{}{}:
			r.held++
			r.send(next)
			next++
			low = r.held // and whatever else is free
		case msg := <-replies:
			r.reply(msg)
		case now := <-due:
			r.expire(now)
		case <-ctx.Done():
			r.cancel(ctx.Err())
			return out
		}
	}
	return out
}

// publishPhase is where a message of a [Publisher.PublishAll] call is.
type publishPhase uint8

const (
	phaseUnsent   publishPhase = iota
	phaseInFlight              // sent, its reply awaited
	phaseWaiting               // no stream answered: sent again at its time
	phaseDone                  // its outcome is set
)

// publishState is one message's progress.
type publishState struct {
	phase publishPhase
	sends uint8     // how often it was sent
	at    time.Time // in flight: when it was sent; waiting: when to send it again
}

// publishRun is one call of [Publisher.PublishAll]; its goroutine alone
// uses it.
type publishRun struct {
	p     *Publisher
	msgs  []*nats.Msg
	out   []Published
	inbox string // the call's inbox, with its trailing dot
	state []publishState
	held  int         // window tokens held: messages in flight or waiting
	timer *time.Timer // fires at due; made by the first send
	due   time.Time   // zero: the timer is not set
}

// acquire takes a window token if one is free.
func (r *publishRun) acquire() bool {
	select {
	case r.p.window <- struct{}{}:
		r.held++
		return true
	default:
		return false
	}
}

// send publishes message i, whose window token is held. Its reply
// subject's token is sends*len(msgs)+i, so a reply names its message and
// the send it answers.
func (r *publishRun) send(i int) {
	s := &r.state[i]
	token := uint64(s.sends)*uint64(len(r.msgs)) + uint64(i)
	s.sends++
	msg := r.msgs[i]
	msg.Reply = r.inbox + strconv.FormatUint(token, 10)
	if err := r.p.nc.PublishMsg(msg); err != nil {
		r.settle(i, Published{Err: err})
		return
	}
	s.phase, s.at = phaseInFlight, time.Now()
	r.arm(s.at.Add(r.p.cfg.Timeout))
}

// reply settles the message a reply answers; a late reply, to a send that
// timed out or was made again, is dropped.
func (r *publishRun) reply(msg *nats.Msg) {
	if len(msg.Subject) <= len(r.inbox) {
		return
	}
	token, err := strconv.ParseUint(msg.Subject[len(r.inbox):], 10, 64)
	if err != nil {
		return
	}
	n := uint64(len(r.msgs))
	i := int(token % n)
	s := &r.state[i]
	if s.phase != phaseInFlight || uint64(s.sends) != token/n+1 {
		return
	}
	if len(msg.Data) == 0 && msg.Header.Get(statusHeader) == noRespondersStatus {
		// As nats.go: sent again after a wait, twice, then no stream.
		if int(s.sends) <= jetstream.DefaultPubRetryAttempts {
			s.phase, s.at = phaseWaiting, time.Now().Add(jetstream.DefaultPubRetryWait)
			r.arm(s.at)
			return
		}
		r.settle(i, Published{Err: jetstream.ErrNoStreamResponse})
		return
	}
	ack, err := readPubAck(msg.Data, &r.p.streams)
	r.settle(i, Published{Ack: ack, Err: err})
}

// expire fails the publishes whose acknowledgement is overdue, sends
// again those whose wait is over, and sets the timer for the next.
func (r *publishRun) expire(now time.Time) {
	r.due = time.Time{}
	var next time.Time
	for i := range r.state {
		s := &r.state[i]
		var at time.Time
		switch s.phase {
		case phaseInFlight:
			if at = s.at.Add(r.p.cfg.Timeout); !at.After(now) {
				r.settle(i, Published{Err: jetstream.ErrAsyncPublishTimeout})
				continue
			}
		case phaseWaiting:
			if at = s.at; !at.After(now) {
				r.send(i)
				continue
			}
		default:
			continue
		}
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if !next.IsZero() {
		r.arm(next)
	}
}

// arm makes the timer fire at at, unless it fires sooner.
func (r *publishRun) arm(at time.Time) {
	if !r.due.IsZero() && !at.Before(r.due) {
		return
	}
	r.due = at
	if r.timer == nil {
		r.timer = time.NewTimer(time.Until(at))
		return
	}
	r.timer.Reset(time.Until(at))
}

// settle sets message i's outcome and gives back its window token.
func (r *publishRun) settle(i int, res Published) {
	r.out[i] = res
	r.state[i].phase = phaseDone
	r.held--
	<-r.p.window
}

// cancel ends the call: every message without an outcome gets err.
func (r *publishRun) cancel(err error) {
	for i := range r.state {
		switch r.state[i].phase {
		case phaseInFlight, phaseWaiting:
			r.settle(i, Published{Err: err})
		case phaseUnsent:
			r.out[i].Err = err
			r.state[i].phase = phaseDone
		}
	}
}

// stop stops the timer.
func (r *publishRun) stop() {
	if r.timer != nil {
		r.timer.Stop()
	}
}

// publishOne sends a lone publish as a request on the connection's shared
// reply subscription: a subscription of its own costs a call of one
// publish more than it saves (BenchmarkSubmitBatch/1: 149 µs a batch with
// nats.go's publish, 218 µs with a subscription per call). Its outcomes,
// retries and window are those of [Publisher.PublishAll].
func (p *Publisher) publishOne(ctx context.Context, msg *nats.Msg) Published {
	select {
	case p.window <- struct{}{}:
	case <-ctx.Done():
		return Published{Err: ctx.Err()}
	}
	defer func() { <-p.window }()
	for sends := 1; ; sends++ {
		rctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
		reply, err := p.nc.RequestMsgWithContext(rctx, msg)
		cancel()
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			if sends > jetstream.DefaultPubRetryAttempts {
				return Published{Err: jetstream.ErrNoStreamResponse}
			}
			select { // as nats.go: sent again after a wait, twice, then no stream
			case <-time.After(jetstream.DefaultPubRetryWait):
			case <-ctx.Done():
				return Published{Err: ctx.Err()}
			}
		case err != nil:
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				err = jetstream.ErrAsyncPublishTimeout
			}
			return Published{Err: err}
		default:
			ack, err := readPubAck(reply.Data, &p.streams)
			return Published{Ack: ack, Err: err}
		}
	}
}
