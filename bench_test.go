package ax_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
)

func BenchmarkSubmit(b *testing.B) {
	bundle := axtest.Setup(b, axtest.Options{})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := bundle.Client.Submit(ctx, ax.TaskSpec{Type: "noop", Payload: make([]byte, 200)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tasks/s")
}

// BenchmarkSubmitBatch submits batches of 1,000 tasks, within the publish
// window (Config.MaxPending, 4,000), and of 5,000, beyond it (as ax bench
// throughput does).
func BenchmarkSubmitBatch(b *testing.B) {
	for _, batch := range []int{1, 10, 1000, 5000} {
		b.Run(fmt.Sprint(batch), func(b *testing.B) {
			bundle := axtest.Setup(b, axtest.Options{})
			ctx := context.Background()
			tasks := make([]ax.TaskSpec, batch)
			b.ReportAllocs()
			for b.Loop() {
				for i := range tasks {
					tasks[i] = ax.TaskSpec{Type: "noop", Priority: ax.PriorityOf(i % 5), Payload: make([]byte, 200)}
				}
				if _, err := bundle.Client.SubmitBatch(ctx, tasks); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "tasks/s")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/task")
		})
	}
}
