package ax

import (
	"context"
	"errors"
	"fmt"
	"github.com/ax-mesh/ax/axtype"

	"github.com/ax-mesh/ax/internal/denied"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

var (
	// ErrNotFinished means the task has not ended yet: [Client.Result]
	// found it PENDING, READY, RUNNING, RETRYING or PAUSED.
	ErrNotFinished = errors.New("task has not finished")
	// ErrNotSucceeded is matched by a [*TaskEndedError]: the task ended
	// DEAD or CANCELLED, without a result.
	ErrNotSucceeded = errors.New("task did not succeed")
)

// TaskEndedError is the error of [Client.Result] and [Client.Wait] for a
// task that ended without succeeding. It matches [ErrNotSucceeded].
type TaskEndedError struct {
	Tenant string
	ID     string
	// State is DEAD or CANCELLED.
	State axtype.State
	// LastError is the task's last error (why it is DEAD), cut to
	// [MaxErrorLen]; empty for most cancelled tasks.
	LastError string
}

// Error says how the task ended: "task order-42 (tenant acme) ended DEAD:
// permanent: …".
func (e *TaskEndedError) Error() string {
	msg := fmt.Sprintf("task %s ended %s", kv.Ref{Tenant: e.Tenant, ID: e.ID}, e.State)
	if e.LastError != "" {
		msg += ": " + e.LastError
	}
	return msg
}

// Unwrap makes the error match [ErrNotSucceeded].
func (e *TaskEndedError) Unwrap() error { return ErrNotSucceeded }

// ref names a task; an empty tenant is [DefaultTenant], as in a [TaskSpec].
func ref(tenant, id string) kv.Ref {
	if tenant == "" {
		tenant = DefaultTenant
	}
	return kv.Ref{Tenant: tenant, ID: id}
}

// outcome is the result of a record: its result if SUCCEEDED, a
// [*TaskEndedError] if DEAD or CANCELLED; done is false for any other state.
func outcome(rec *kv.Record) (result []byte, done bool, err error) {
	switch rec.State {
	case kv.StateSucceeded:
		return rec.Result, true, nil
	case kv.StateDead, kv.StateCancelled:
		return nil, true, &TaskEndedError{Tenant: rec.Tenant, ID: rec.ID, State: rec.State, LastError: rec.LastError}
	}
	return nil, false, nil
}

// Result returns the result of task id of tenant (empty: [DefaultTenant]):
// what its handler set with the worker's Task.SetResult, nil if it set
// none. A task that ended DEAD or CANCELLED gives a [*TaskEndedError], one
// that has not ended [ErrNotFinished] (so does one waiting in its bucket
// for the worker that writes its first record), one without a record
// (unknown, or expired past the record's retention) an error matching
// [ErrNotFound]. It reads the record once (a direct get, which every client role of
// docs/ax-permissions.conf may make for its tenants); a publish-only
// client gets [ErrPublishOnly].
func (c *Client) Result(ctx context.Context, tenant, id string) ([]byte, error) {
	r := ref(tenant, id)
	if c.cfg.PublishOnly {
		return nil, fmt.Errorf("result of task %s: %w", r, ErrPublishOnly)
	}
	rec, err := c.read(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("result of task %s: %w", r, err)
	}
	result, done, err := outcome(rec)
	if !done {
		return nil, fmt.Errorf("result of task %s: it is %s: %w", r, rec.State, ErrNotFinished)
	}
	return result, err
}

// Wait waits until task id of tenant (empty: [DefaultTenant]) ends and
// returns what [Client.Result] would: its result when it SUCCEEDED, a
// [*TaskEndedError] (final state and last error) when it ended DEAD or
// CANCELLED. It does not poll: it watches the task's record key in
// AX_TASKS (a KV watch, an ordered consumer filtered on the key), so it
// returns as soon as the final write is delivered. A task without a record
// yet (published raw, not seen by a worker) is waited for; so is one whose
// record is gone (expired, or deleted by a resume of a task paused before it
// was seen), and one whose record key holds a value ax did not write there
// (logged; the worker that takes its message rebuilds the record): bound
// the wait with ctx, whose error then ends it.
//
// The watch needs permissions the client roles of docs/ax-permissions.conf
// do not have: creating a consumer on KV_AX_TASKS
// ($JS.API.CONSUMER.CREATE.KV_AX_TASKS.>), answering its flow control
// ($JS.FC.KV_AX_TASKS.>) and deleting it ($JS.API.CONSUMER.DELETE.KV_AX_TASKS.*):
// the scheduler role has them, and a service given them may wait. Without
// them Wait fails at once with an error naming the user and the subject
// (it matches nats.ErrPermissionViolation); such a client reads the
// outcome with [Client.Result]. A publish-only client gets [ErrPublishOnly].
func (c *Client) Wait(ctx context.Context, tenant, id string) ([]byte, error) {
	r := ref(tenant, id)
	if c.cfg.PublishOnly {
		return nil, fmt.Errorf("wait for task %s: %w", r, ErrPublishOnly)
	}
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("wait for task %s: %w", r, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the watch
	watcher, err := c.watchRecord(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("wait for task %s: %w", r, err)
	}
	defer func() { _ = watcher.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for task %s: %w", r, context.Cause(ctx))
		case entry, ok := <-watcher.Updates():
			if !ok {
				return nil, fmt.Errorf("wait for task %s: the watch of its record ended", r)
			}
			if entry == nil || entry.Operation() != jetstream.KeyValuePut {
				continue // the end of the initial values, or a deleted record
			}
			var rec kv.Record
			err := rec.UnmarshalJSON(entry.Value())
			if err == nil && rec.Ref() != r {
				err = fmt.Errorf("the record names task %s", rec.Ref())
			}
			if err != nil {
				// A value ax did not write there (docs/SECURITY.md, "What a
				// forged value does"): the worker that takes the task's
				// message rebuilds the record, which comes on the watch; a
				// task with no message left never ends, and ctx bounds the
				// wait.
				c.cfg.Logger.Warn("wait_record_foreign", zap.String("task_id", r.ID), zap.String("tenant", r.Tenant),
					zap.Uint64("revision", entry.Revision()), zap.Error(err))
				continue
			}
			if result, done, err := outcome(&rec); done {
				return result, err
			}
		}
	}
}

// watchRecord starts a watch of r's record key that lives until ctx ends,
// failing at once, with a [*denied.Error], when the server refuses the
// connection's user the consumer it needs.
func (c *Client) watchRecord(ctx context.Context, r kv.Ref) (jetstream.KeyWatcher, error) {
	guard, refused := denied.Watch(ctx, c.js.Conn())
	defer guard.Stop()
	type started struct {
		watcher jetstream.KeyWatcher
		err     error
	}
	watchCtx, cancel := context.WithCancel(ctx)
	ch := make(chan started, 1)
	go func() {
		w, err := c.store.Bucket().Watch(watchCtx, r.Key())
		ch <- started{w, err}
	}()
	select {
	case s := <-ch:
		if s.err != nil {
			cancel()
			return nil, guard.Err(s.err)
		}
		go func() { <-ctx.Done(); cancel() }()
		return s.watcher, nil
	case <-refused.Done():
		cancel()
		if s := <-ch; s.err == nil {
			_ = s.watcher.Stop()
		}
		err := guard.Err(context.Cause(refused))
		var d *denied.Error
		if errors.As(err, &d) {
			d.Hint = "Client.Wait watches the task's record (consumer create on KV_AX_TASKS); without that grant read it with Client.Result"
		}
		return nil, err
	}
}
