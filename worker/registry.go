package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/ax-mesh/ax/axtype"
	"sync"
	"time"

	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
)

// Task is what a handler receives.
type Task struct {
	ID          string
	Type        string
	Tenant      string
	Key         string
	Priority    axtype.Priority // the task's bucket: Priority.Level() is its number
	Payload     []byte
	Attempt     int       // 1 for the first attempt
	EnqueuedAt  time.Time // when the task's current message entered its bucket
	MaxAttempts int
	Deadline    time.Time   // zero: none
	Headers     nats.Header // the message headers, "Ax-" ones included
	Worker      string      // id of the worker running it

	fence       Fence
	held        func() bool
	result      []byte         // set by SetResult
	resultLimit int            // Config.MaxResultBytes
	exec        *attemptRecord // nil for a Task a test built
	progress    *kv.Progress   // the last report of a Task a test built
}

// HandlerFunc runs a task. Its context is cancelled at the task's timeout
// (cause [ErrTimeout]), on operator cancel ([ErrCancelled]), when the
// worker stops past its grace period ([ErrStop]), when its claim lapses
// ([ErrClaimLapsed]) and when the worker loses its membership
// ([ErrLeaseLost]). A nil error completes the task, with the result set by
// [Task.SetResult] if any; [Permanent] sends it to
// the dead-letter stream; [RetryAfter] sets the delay; any other error
// retries with backoff while attempts remain.
//
// A handler must return soon after its context ends. Until it returns, the
// worker keeps the task's claim (heartbeating) and its slot, so the task
// does not run elsewhere; a handler that has not returned
// [Config.AbandonAfter] after its context ended is abandoned: its task is
// dead-lettered, its slot is reused, and its goroutine is left running
// (counted in [Stats].Abandoned). Before a side effect, a handler checks
// [Task.Held] and passes [Task.Fence] to the store it writes, which refuses
// a fence lower than one it has seen.
type HandlerFunc func(ctx context.Context, task *Task) error

// TypeConfig tunes one task type. Zero fields take the worker's defaults.
type TypeConfig struct {
	Timeout     time.Duration
	MaxAttempts int
	Backoff     Backoff
}

type handler struct {
	fn  HandlerFunc
	cfg TypeConfig
}

// Registry maps task types to handlers. It is safe for concurrent use.
type Registry struct {
	mu       sync.RWMutex
	handlers map[string]handler
	// narrowed is set by [Registry.Only]: the registry serves part of the
	// types on purpose, which only a pools deployment routes.
	narrowed bool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{handlers: map[string]handler{}} }

// Handle registers fn for taskType with an optional type configuration.
func (r *Registry) Handle(taskType string, fn HandlerFunc, cfg *TypeConfig) error {
	if err := streams.ValidateToken("task type", taskType); err != nil {
		return fmt.Errorf("register handler: %w", err)
	}
	if fn == nil {
		return fmt.Errorf("register handler %s: nil handler", taskType)
	}
	var c TypeConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Timeout < 0 || c.MaxAttempts < 0 {
		return fmt.Errorf("register handler %s: negative Timeout or MaxAttempts", taskType)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.handlers[taskType]; dup {
		return fmt.Errorf("register handler %s: already registered", taskType)
	}
	r.handlers[taskType] = handler{fn: fn, cfg: c}
	return nil
}

// HandleJSON registers a typed handler: the payload is decoded as JSON into
// T first, and a payload that does not decode sends the task to the
// dead-letter stream with the decoding error ([ErrBadPayload]).
func HandleJSON[T any](r *Registry, taskType string, fn func(ctx context.Context, task *Task, args T) error, cfg *TypeConfig) error {
	return r.Handle(taskType, func(ctx context.Context, task *Task) error {
		var args T
		if err := json.Unmarshal(task.Payload, &args); err != nil {
			return Permanent(fmt.Errorf("%w: type %s wants JSON: %w", ErrBadPayload, taskType, err))
		}
		return fn(ctx, task, args)
	}, cfg)
}

func (r *Registry) lookup(taskType string) (handler, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	h, ok := r.handlers[taskType]
	return h, ok
}

// Types returns the registered task types.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.handlers))
	for t := range r.handlers {
		out = append(out, t)
	}
	return out
}

// Only returns a registry with the handlers of types alone, for a worker
// that serves part of what a registry holds (a pool). A type not
// registered here is an error. A worker with such a registry starts only on
// a pools deployment: on the default layout every worker receives every
// type, and it would only put the others back ([ErrConfigMismatch]).
func (r *Registry) Only(types ...string) (*Registry, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := NewRegistry()
	out.narrowed = true
	for _, t := range types {
		h, ok := r.handlers[t]
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrNoHandler, t)
		}
		out.handlers[t] = h
	}
	return out, nil
}

// Args is the payload of one task type: Kind names the type and the
// value's JSON form is the payload. It is [axtype.Args], the producer's
// ax.Args.
type Args = axtype.Args

// HandleArgs registers a typed handler for the task type T.Kind(): the
// payload is decoded as JSON into T, as by [HandleJSON]. The producer
// submits the same T with ax's Client.SubmitJSON, so the type string
// and the payload's shape are written once.
func HandleArgs[T Args](r *Registry, fn func(ctx context.Context, task *Task, args T) error, cfg *TypeConfig) error {
	var zero T
	return HandleJSON(r, zero.Kind(), fn, cfg)
}
