package worker

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// Replies of a worker to a cancel notice.
const (
	// CancelReplyCancelled means the handler's context was cancelled.
	CancelReplyCancelled = "cancelled"
	// CancelReplyNoted means the task was not running here yet; it will be
	// cancelled as soon as it starts on this worker.
	CancelReplyNoted = "noted"
)

// cancelNotes matches operator cancel notices with running handlers. A
// notice that arrives between a claim and the handler's start is kept for
// a while, so that the handler is cancelled the moment it registers.
type cancelNotes struct {
	mu    sync.Mutex
	early map[string]time.Time // task record key -> when the notice arrived (mu)
	sub   *nats.Subscription
}

// noteTTL is how long a notice for a task that is not running is kept.
const noteTTL = time.Minute

// subscribeCancels listens on the worker's cancel subject. The operator
// writes CANCELLED first (a compare-and-set on the RUNNING record) and then
// sends the task's record key ("<tenant>.<id>", [kv.Ref.Key]) here; the
// handler's context ends with [ErrCancelled].
func (rn *runner) subscribeCancels() error {
	rn.cancels.early = map[string]time.Time{}
	subject := rn.cfg.Names.WorkerCancelSubject(rn.cfg.ID)
	sub, err := rn.js.Conn().Subscribe(subject, rn.onCancelNotice)
	if err != nil {
		return fmt.Errorf("subscribe to cancel notices on %s: %w", subject, err)
	}
	rn.cancels.sub = sub
	return nil
}

func (rn *runner) unsubscribeCancels() {
	if rn.cancels.sub != nil {
		_ = rn.cancels.sub.Unsubscribe()
	}
}

func (rn *runner) onCancelNotice(msg *nats.Msg) {
	id := string(msg.Data) // the task's record key
	reply := CancelReplyCancelled
	rn.cancels.mu.Lock()
	found := false
	rn.running.Range(func(_, e any) bool { // every execution of the task here
		if e := e.(execution); e.id == id {
			e.cancel(ErrCancelled)
			found = true
		}
		return true
	})
	if !found {
		now := time.Now()
		for other, at := range rn.cancels.early {
			if now.Sub(at) > noteTTL {
				delete(rn.cancels.early, other)
			}
		}
		rn.cancels.early[id] = now
		reply = CancelReplyNoted
	}
	rn.cancels.mu.Unlock()
	rn.log.Info("task_cancel_notice", zap.String("task_id", id), zap.String("result", reply))
	if msg.Reply != "" {
		_ = msg.Respond([]byte(reply))
	}
}

// execution is a running handler: its task's record key and the cancel func of its
// context. Executions are keyed by delivery, so that two executions of one
// task on this worker (a lapsed one still returning and its takeover) do
// not overwrite each other.
type execution struct {
	id     string
	cancel context.CancelCauseFunc
}

// track registers a running handler's cancel func under its delivery, and
// cancels it at once if an operator's notice arrived before it started.
func (rn *runner) track(d *delivery, id string, cancel context.CancelCauseFunc) {
	rn.cancels.mu.Lock()
	defer rn.cancels.mu.Unlock()
	rn.running.Store(d, execution{id: id, cancel: cancel})
	if _, ok := rn.cancels.early[id]; ok {
		delete(rn.cancels.early, id)
		cancel(ErrCancelled)
	}
}

// untrack forgets the execution of d.
func (rn *runner) untrack(d *delivery) { rn.running.Delete(d) }

// inFlight is the set of tasks (record keys: a task id belongs to its
// tenant) this worker is processing, from its claim
// to the settled outcome. A second delivery of a task whose first one is
// still in flight here (a lapsed execution whose handler has not returned
// yet, meeting its own redelivery) waits instead of taking it over, so that
// one worker never runs two executions of a task at once.
type inFlight struct {
	mu  sync.Mutex
	ids map[string]struct{} // (mu)
}

// enter marks id in flight, and reports false if it already was.
func (f *inFlight) enter(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.ids[id]; ok {
		return false
	}
	if f.ids == nil {
		f.ids = map[string]struct{}{}
	}
	f.ids[id] = struct{}{}
	return true
}

// leave marks id no longer in flight.
func (f *inFlight) leave(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ids, id)
}
