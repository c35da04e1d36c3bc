package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// Worker pulls and runs tasks. Create it with [New], then [Worker.Start] and
// [Worker.Stop] it once.
type Worker struct {
	cfg   *Config
	js    jetstream.JetStream
	store *kv.Store
	log   *zap.Logger

	queues   [streams.Priorities]chan *delivery // local dispatch, one per priority
	held     heldSet                            // every message held, for heartbeats
	running  sync.Map                           // task id -> context.CancelCauseFunc
	cancels  cancelNotes                        // operator cancel notices
	consumes []jetstream.ConsumeContext

	stopping  atomic.Bool
	stopCh    chan struct{} // closed when Stop begins
	slotsDone chan struct{} // closed when every slot has returned
	runCtx    context.Context
	runCancel context.CancelCauseFunc // cancels handlers after the grace period
	slots     sync.WaitGroup
	loops     sync.WaitGroup
	started   atomic.Bool
	stopOnce  sync.Once

	stats Stats
}

// Stats counts outcomes since the worker started.
type Stats struct {
	Started   atomic.Int64 // attempts started
	Succeeded atomic.Int64
	Retried   atomic.Int64 // attempts failed and scheduled again
	Dead      atomic.Int64 // tasks sent to the dead-letter stream
	Dropped   atomic.Int64 // deliveries dropped: stale, duplicate or lost claim
}

// New returns a worker; it does nothing until Start.
func New(ctx context.Context, js jetstream.JetStream, cfg *Config) (*Worker, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	store, err := kv.NewStore(ctx, js, &cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("new worker: %w", err)
	}
	w := &Worker{cfg: cfg, js: js, store: store, log: cfg.Logger.Named("worker").With(zap.String("worker", cfg.ID)), stopCh: make(chan struct{}), slotsDone: make(chan struct{})}
	for p := range w.queues {
		w.queues[p] = make(chan *delivery, cfg.Concurrency)
	}
	w.held.items = map[*delivery]struct{}{}
	w.runCtx, w.runCancel = context.WithCancelCause(context.Background())
	return w, nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.cfg.ID }

// Stats returns the worker's outcome counters.
func (w *Worker) Stats() *Stats { return &w.stats }

// Start subscribes to the consumers of the worker's shards and starts its
// task slots and heartbeat loop.
func (w *Worker) Start(ctx context.Context) error {
	if !w.started.CompareAndSwap(false, true) {
		return errors.New("worker already started")
	}
	for p := range streams.Priorities {
		for _, shard := range w.cfg.Shards {
			name := w.cfg.Names.ConsumerName(p, shard)
			cons, err := w.bindConsumer(ctx, p, shard)
			if err != nil {
				w.stopConsumers()
				return fmt.Errorf("start worker: %w", err)
			}
			opts := []jetstream.PullConsumeOpt{
				jetstream.PullMaxMessages(w.cfg.PrefetchPerShard),
				jetstream.ConsumeErrHandler(w.consumeError),
			}
			if len(cons.CachedInfo().Config.PriorityGroups) > 0 {
				opts = append(opts, jetstream.PullPriorityGroup(streams.PriorityGroup))
			}
			cc, err := cons.Consume(w.receiver(p), opts...)
			if err != nil {
				w.stopConsumers()
				return fmt.Errorf("start worker: consume %s: %w", name, err)
			}
			w.consumes = append(w.consumes, cc)
		}
	}
	if err := w.subscribeCancels(); err != nil {
		w.stopConsumers()
		return fmt.Errorf("start worker: %w", err)
	}
	for range w.cfg.Concurrency {
		w.slots.Go(w.slot)
	}
	w.loops.Go(func() { w.slots.Wait(); close(w.slotsDone) })
	if !w.cfg.Test.DisableHeartbeats {
		w.loops.Go(w.heartbeats)
	}
	w.log.Info("worker_started", zap.Int("concurrency", w.cfg.Concurrency), zap.Int("shards", len(w.cfg.Shards)))
	return nil
}

