package integration

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/tracing"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A workflow run is one trace: SubmitWorkflow starts the "ax.workflow"
// span and every task's span, released by the leader after its parents,
// is its child (docs/API.md, "Tracing"). An atomic batch is one trace the
// same way ("ax.batch"). Without a tracer provider on the client, the
// tasks are children of the submit's own span. Spans are recorded by the
// OpenTelemetry SDK's in-memory exporter.
func TestWorkflowIsOneTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })

	dep := axtest.Setup(t, axtest.Options{Client: &ax.Config{TracerProvider: provider}})
	dep.StartLeader(t, scheduler.Config{})
	reg := worker.NewRegistry()
	for _, typ := range []string{"fetch", "resize", "publish", "mail"} {
		require.NoError(t, reg.Handle(typ, func(context.Context, *worker.Task) error { return nil }, nil))
	}
	dep.StartWorker(t, worker.Config{Registry: reg, TracerProvider: provider})

	wf := ax.NewWorkflow("traced")
	wf.Add("fetch", ax.TaskSpec{Type: "fetch"})
	wf.Group(ax.Step{Name: "thumb", Spec: ax.TaskSpec{Type: "resize"}}, ax.Step{Name: "full", Spec: ax.TaskSpec{Type: "resize"}}).
		Then(ax.Step{Name: "publish", Spec: ax.TaskSpec{Type: "publish"}})
	wf.Tasks[1].After, wf.Tasks[2].After = []string{"fetch"}, []string{"fetch"}
	_, err := dep.Client.SubmitWorkflow(ctx, wf)
	require.NoError(t, err)
	batch, err := dep.Client.SubmitBatch(ctx, []ax.TaskSpec{{ID: "mail-1", Type: "mail"}, {ID: "mail-2", Type: "mail"}}, ax.Atomic())
	require.NoError(t, err)

	// Without a provider on the client, the tasks continue the caller's span.
	plain, err := ax.NewClient(ctx, dep.JS, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = plain.Close() })
	callerCtx, caller := provider.Tracer("caller").Start(ctx, "request")
	_, err = plain.SubmitWorkflow(callerCtx, ax.NewWorkflow("carried").Chain(
		ax.Step{Name: "a", Spec: ax.TaskSpec{Type: "mail"}}, ax.Step{Name: "b", Spec: ax.TaskSpec{Type: "mail"}}))
	caller.End()
	require.NoError(t, err)

	for _, id := range []string{"traced/fetch", "traced/thumb", "traced/full", "traced/publish", batch[0].ID, batch[1].ID, "carried/a", "carried/b"} {
		dep.WaitState(t, id, kv.StateSucceeded)
	}
	require.NoError(t, provider.ForceFlush(ctx))

	spans := exporter.GetSpans()
	roots := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		if s.Name == "ax.workflow" || s.Name == "ax.batch" {
			roots[s.Name] = s
		}
	}
	require.Contains(t, roots, "ax.workflow")
	require.Contains(t, roots, "ax.batch")
	require.Equal(t, trace.SpanKindProducer, roots["ax.workflow"].SpanKind)
	require.Contains(t, roots["ax.workflow"].Attributes, tracing.AttrWorkflowID.String("traced"))
	parentOf := map[string]trace.SpanContext{} // a task's span -> the span it is a child of
	traceOf := map[string]trace.TraceID{}
	for _, s := range spans {
		if s.SpanKind != trace.SpanKindConsumer {
			continue
		}
		for _, a := range s.Attributes {
			if a.Key == tracing.AttrTaskID {
				parentOf[a.Value.AsString()] = s.Parent
				traceOf[a.Value.AsString()] = s.SpanContext.TraceID()
			}
		}
	}
	want := map[string]trace.SpanContext{
		"traced/fetch": roots["ax.workflow"].SpanContext, "traced/thumb": roots["ax.workflow"].SpanContext,
		"traced/full": roots["ax.workflow"].SpanContext, "traced/publish": roots["ax.workflow"].SpanContext,
		batch[0].ID: roots["ax.batch"].SpanContext, batch[1].ID: roots["ax.batch"].SpanContext,
		"carried/a": caller.SpanContext(), "carried/b": caller.SpanContext(),
	}
	for id, root := range want {
		require.Contains(t, parentOf, id, "task %s has a span", id)
		require.Equal(t, root.TraceID(), traceOf[id], "task %s is in its workflow's trace", id)
		require.Equal(t, root.SpanID(), parentOf[id].SpanID(), "task %s's span is a child of its workflow's span", id)
	}
	require.NotEqual(t, roots["ax.workflow"].SpanContext.TraceID(), roots["ax.batch"].SpanContext.TraceID(), "one trace per run")
}
