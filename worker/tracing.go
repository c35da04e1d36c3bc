package worker

import (
	"context"
	"errors"

	"github.com/ax-mesh/ax/internal/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// taskTrace holds the spans of one delivery's processing ([Config.TracerProvider]):
// "ax.task <type>", a consumer span whose parent is the trace context the
// message carries (the submit's), and its children "ax.claim", "ax.run
// <type>" (started by the [Trace] middleware in the worker's chain; the
// handler's context carries it) and "ax.settle". A nil *taskTrace (tracing
// off) does nothing.
type taskTrace struct {
	tracer trace.Tracer
	span   trace.Span
}

// traceTask starts the task span of a delivery, or returns nil without a
// tracer provider.
func (rn *runner) traceTask(d *delivery, env *envelope) *taskTrace {
	if rn.tracer == nil {
		return nil
	}
	parent := tracing.Extract(context.Background(), d.msg.Headers())
	attrs := append(tracing.Task(env.id, env.stored.Type, env.stored.Tenant, env.stored.Priority),
		tracing.AttrWorker.String(rn.cfg.ID), attribute.Int64("ax.delivery", int64(env.delivered)))
	_, span := rn.tracer.Start(parent, "ax.task "+env.stored.Type, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	return &taskTrace{tracer: rn.tracer, span: span}
}

// step starts a child span of the task span; nil when tracing is off.
func (t *taskTrace) step(name string) trace.Span {
	if t == nil {
		return nil
	}
	_, span := t.tracer.Start(trace.ContextWithSpan(context.Background(), t.span), name)
	return span
}

// enterRun returns ctx carrying the task span, with the attempt set on
// it, so that the worker's Trace middleware starts the attempt's "ax.run"
// span as its child; ctx itself with tracing off.
func (t *taskTrace) enterRun(ctx context.Context, attempt int) context.Context {
	if t == nil {
		return ctx
	}
	t.span.SetAttributes(tracing.AttrTaskAttempt.Int(attempt))
	return trace.ContextWithSpan(ctx, t.span)
}

// end ends the task span.
func (t *taskTrace) end() {
	if t == nil {
		return
	}
	t.span.End()
}

// endSpan ends span (nil: nothing), marking it failed with err.
func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// errNotClaimed marks a claim span whose delivery did not run.
var errNotClaimed = errors.New("not claimed: the delivery does not run")
