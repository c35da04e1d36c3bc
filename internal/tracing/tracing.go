// Package tracing carries W3C trace context through a task's messages and
// names the spans and attributes ax gives a task, with the OpenTelemetry
// API: the Go client injects the submit's context into the task's message
// (traceparent, tracestate), every copy ax makes of the message keeps them
// (streams.KeptHeaders), and a worker starts the task's spans as children
// of it. Spans are made only with a tracer provider configured; without
// one, nothing is allocated but the check.
package tracing

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation scope of ax's spans.
const TracerName = "github.com/ax-mesh/ax"

// The attributes of a task's spans.
const (
	AttrTaskID       = attribute.Key("ax.task.id")
	AttrTaskType     = attribute.Key("ax.task.type")
	AttrTaskTenant   = attribute.Key("ax.task.tenant")
	AttrTaskPriority = attribute.Key("ax.task.priority")
	AttrTaskAttempt  = attribute.Key("ax.task.attempt")
	AttrWorker       = attribute.Key("ax.worker")
)

var propagator = propagation.TraceContext{}

// Tracer returns ax's tracer of provider, or nil when provider is nil
// (tracing off).
func Tracer(provider trace.TracerProvider) trace.Tracer {
	if provider == nil {
		return nil
	}
	return provider.Tracer(TracerName)
}

// Task returns the attributes naming a task.
func Task(id, typ, tenant string, priority int) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String("messaging.system", "nats"),
		AttrTaskID.String(id), AttrTaskType.String(typ), AttrTaskTenant.String(tenant), AttrTaskPriority.Int(priority),
	}
}

// The attributes of a workflow's span.
const (
	AttrWorkflowID     = attribute.Key("ax.workflow.id")
	AttrWorkflowTenant = attribute.Key("ax.workflow.tenant")
	AttrWorkflowTasks  = attribute.Key("ax.workflow.tasks")
)

// Workflow returns the attributes naming a workflow.
func Workflow(id, tenant string, tasks int) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("messaging.system", "nats"),
		AttrWorkflowID.String(id), AttrWorkflowTenant.String(tenant), AttrWorkflowTasks.Int(tasks)}
}

// ExtractMap returns ctx with the remote span context headers carry, if
// any.
func ExtractMap(ctx context.Context, headers map[string]string) context.Context {
	return propagator.Extract(ctx, propagation.MapCarrier(headers))
}

// InjectMap writes the trace context of ctx (if it has a valid span
// context) into headers, creating the map if needed, and returns it.
func InjectMap(ctx context.Context, headers map[string]string) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return headers
	}
	out := make(map[string]string, len(headers)+2)
	for k, v := range headers {
		out[k] = v
	}
	propagator.Inject(ctx, propagation.MapCarrier(out))
	return out
}

// Extract returns ctx with the remote span context the message headers
// carry, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	if h == nil {
		return ctx
	}
	return propagator.Extract(ctx, headerCarrier(h))
}

// headerCarrier reads W3C trace context from NATS headers.
type headerCarrier nats.Header

func (c headerCarrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (c headerCarrier) Set(key, value string) { c[key] = []string{value} }

func (c headerCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
