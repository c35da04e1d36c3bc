package ax_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// With a tracer provider, a submit makes a producer span and its message
// carries the span's trace context; without one, the message carries the
// trace context of the submit's ctx, and none when ctx has none.
func TestSubmitCarriesTraceContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	traced := axtest.Setup(t, axtest.Options{Client: &ax.Config{TracerProvider: provider}})
	info, err := traced.Client.Submit(ctx, ax.TaskSpec{ID: "traced", Type: "echo"})
	require.NoError(t, err)
	spans := exporter.GetSpans()
	require.Len(t, spans, 1)
	require.Equal(t, "ax.submit echo", spans[0].Name)
	require.Equal(t, trace.SpanKindProducer, spans[0].SpanKind)
	msg := natstest.GetMsg(t, traced.JS, info.Stream, info.Sequence)
	want := "00-" + spans[0].SpanContext.TraceID().String() + "-" + spans[0].SpanContext.SpanID().String() + "-01"
	require.Equal(t, want, msg.Header.Get(streams.HeaderTraceParent))

	plain := axtest.Setup(t, axtest.Options{})
	parentCtx, parent := provider.Tracer("caller").Start(ctx, "request")
	info, err = plain.Client.Submit(parentCtx, ax.TaskSpec{ID: "carried", Type: "echo"})
	parent.End()
	require.NoError(t, err)
	msg = natstest.GetMsg(t, plain.JS, info.Stream, info.Sequence)
	require.Equal(t, "00-"+parent.SpanContext().TraceID().String()+"-"+parent.SpanContext().SpanID().String()+"-01",
		msg.Header.Get(streams.HeaderTraceParent), "the caller's trace context travels without a provider")

	info, err = plain.Client.Submit(ctx, ax.TaskSpec{ID: "untraced", Type: "echo"})
	require.NoError(t, err)
	msg = natstest.GetMsg(t, plain.JS, info.Stream, info.Sequence)
	require.Empty(t, msg.Header.Get(streams.HeaderTraceParent))
}

// A task spec's own W3C trace context (a workflow's task, released by the
// leader) is continued: the submit span is its child and the message
// carries it. A malformed one is refused, nothing submitted.
func TestSubmitContinuesTheSpecsTraceContext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	b := axtest.Setup(t, axtest.Options{Client: &ax.Config{TracerProvider: provider}})
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	info, err := b.Client.Submit(ctx, ax.TaskSpec{Type: "echo", Headers: map[string]string{"traceparent": parent, "Ax-Note": "n"}})
	require.NoError(t, err)
	spans := exporter.GetSpans()
	require.Len(t, spans, 1)
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", spans[0].SpanContext.TraceID().String())
	require.Equal(t, "00f067aa0ba902b7", spans[0].Parent.SpanID().String(), "the submit span is the given context's child")
	msg := natstest.GetMsg(t, b.JS, info.Stream, info.Sequence)
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-"+spans[0].SpanContext.SpanID().String()+"-01", msg.Header.Get(streams.HeaderTraceParent))

	_, err = b.Client.Submit(ctx, ax.TaskSpec{Type: "echo", Headers: map[string]string{"traceparent": "00-bad"}})
	require.ErrorIs(t, err, ax.ErrInvalidTask)
	require.ErrorContains(t, err, `header "traceparent": "00-bad" is not a well-formed W3C trace context value`)
}
