package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/worker"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// BenchmarkEndToEnd measures no-op tasks from a submitted backlog to
// SUCCEEDED records and acks, with one worker of 64 slots.
func BenchmarkEndToEnd(b *testing.B) {
	for _, tc := range []struct {
		name     string
		priority func(i int) int
		raw      bool // plain publishes: no record until a worker's first sight
	}{
		{"P2", func(int) int { return 2 }, false},
		{"mixed", func(i int) int { return i % 5 }, false},
		{"raw-P2", func(int) int { return 2 }, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			bundle := setup(b, nil)
			ctx := context.Background()
			n := max(b.N, 1000)
			tasks := make([]ax.TaskSpec, n)
			for i := range tasks {
				tasks[i] = ax.TaskSpec{Type: "noop", Priority: ax.PriorityOf(tc.priority(i)), Payload: make([]byte, 200)}
			}
			if tc.raw {
				for i := range tasks {
					_, err := bundle.JS.PublishAsync(fmt.Sprintf("ax.submit.p2.t.noop.k%d", i), tasks[i].Payload)
					require.NoError(b, err)
				}
				<-bundle.JS.PublishAsyncComplete()
			} else {
				_, err := bundle.Client.SubmitBatch(ctx, tasks)
				require.NoError(b, err)
			}
			reg := worker.NewRegistry()
			require.NoError(b, reg.Handle("noop", func(context.Context, *worker.Task) error { return nil }, nil))
			_, js := bundle.Server.Connect()
			w, err := worker.New(ctx, js, &worker.Config{Registry: reg, Concurrency: 64, Logger: zap.NewNop()})
			require.NoError(b, err)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			require.NoError(b, w.Start(ctx))
			for w.Stats().Succeeded < int64(n) {
				time.Sleep(time.Millisecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			require.NoError(b, w.Stop(ctx))
			b.ReportMetric(float64(n)/elapsed.Seconds(), "tasks/s")
			b.ReportMetric(float64(elapsed.Nanoseconds())/float64(n), "ns/task")
		})
	}
}
