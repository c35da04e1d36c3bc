package worker

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/internal/tracing"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Middleware wraps every handler the worker runs: it receives the next
// handler of the chain and returns the handler to run in its place. A
// middleware sees the task's context (its timeout, the cause of its end,
// the task itself through [TaskFromContext], the "ax.run" span when
// tracing is on) and the task, its [Task.Headers] included, before and
// after next runs; it may change the context it passes on, return without
// calling next (the task's outcome is then what it returns), or turn
// next's error into another.
//
// A worker runs every task in one chain, outermost first:
//
//	Recover → Trace (with [Config.TracerProvider]) → TaskContext → Config.Middleware… → handler
//
// [Recover] turns a panic anywhere inside it (a middleware or the
// handler) into a permanent failure, "handler panicked"; [Trace] runs the
// rest in the "ax.run <type>" span, a child of the task's span; and
// [TaskContext] puts the task in the context. [Config.Middleware] lists
// the user's middleware, the first outermost: with []Middleware{a, b} the
// chain runs a(b(handler)) inside the built-ins. The worker composes the
// chain once per task type, the first time it runs one: the function a
// middleware returns serves every task of the type, concurrently.
//
// The worker's outcome logging, metrics ([Observer]) and record writes
// are not middleware: they report the settled outcome (retried, dead,
// cancelled, put back, or nothing when the claim was lost), which is
// decided after the chain returns, from its error, the attempts left, the
// cause of the context's end and the compare-and-set of the record; some
// outcomes are decided without running the chain at all (a bad payload, a
// passed deadline, a burial). A middleware sees the chain's error before
// that decision.
type Middleware func(next HandlerFunc) HandlerFunc

// chain wraps fn in middleware, the first outermost.
func chain(fn HandlerFunc, middleware []Middleware) HandlerFunc {
	for i := len(middleware) - 1; i >= 0; i-- {
		fn = middleware[i](fn)
	}
	return fn
}

// Recover returns the middleware that turns a panic in the rest of the
// chain (a middleware inside it or the handler) into a permanent failure,
// "handler panicked: <value>" ([Permanent]): the task is dead-lettered
// without a retry, since the handler would likely panic again. With a
// logger, each panic is logged at error level as "handler_panic" with the
// task's id (and trace id), the panic's value and the stack. The worker
// runs every task inside Recover, outermost.
func Recover(logger *zap.Logger) Middleware {
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, task *Task) (err error) {
			defer func() {
				if r := recover(); r != nil {
					err = panicked(r)
					if logger != nil {
						logger.Error("handler_panic", zap.Inline(taskLog{id: task.ID, traceID: streams.TraceID(task.Headers)}),
							zap.Any("panic", r), zap.ByteString("stack", debug.Stack()))
					}
				}
			}()
			return next(ctx, task)
		}
	}
}

// panicked is the failure of a chain that panicked with r.
func panicked(r any) error { return Permanent(fmt.Errorf("handler panicked: %v", r)) }

// Trace returns the middleware that runs the rest of the chain in a span
// "ax.run <type>" of provider's ax tracer, a child of the span ctx carries
// (in a worker, the delivery's "ax.task <type>"), with the task's id,
// type, tenant, priority and attempt. The span ends when the chain
// returns, with status Error and the error recorded if it failed, or when
// a panic passes through it. The context the rest of the chain receives
// carries the span, so the handler's own spans are its children. A nil
// provider gives a middleware that adds nothing. A worker with a
// [Config.TracerProvider] runs every task inside it, just inside
// [Recover]; add it to [Config.Middleware] only to trace with another
// provider.
func Trace(provider trace.TracerProvider) Middleware {
	tracer := tracing.Tracer(provider)
	if tracer == nil {
		return func(next HandlerFunc) HandlerFunc { return next }
	}
	return traceRun(tracer)
}

// traceRun is [Trace] with tracer.
func traceRun(tracer trace.Tracer) Middleware {
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, task *Task) (err error) {
			level, _ := task.Priority.Level()
			attrs := append(tracing.Task(task.ID, task.Type, task.Tenant, level), tracing.AttrTaskAttempt.Int(task.Attempt))
			ctx, span := tracer.Start(ctx, "ax.run "+task.Type, trace.WithAttributes(attrs...))
			defer func() {
				if r := recover(); r != nil {
					endSpan(span, panicked(r))
					panic(r) // to Recover, outside
				}
			}()
			err = next(ctx, task)
			endSpan(span, err)
			return err
		}
	}
}

// taskKey is the context key of [ContextWithTask].
type taskKey struct{}

// ContextWithTask returns a copy of ctx that carries task, for
// [TaskFromContext] (the worker's [TaskContext] calls it; a test of code
// that reads the task from its context may too).
func ContextWithTask(ctx context.Context, task *Task) context.Context {
	return context.WithValue(ctx, taskKey{}, task)
}

// TaskFromContext returns the task a handler's context carries, its
// tenant, id, type and attempt included, so that code deep in a handler
// (a store choosing the tenant's schema, a logger naming the task) need
// not be handed it. It is the same *Task the handler receives. ok is
// false when ctx carries none.
func TaskFromContext(ctx context.Context) (task *Task, ok bool) {
	task, ok = ctx.Value(taskKey{}).(*Task)
	return task, ok && task != nil
}

// TaskContext returns the middleware that passes the rest of the chain a
// context carrying the task ([ContextWithTask], read with
// [TaskFromContext]). The worker runs every task inside it, so that the
// user's [Config.Middleware] and the handler find the task, its tenant
// and id, in their context.
func TaskContext() Middleware {
	return func(next HandlerFunc) HandlerFunc {
		return func(ctx context.Context, task *Task) error {
			return next(ContextWithTask(ctx, task), task)
		}
	}
}

// chains holds a worker's handlers wrapped in its middleware, composed
// once per task type.
type chains struct {
	middleware []Middleware // the built-ins, then Config.Middleware
	mu         sync.RWMutex
	byType     map[string]HandlerFunc
}

// newChains returns the chains of a worker with cfg, logging panics to
// logger and tracing with tracer (nil: off, and no Trace in the chain).
func newChains(cfg *Config, logger *zap.Logger, tracer trace.Tracer) *chains {
	mw := []Middleware{Recover(logger)}
	if tracer != nil {
		mw = append(mw, traceRun(tracer))
	}
	mw = append(mw, TaskContext())
	mw = append(mw, cfg.Middleware...)
	return &chains{middleware: mw, byType: map[string]HandlerFunc{}}
}

// of returns the handler h of taskType wrapped in the chain, composing it
// the first time.
func (c *chains) of(taskType string, h HandlerFunc) HandlerFunc {
	c.mu.RLock()
	fn, ok := c.byType[taskType]
	c.mu.RUnlock()
	if ok {
		return fn
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if fn, ok := c.byType[taskType]; ok {
		return fn
	}
	fn = chain(h, c.middleware)
	c.byType[taskType] = fn
	return fn
}
