package integration

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/internal/tracing"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// A task that was delayed, aged, retried twice, dead-lettered and replayed
// is one trace: the submit's span is the root, every delivery's task span
// is its child (through the delayed release, the aging copy, the retries
// and the replay's copy, all of which carry the trace context), and the
// handler's own spans are children of its run span. Spans are recorded by
// the OpenTelemetry SDK's in-memory exporter.
func TestTaskTraceIsOneTrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })

	dep := axtest.Setup(t, axtest.Options{Streams: &streams.Config{AckWait: 5 * time.Second}, Client: &ax.Config{TracerProvider: provider}})
	api := dep.StartAdmin(t, nil)
	dep.StartLeader(t, scheduler.Config{AgingThreshold: 500 * time.Millisecond, AckWait: 5 * time.Second})
	client := dep.Client

	var runs atomic.Int32
	handlerTracer := provider.Tracer("handler")
	reg := worker.NewRegistry()
	require.NoError(t, reg.Handle("traced", func(ctx context.Context, task *worker.Task) error {
		_, span := handlerTracer.Start(ctx, "handler work")
		span.End()
		if runs.Add(1) <= 3 {
			return worker.RetryAfter(10*time.Millisecond, errors.New("not yet"))
		}
		return nil
	}, nil))

	// Delayed, at P4, and no worker yet: released after a second, then
	// aged (lifted a priority) while it waits.
	info, err := client.Submit(ctx, ax.TaskSpec{Type: "traced", Priority: ax.P4, Delay: time.Second, MaxAttempts: 3})
	require.NoError(t, err)
	ref := kv.Ref{Tenant: info.Tenant, ID: info.ID}
	require.Eventually(t, func() bool {
		rec, _, err := client.Store().Get(ctx, ref)
		return err == nil && rec.State == kv.StateReady && rec.Priority < 4
	}, 30*time.Second, 20*time.Millisecond, "the task was released and aged")

	dep.StartWorker(t, worker.Config{Registry: reg, AckWait: 5 * time.Second, TracerProvider: provider})
	dep.WaitState(t, info.ID, kv.StateDead) // three attempts failed
	_, err = api.Replay(ctx, admin.DLQReplayRequest{ID: info.ID})
	require.NoError(t, err)
	dep.WaitState(t, info.ID, kv.StateSucceeded)
	require.NoError(t, provider.ForceFlush(ctx))

	spans := exporter.GetSpans()
	var submit *tracetest.SpanStub
	for i := range spans {
		if spans[i].Name == "ax.submit traced" {
			submit = &spans[i]
		}
	}
	require.NotNil(t, submit, "the submit span")
	traceID := submit.SpanContext.TraceID()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	var tasks, runSpans, handlerSpans int
	for _, s := range spans {
		require.Equal(t, traceID, s.SpanContext.TraceID(), "span %q is in the submit's trace", s.Name)
		byID[s.SpanContext.SpanID()] = s
	}
	for _, s := range spans {
		switch {
		case s.Name == "ax.task traced":
			tasks++
			require.Equal(t, submit.SpanContext.SpanID(), s.Parent.SpanID(), "a delivery's task span is the submit's child")
			require.Equal(t, trace.SpanKindConsumer, s.SpanKind)
			require.True(t, slices.Contains(s.Attributes, tracing.AttrTaskID.String(info.ID)), "task span names the task")
		case s.Name == "ax.run traced":
			runSpans++
			require.Equal(t, "ax.task traced", byID[s.Parent.SpanID()].Name)
		case s.Name == "handler work":
			handlerSpans++
			require.Equal(t, "ax.run traced", byID[s.Parent.SpanID()].Name, "the handler's context carries the run span")
		}
	}
	require.Equal(t, 4, runSpans, "three failed attempts and the replayed one")
	require.GreaterOrEqual(t, tasks, 4)
	require.Equal(t, 4, handlerSpans)
}
