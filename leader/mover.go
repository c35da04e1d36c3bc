package leader

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.uber.org/zap"
)

// prepareAhead is how long before its run time a due task is handed to a
// release goroutine, which reads its record and then waits for the exact
// time, so that the publish is the only round trip left at the due time.
const prepareAhead = 20 * time.Millisecond

// dueTask is a fired schedule waiting for its exact run time.
type dueTask struct {
	id    string
	ref   kv.Ref // the task: the tenant and id its due subject names
	runAt time.Time
	seq   uint64 // sequence of the ax.due.<tenant>.<id> message in AX_DELAYED
	msg   jetstream.Msg
}

// dueHeap orders due tasks by run time.
type dueHeap []*dueTask

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].runAt.Before(h[j].runAt) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*dueTask)) }
func (h *dueHeap) Pop() any {
	old := *h
	n := len(old)
	x := old[n-1]
	*h = old[:n-1]
	return x
}

// mover releases delayed tasks into their priority buckets at their exact
// run time. The server fires each schedule a little early into ax.due.<id>;
// the mover reads every fired schedule from the start of AX_DELAYED (an
// ordered consumer, so a new leader sees what the old one left), keeps them
// in a heap and releases each from its own timer. A task found past due is
// released at once.
type mover struct {
	l      *Leader
	stream jetstream.Stream
	log    *zap.Logger

	mu      sync.Mutex
	pending dueHeap // (mu)
	wake    chan struct{}
}

func newMover(l *Leader) *mover {
	return &mover{l: l, log: l.log.Named("mover"), wake: make(chan struct{}, 1)}
}

func (m *mover) run(ctx context.Context) error {
	names := m.l.cfg.Names
	stream, err := m.l.js.Stream(ctx, names.DelayedStream())
	if err != nil {
		return fmt.Errorf("mover: bind %s: %w", names.DelayedStream(), err)
	}
	m.stream = stream
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{names.DueFilter()}})
	if err != nil {
		return fmt.Errorf("mover: consume %s: %w", names.DueFilter(), err)
	}
	cc, err := cons.Consume(m.receive)
	if err != nil {
		return fmt.Errorf("mover: consume %s: %w", names.DueFilter(), err)
	}
	defer cc.Stop()
	releases := make(chan *dueTask)
	var wg sync.WaitGroup
	for range m.l.cfg.MoverWorkers {
		wg.Go(func() {
			for d := range releases {
				m.release(ctx, d)
			}
		})
	}
	defer wg.Wait()
	defer close(releases)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d, wait := m.next(time.Now())
		if d != nil {
			select {
			case releases <- d:
				continue
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-m.wake:
		case <-timer.C:
		}
	}
}

// next pops the first task due at now, or says how long to wait.
func (m *mover) next(now time.Time) (*dueTask, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.pending) == 0 {
		return nil, time.Hour
	}
	if wait := m.pending[0].runAt.Sub(now) - prepareAhead; wait > 0 {
		return nil, wait
	}
	return heap.Pop(&m.pending).(*dueTask), 0
}

// receive queues a fired schedule (the consume callback).
func (m *mover) receive(msg jetstream.Msg) {
	meta, err := msg.Metadata()
	if err != nil {
		return
	}
	h := msg.Headers()
	// The subject names the task, its tenant and id: the schedule was
	// keyed on them.
	tenant, id, ok := m.l.cfg.Names.ParseDueSubject(msg.Subject())
	if !ok {
		m.log.Warn("due_subject_invalid", zap.String("subject", msg.Subject()))
		return
	}
	runAt, err := time.Parse(time.RFC3339Nano, h.Get(streams.HeaderRunAt))
	if err != nil {
		runAt = time.Now() // no run time: due now
	}
	m.mu.Lock()
	heap.Push(&m.pending, &dueTask{id: id, ref: kv.Ref{Tenant: tenant, ID: id}, runAt: runAt, seq: meta.Sequence.Stream, msg: msg})
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// release moves one due task into its bucket: publish a copy (a
// Nats-Msg-Id unique to this release), move the record PENDING -> READY
// naming the copy as its current message, delete the fired schedule. A
// worker that meets the copy first binds the record to it itself (a released
// copy of a PENDING task is its next message). A failure leaves the fired
// schedule for the next pass or the next leader; a second copy that a retry
// publishes is dropped by workers, since the record names only one. A task
// is never released before its record's run time. A copy its bucket
// refuses for what it is ([streams.Refused]: too large, say) would be
// refused forever: the task is buried instead ([mover.bury]).
func (m *mover) release(ctx context.Context, d *dueTask) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec, rev, err := m.l.store.Get(ctx, d.ref)
	switch {
	case errors.Is(err, kv.ErrNotFound):
		rec = nil // the submit's record write failed: the worker creates it
	case err != nil:
		m.retry(d, err)
		return
	case rec.State == kv.StatePaused:
		// Kept until it is resumed (back to PENDING): look again later.
		m.recheck(d, m.l.cfg.PausedRecheck)
		return
	case rec.State != kv.StatePending:
		m.done(ctx, d) // released before, or cancelled
		return
	}
	if rec != nil && rec.RunAt != nil && rec.RunAt.After(d.runAt) {
		// Never before the record's run time, whatever the fired
		// schedule says.
		m.requeue(d, *rec.RunAt)
		return
	}
	if m.held(d, rec) {
		m.recheck(d, time.Second)
		return
	}
	msg, gen, ok := m.copyOf(d, rec)
	if !ok {
		// No record, and a submit subject that does not parse or names
		// another tenant than the schedule's: nothing of the tenant's can
		// be released from it.
		m.log.Warn("due_schedule_unreleasable", zap.String("task_id", d.id), zap.String("tenant", d.ref.Tenant),
			zap.String("subject", d.msg.Headers().Get(streams.HeaderSubject)))
		m.done(ctx, d)
		return
	}
	sleep(ctx, time.Until(d.runAt)) // a change meanwhile fails the compare-and-set below
	msg.Header.Set(streams.HeaderReleasedAt, time.Now().UTC().Format(time.RFC3339Nano))
	if !m.l.held() {
		return // no longer leading: the fired schedule stays for the next leader
	}
	ack, err := m.l.js.PublishMsg(ctx, msg)
	if streams.Refused(err) {
		m.bury(ctx, d, rec, rev, err) // a retry would be refused again
		return
	}
	if err != nil {
		m.retry(d, err)
		return
	}
	if rec != nil {
		_, _, err = m.l.store.Apply(ctx, rec, rev, kv.StateReady, kv.Actor{Action: "due"}, func(r *kv.Record) error {
			r.Bind(gen, ack.Stream, ack.Sequence)
			return nil
		})
		if errors.Is(err, kv.ErrConflict) {
			// A worker bound the copy first, or an operator moved the task
			// (paused or cancelled it): look again.
			m.retry(d, nil)
			return
		}
		if err != nil {
			m.retry(d, err)
			return
		}
	}
	m.done(ctx, d)
}

