package ax

import (
	"context"

	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/internal/tracing"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// traceSubmit starts the submit span of t (with a tracer provider) and
// writes the trace context of ctx, now the span's, into t's headers, so
// that it travels with the task's message. The span is nil without a
// tracer provider.
func (c *Client) traceSubmit(ctx context.Context, t *TaskSpec) (context.Context, trace.Span) {
	var span trace.Span
	if !trace.SpanContextFromContext(ctx).IsValid() && t.Headers[streams.HeaderTraceParent] != "" {
		// A task given its trace context (a workflow's, released by the
		// leader): its submit span goes on in that trace.
		ctx = tracing.ExtractMap(ctx, t.Headers)
	}
	if c.tracer != nil {
		ctx, span = c.tracer.Start(ctx, "ax.submit "+t.Type, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(tracing.Task(t.ID, t.Type, t.Tenant, level(t.Priority))...))
	}
	t.Headers = tracing.InjectMap(ctx, t.Headers)
	return ctx, span
}

// traceWorkflow starts the span of a workflow's run, "ax.workflow" (an
// atomic batch's: "ax.batch"), with a tracer provider, and sets the
// workflow's trace context ([Workflow.Trace]) to the span's, or without
// one to that of ctx, if any: each task of the workflow carries it when
// released, so that its spans are children of this one. A trace context
// the workflow was given is kept when ctx has none.
func (c *Client) traceWorkflow(ctx context.Context, wf *Workflow) (context.Context, trace.Span) {
	var span trace.Span
	if !trace.SpanContextFromContext(ctx).IsValid() && len(wf.Trace) > 0 {
		ctx = tracing.ExtractMap(ctx, wf.Trace)
	}
	if c.tracer != nil {
		name := "ax.workflow"
		if wf.Batch {
			name = "ax.batch"
		}
		ctx, span = c.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(tracing.Workflow(wf.ID, wf.Tenant, len(wf.Tasks))...))
	}
	if trace.SpanContextFromContext(ctx).IsValid() {
		wf.Trace = tracing.InjectMap(ctx, nil)
	}
	return ctx, span
}

// endSpan ends span (if any), marking it failed with err.
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
