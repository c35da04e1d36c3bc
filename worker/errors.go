package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
)

var (
	// ErrStop is the cause of a handler context cancelled because the worker
	// is stopping; the task is put back, not failed.
	ErrStop = errors.New("worker stopping")
	// ErrTimeout is the cause of a handler context cancelled at the task's
	// timeout; the attempt counts as failed.
	ErrTimeout = errors.New("task timed out")
	// ErrNoHandler means no handler is registered for a task type
	// ([Registry.Only]). A worker never dead-letters a task for it: it
	// puts the task back for a worker that has the handler.
	ErrNoHandler = errors.New("no handler registered for task type")
	// ErrMalformed means a task message breaks the wire contract.
	ErrMalformed = errors.New("malformed task")
	// ErrUnschedulable means AX_DELAYED refused a delayed task's schedule
	// for what the message is (too large, a header it refuses): the task
	// is dead-lettered rather than retried forever.
	ErrUnschedulable = errors.New("delayed task cannot be scheduled")
	// ErrDeadlinePassed means the task's deadline passed before it started.
	ErrDeadlinePassed = errors.New("task deadline passed before it started")
	// ErrBadPayload means a typed handler could not decode the payload.
	ErrBadPayload = errors.New("bad task payload")
	// ErrLeaseLost is the cause of a handler context cancelled because the
	// worker lost its membership of the mesh (it could not renew within the
	// TTL); the task is put back if its record still says it runs here. It
	// wraps [kv.ErrLeaseLost]: errors.Is matches either sentinel.
	ErrLeaseLost = fmt.Errorf("worker membership lost: %w", kv.ErrLeaseLost)
	// ErrClaimLapsed is the cause of a handler context cancelled because the
	// task's message went without an in-progress heartbeat for nearly its
	// ack wait: JetStream may already have given it to another worker, so
	// this worker writes nothing and does not ack (it is fenced).
	ErrClaimLapsed = errors.New("task claim lapsed: no heartbeat within the ack wait")
	// ErrHandlerStuck means a handler did not return within
	// [Config.AbandonAfter] after its context ended: its task is
	// dead-lettered and its goroutine abandoned.
	ErrHandlerStuck = errors.New("handler ignores its context")
	// ErrAbandoned means a task's attempts were lost with their workers
	// (crashed, frozen or cut off while running it) past its last attempt:
	// it is dead-lettered without running again.
	ErrAbandoned = errors.New("task abandoned")
	// ErrConfigMismatch means a worker setting disagrees with the one the
	// deployment was provisioned with (the shard consumers' config).
	ErrConfigMismatch = errors.New("worker config disagrees with the provisioned consumers")
	// ErrResultTooLarge means a handler set a result larger than
	// [Config.MaxResultBytes], or one that would make its task's record
	// larger than the server takes: the attempt fails permanently (the task
	// is dead-lettered), since the same handler would return it again.
	ErrResultTooLarge = errors.New("task result too large")
	// ErrCancelled is the cause of a handler context cancelled because an
	// operator cancelled the task.
	ErrCancelled = errors.New("task cancelled by operator")
	// ErrLimitSlotLost is the cause of a handler context cancelled because
	// the worker no longer holds the slot of a concurrency limit its task
	// runs on: no renewal was confirmed within the slot's TTL (the worker
	// or the server was frozen or cut off), or a renewal found the slot
	// given to another task. [Task.Held] is false; the task is put back
	// READY, its attempt not counted, to run again on a slot of its own.
	ErrLimitSlotLost = errors.New("concurrency limit slot lost: not renewed within its TTL")
)

// PermanentError is a failure that must not be retried.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent marks err as permanent: the task goes to the dead-letter stream
// at once, whatever attempts remain.
func Permanent(err error) error {
	if err == nil {
		err = errors.New("permanent failure")
	}
	return &PermanentError{Err: err}
}

// RetryAfterError is a failure to retry after a given delay instead of the
// backoff formula. The attempt still counts.
type RetryAfterError struct {
	Delay time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("retry after %s: %s", e.Delay, e.Err.Error())
}
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter fails the attempt and asks for the next one after d.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errors.New("retry requested")
	}
	return &RetryAfterError{Delay: d, Err: err}
}

// retriesExhausted is the reason of a task that dies because no attempt
// remains: for a handler that asked for a retry ([RetryAfter]), it says the
// retries ran out and gives the handler's error ("retries exhausted
// (attempt 5 of 5): gateway busy"), not "retry after 500ms: gateway
// busy", which reads as if a retry were still coming. Any other cause is
// returned as is.
func retriesExhausted(cause error, attempt, maxAttempts int) error {
	var after *RetryAfterError
	var permanent *PermanentError
	if errors.As(cause, &permanent) || !errors.As(cause, &after) {
		return cause
	}
	return fmt.Errorf("retries exhausted (attempt %d of %d): %w", attempt, maxAttempts, after.Err)
}

// ActionNoHandler is the trail action of a task put back READY by a worker
// that has no handler for its type ([kv.ActionNoHandler]).
const ActionNoHandler = kv.ActionNoHandler