// held reports whether the release of a due task waits because its bucket
// refuses non-core tasks (backpressure). A release is a control-plane copy,
// which a refusing bucket admits; without the wait, a producer could fill
// AX_DELAYED while the bucket admits and have it all released into the room
// kept for core tasks. A task whose record says core (the Go client wrote
// it, for a core submit) is released. A held task is released once the
// bucket admits again: late, never lost.
func (m *mover) held(d *dueTask, rec *kv.Record) bool {
	prio := -1
	if rec != nil {
		if rec.Core {
			return false
		}
		prio = rec.Priority
	} else if s, err := m.l.cfg.Names.ParseSubmit(d.msg.Headers().Get(streams.HeaderSubject)); err == nil {
		prio = s.Priority
	}
	if prio < 0 || prio >= streams.Priorities || !m.l.refusing[prio].Load() {
		return false
	}
	m.log.Debug("release_held", zap.String("task_id", d.id), zap.Int("priority", prio))
	return true
}

// copyOf builds the bucket message of a due task and its generation, or
// false when a task without a record has no submit subject of its
// schedule's tenant to be released to.
func (m *mover) copyOf(d *dueTask, rec *kv.Record) (*nats.Msg, uint64, bool) {
	src := d.msg.Headers()
	names := m.l.cfg.Names
	gen := uint64(1)
	var subject string
	if rec != nil {
		subject = names.CopySubject(rec.Priority, rec.Tenant, rec.Type, rec.Key)
		gen = rec.Gen + 1
	} else if s, err := names.ParseSubmit(src.Get(streams.HeaderSubject)); err == nil && s.Tenant == d.ref.Tenant {
		subject = names.CopySubject(s.Priority, s.Tenant, s.Type, s.Key)
	} else {
		return nil, 0, false
	}
	msg := streams.TaskCopy(subject, d.msg.Data(), src, d.id, gen, nuid.Next(), streams.HeaderSubject)
	msg.Header.Set(streams.HeaderReleasedAt, time.Now().UTC().Format(time.RFC3339Nano))
	return msg, gen, true
}

// done deletes the fired schedule of a released or dropped task.
func (m *mover) done(ctx context.Context, d *dueTask) {
	if err := m.stream.DeleteMsg(ctx, d.seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		m.log.Warn("delete_due_failed", zap.String("task_id", d.id), zap.Error(err))
	}
}

// retry puts a task whose release failed (err, or nil for a lost
// compare-and-set) back, one second later.
func (m *mover) retry(d *dueTask, err error) {
	if err != nil {
		m.log.Warn("release_failed", zap.String("task_id", d.id), zap.Error(err))
	}
	m.recheck(d, time.Second)
}

// recheck puts a fired schedule back into the heap, due after wait.
func (m *mover) recheck(d *dueTask, wait time.Duration) { m.requeue(d, time.Now().Add(wait)) }

// requeue puts a fired schedule back into the heap, due at at.
func (m *mover) requeue(d *dueTask, at time.Time) {
	m.mu.Lock()
	d.runAt = at
	heap.Push(&m.pending, d)
	m.mu.Unlock()
	select {
	case m.wake <- struct{}{}:
	default:
	}
}
