package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/move"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

// release moves one due task into its bucket through the move protocol
// ([move.Mover.Move]): publish a copy (a Nats-Msg-Id unique to this
// release), move the record PENDING -> READY naming the copy as its current
// message, delete the fired schedule. A worker that meets the copy first
// binds the record to it itself (a released copy of a PENDING task is its
// next message), so a lost compare-and-set keeps the copy. A failure leaves
// the fired schedule for the next pass or the next leader; a second copy
// that a retry publishes is dropped by workers, since the record names only
// one. A task is never released before its record's run time. A copy its
// bucket refuses for what it is ([streams.Refused]: too large, say) would
// be refused forever: the task is buried instead ([mover.bury]); one a full
// bucket refuses is released again a second later.
func (m *mover) release(ctx context.Context, d *dueTask) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rec, rev, err := m.l.store.Get(ctx, d.ref)
	var foreign *kv.ForeignError
	switch {
	case errors.Is(err, kv.ErrNotFound):
		rec = nil // the submit's record write failed: the worker creates it
	case errors.As(err, &foreign):
		// A value ax did not write there (docs/SECURITY.md): released as a
		// task without a record, from its schedule; the worker that takes
		// the copy rebuilds the record from it ([kv.Store.Repair]).
		m.log.Warn("due_task_record_foreign", zap.String("task_id", d.id), zap.String("tenant", d.ref.Tenant),
			zap.Uint64("revision", foreign.Revision), zap.ByteString("value", foreign.Value))
		if m.l.cfg.OnForeignValue != nil {
			m.l.cfg.OnForeignValue(m.l.cfg.Names.TasksBucket(), "released_first")
		}
		rec = nil
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
	task, ok := m.target(d, rec)
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
	set := nats.Header{}
	set.Set(streams.HeaderReleasedAt, time.Now().UTC().Format(time.RFC3339Nano))
	c := move.Copy{Data: d.msg.Data(), Header: d.msg.Headers(), Drop: []string{streams.HeaderSubject}, Set: set}
	schedule := move.Message{Stream: m.l.cfg.Names.DelayedStream(), Seq: d.seq}
	var res move.Result
	if rec != nil {
		res, err = m.l.moves.Move(ctx, move.Request{Record: rec, Revision: rev, To: kv.StateReady, Priority: task.Priority,
			Actor: kv.Actor{Action: "due"}, Copy: c, Old: schedule, Guard: m.l.guard})
	} else {
		res, err = m.l.moves.PublishFirst(ctx, move.FirstRequest{ID: d.id, Task: task, Copy: c, Old: schedule, Guard: m.l.guard})
	}
	m.l.tenants.note(d.ref.Tenant, task.Priority) // its first task in a bucket may be this copy
	switch {
	case res.Outcome == move.Landed:
		if res.DeleteErr != nil {
			m.log.Warn("delete_due_failed", zap.String("task_id", d.id), zap.Error(res.DeleteErr))
		}
	case errors.Is(err, errNotLeading):
		// No longer leading: the fired schedule stays for the next leader
		// (a copy already published is kept: a worker may bind it).
	case res.Outcome == move.Lost:
		// A worker bound the copy first, or an operator moved the task
		// (paused or cancelled it): look again.
		m.retry(d, nil)
	case res.Outcome == 0 && streams.Refused(err):
		m.bury(ctx, d, rec, rev, err) // a retry would be refused again
	default: // unclear (the copy is kept), a full bucket, a failed publish
		m.retry(d, err)
	}
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

// target names the bucket a due task is released to (its tenant, type,
// key and priority): its record's, or for a task without a record its
// schedule's submit subject; false when that subject does not parse or
// names another tenant than the schedule's.
func (m *mover) target(d *dueTask, rec *kv.Record) (streams.Stored, bool) {
	if rec != nil {
		return streams.Stored{Priority: rec.Priority, Tenant: rec.Tenant, Type: rec.Type, Key: rec.Key}, true
	}
	s, err := m.l.cfg.Names.ParseSubmit(d.msg.Headers().Get(streams.HeaderSubject))
	return s, err == nil && s.Tenant == d.ref.Tenant
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
