package ax_test

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A client and a worker given one tracer provider make one trace of a
// task: the submit's span, and the delivery's task span with its claim,
// run and settle. Use an exporter of your own (OTLP, say) in place of the
// in-memory one.
func Example_tracing() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url, stop := axtest.RunDeployment(ctx)
	defer stop()
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	reg := worker.NewRegistry()
	_ = reg.Handle("greet", func(context.Context, *worker.Task) error { return nil }, nil)
	w, _ := worker.New(ctx, js, &worker.Config{Registry: reg, TracerProvider: tp})
	_ = w.Start(ctx)
	defer func() { _ = w.Stop(context.Background()) }()
	client, _ := ax.NewClient(ctx, js, &ax.Config{TracerProvider: tp})
	defer func() { _ = client.Close() }()
	_, _ = client.Submit(ctx, ax.TaskSpec{Type: "greet"})

	// The task span ends once the delivery is settled.
	var names []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		names = names[:0]
		for _, s := range exporter.GetSpans() {
			names = append(names, s.Name)
		}
		if slices.Contains(names, "ax.task greet") {
			break
		}
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Println(name)
	}
	traces := map[string]bool{}
	for _, s := range exporter.GetSpans() {
		traces[s.SpanContext.TraceID().String()] = true
	}
	fmt.Println("traces:", len(traces))
	// Output:
	// ax.claim
	// ax.run greet
	// ax.settle
	// ax.submit greet
	// ax.task greet
	// traces: 1
}
