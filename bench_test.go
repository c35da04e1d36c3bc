package ax_test

import (
	"context"
	"testing"

	"github.com/ax-mesh/ax"
)

func BenchmarkSubmit(b *testing.B) {
	bundle := setup(b, nil, nil)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bundle.client.Submit(ctx, ax.TaskSpec{Type: "noop", Payload: make([]byte, 200)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}

func BenchmarkSubmitBatch(b *testing.B) {
	bundle := setup(b, nil, nil)
	ctx := context.Background()
	const batch = 1000
	tasks := make([]ax.TaskSpec, batch)
	b.ReportAllocs()
	for b.Loop() {
		for i := range tasks {
			tasks[i] = ax.TaskSpec{Type: "noop", Priority: ax.PriorityOf(i % 5), Payload: make([]byte, 200)}
		}
		if _, err := bundle.client.SubmitBatch(ctx, tasks); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tasks/s")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/task")
}