// Stop stops fetching, naks the tasks not started, lets running tasks finish
// for the grace period, then cancels them (cause [ErrStop]) and puts them
// back for another worker. It returns when every goroutine has ended or ctx
// is done.
func (w *Worker) Stop(ctx context.Context) error {
	if !w.started.Load() {
		return nil
	}
	w.stopOnce.Do(func() {
		w.stopping.Store(true)
		close(w.stopCh)
		w.stopConsumers()
	})
	slotsDone := w.slotsDone
	grace := time.NewTimer(w.cfg.GracePeriod)
	defer grace.Stop()
	select {
	case <-slotsDone:
	case <-grace.C:
		w.runCancel(ErrStop)
	case <-ctx.Done():
		w.runCancel(ErrStop)
	}
	select {
	case <-slotsDone:
	case <-ctx.Done():
		return fmt.Errorf("stop worker %s: %w", w.cfg.ID, ctx.Err())
	}
	w.runCancel(ErrStop)
	for _, q := range w.queues { // tasks received but not started
		for {
			select {
			case d := <-q:
				w.release(d)
				continue
			default:
			}
			break
		}
	}
	w.loops.Wait()
	w.unsubscribeCancels()
	w.log.Info("worker_stopped")
	return nil
}

// Run starts the worker, waits for ctx to end and stops it.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.GracePeriod+10*time.Second)
	defer cancel()
	return w.Stop(stopCtx)
}

func (w *Worker) stopConsumers() {
	for _, cc := range w.consumes {
		cc.Drain()
	}
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for _, cc := range w.consumes {
		select {
		case <-cc.Closed():
		case <-deadline.C:
			for _, c := range w.consumes {
				c.Stop()
			}
			return
		}
	}
}

func (w *Worker) consumeError(_ jetstream.ConsumeContext, err error) {
	if errors.Is(err, jetstream.ErrNoHeartbeat) || errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
		w.log.Warn("consume_error", zap.Error(err))
		return
	}
	w.log.Debug("consume_error", zap.Error(err))
}

// receiver returns the consume callback of priority p: it hands each message
// to the local queue of its priority, blocking while the queue is full so
// that the consumer pulls no further ahead.
func (w *Worker) receiver(p int) jetstream.MessageHandler {
	return func(msg jetstream.Msg) {
		if w.stopping.Load() {
			_ = msg.Nak()
			return
		}
		d := &delivery{msg: msg, priority: p, received: time.Now()}
		w.held.add(d)
		select {
		case w.queues[p] <- d:
		case <-w.stopCh:
			w.release(d)
		}
	}
}

// release hands an unstarted message back to the stream at once.
func (w *Worker) release(d *delivery) {
	w.held.remove(d)
	_ = d.msg.Nak()
}

// slot runs tasks one at a time, highest priority first, until Stop.
func (w *Worker) slot() {
	for {
		d := w.next()
		if d == nil {
			return
		}
		w.process(d)
		w.held.remove(d)
	}
}

// next returns the highest-priority queued delivery, waiting for one, or nil
// once the worker is stopping.
func (w *Worker) next() *delivery {
	for {
		select {
		case <-w.stopCh:
			return nil
		default:
		}
		for _, q := range w.queues {
			select {
			case d := <-q:
				return d
			default:
			}
		}
		select {
		case <-w.stopCh:
			return nil
		case d := <-w.queues[0]:
			return d
		case d := <-w.queues[1]:
			return w.preferHigher(d)
		case d := <-w.queues[2]:
			return w.preferHigher(d)
		case d := <-w.queues[3]:
			return w.preferHigher(d)
		case d := <-w.queues[4]:
			return w.preferHigher(d)
		}
	}
}

// preferHigher keeps strict priority when several queues filled at once
// while the slot waited: a higher-priority delivery runs first and d goes
// back to the front of the line through its queue.
func (w *Worker) preferHigher(d *delivery) *delivery {
	for p := 0; p < d.priority; p++ {
		select {
		case higher := <-w.queues[p]:
			w.loops.Go(func() { // never block the slot; the queue has room soon
				select {
				case w.queues[d.priority] <- d:
				case <-w.stopCh:
					w.release(d)
				}
			})
			return higher
		default:
		}
	}
	return d
}
