package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/tracing"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// The worker's built-ins run outside the user's middleware, in the
// documented order: a user middleware finds the task in its context
// (TaskContext) and runs in the attempt's "ax.run" span, a child of the
// task's span (Trace); a panic in it is recovered as a permanent failure
// (Recover), which the run span records.
func TestBuiltinMiddlewareOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	type view struct {
		task, handlerTask *worker.Task
		sameTask          bool
		span              string
		handlerSpan       trace.SpanContext
		spanContext       trace.SpanContext
	}
	views := make(chan view, 2)
	probe := func(next worker.HandlerFunc) worker.HandlerFunc {
		return func(ctx context.Context, task *worker.Task) error {
			if task.Headers.Get("Ax-Probe") == "panic" {
				panic("probe exploded")
			}
			var v view
			v.task, _ = worker.TaskFromContext(ctx)
			v.sameTask = v.task == task
			span := trace.SpanFromContext(ctx)
			if ro, ok := span.(sdktrace.ReadOnlySpan); ok {
				v.span = ro.Name()
			}
			v.spanContext = span.SpanContext()
			ctx = context.WithValue(ctx, probeKey{}, &v)
			err := next(ctx, task)
			views <- v
			return err
		}
	}
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("job", func(ctx context.Context, task *worker.Task) error {
		v := ctx.Value(probeKey{}).(*view)
		v.handlerTask, _ = worker.TaskFromContext(ctx)
		v.handlerSpan = trace.SpanContextFromContext(ctx)
		return nil
	}, nil))
	b.StartWorker(t, worker.Config{Registry: reg, MemberTTL: memberTTL, TracerProvider: provider, Middleware: []worker.Middleware{probe}})

	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "job", Tenant: "acme"})
	require.NoError(t, err)
	b.WaitState(t, info.ID, kv.StateSucceeded)
	v := <-views
	require.NotNil(t, v.task, "a user middleware finds the task in its context")
	require.True(t, v.sameTask, "the context's task is the one the middleware receives")
	require.Equal(t, info.ID, v.task.ID)
	require.Equal(t, "acme", v.task.Tenant)
	require.Same(t, v.task, v.handlerTask, "the handler finds the task in its context")
	require.Equal(t, "ax.run job", v.span, "a user middleware runs in the attempt's run span")
	require.Equal(t, v.spanContext, v.handlerSpan, "the handler's context carries the run span")
	// The task span ends when the delivery's processing returns, which may
	// be a moment after its SUCCEEDED record is seen.
	var parent string
	require.Eventually(t, func() bool {
		byID := map[trace.SpanID]tracetest.SpanStub{}
		for _, s := range exporter.GetSpans() {
			byID[s.SpanContext.SpanID()] = s
		}
		run, ok := byID[v.spanContext.SpanID()]
		parent = byID[run.Parent.SpanID()].Name
		return ok && parent != ""
	}, 5*time.Second, 5*time.Millisecond, "the run span or its parent did not end")
	require.Equal(t, "ax.task job", parent, "the run span is a child of the task span")

	info, err = b.Client.Submit(ctx, ax.TaskSpec{Type: "job", Headers: map[string]string{"Ax-Probe": "panic"}})
	require.NoError(t, err)
	rec := b.WaitState(t, info.ID, kv.StateDead)
	require.Contains(t, rec.LastError, "handler panicked: probe exploded")
	require.Equal(t, 1, rec.Attempt, "a panic in a middleware is not retried")
	var failed *tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		if s.Name == "ax.run job" && s.Status.Code == codes.Error {
			failed = &s
		}
	}
	require.NotNil(t, failed, "the run span of the panicking attempt ended")
	require.Contains(t, failed.Status.Description, "handler panicked: probe exploded")
}

type probeKey struct{}

// The built-ins are exported: a chain a user composes with them recovers a
// panic as a permanent failure (logged), runs in an "ax.run" span and
// carries the task in its context.
func TestBuiltinMiddlewareReusable(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.ErrorLevel)
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	var seen *worker.Task
	var spanned bool
	handler := func(ctx context.Context, task *worker.Task) error {
		seen, _ = worker.TaskFromContext(ctx)
		spanned = trace.SpanContextFromContext(ctx).IsValid()
		if string(task.Payload) == "boom" {
			panic("boom")
		}
		return nil
	}
	mw := []worker.Middleware{worker.Recover(zap.New(core)), worker.Trace(provider), worker.TaskContext()}
	fn := handler
	for i := len(mw) - 1; i >= 0; i-- {
		fn = mw[i](fn)
	}

	task := &worker.Task{ID: "t1", Type: "job", Tenant: "acme", Attempt: 1}
	require.NoError(t, fn(context.Background(), task))
	require.Same(t, task, seen)
	require.True(t, spanned)

	task = &worker.Task{ID: "t2", Type: "job", Tenant: "acme", Attempt: 2, Payload: []byte("boom")}
	err := fn(context.Background(), task)
	var permanent *worker.PermanentError
	require.True(t, errors.As(err, &permanent), "a panic is a permanent failure: %v", err)
	require.ErrorContains(t, err, "handler panicked: boom")
	panics := logs.FilterMessage("handler_panic").All()
	require.Len(t, panics, 1)
	require.Equal(t, "t2", panics[0].ContextMap()["task_id"])
	require.Equal(t, "boom", panics[0].ContextMap()["panic"])

	spans := exporter.GetSpans()
	require.Len(t, spans, 2)
	require.Equal(t, "ax.run job", spans[1].Name)
	require.Equal(t, codes.Error, spans[1].Status.Code)
	require.Contains(t, spans[1].Attributes, tracing.AttrTaskAttempt.Int(2))

	// Without a provider, Trace adds nothing; a context without a task has none.
	spanned = true
	require.NoError(t, worker.Trace(nil)(handler)(context.Background(), &worker.Task{Type: "job"}))
	require.False(t, spanned)
	_, ok := worker.TaskFromContext(context.Background())
	require.False(t, ok)
	_, ok = worker.TaskFromContext(worker.ContextWithTask(context.Background(), nil))
	require.False(t, ok)
}
