package ax

import (
	"context"

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
	if c.tracer != nil {
		ctx, span = c.tracer.Start(ctx, "ax.submit "+t.Type, trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(tracing.Task(t.ID, t.Type, t.Tenant, t.Priority.level())...))
	}
	t.Headers = tracing.InjectMap(ctx, t.Headers)
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
