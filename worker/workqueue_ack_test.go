package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// BenchmarkWorkQueueAck prices what every task pays on an idle mesh: the
// ack that drains a work-queue stream (its last message; the file store
// then makes a new block, writes a tombstone and deletes the old file)
// against one that leaves a message behind, and the publish that follows
// each, into a drained stream or not (docs/BENCHMARKS.md, "Issue 39"). Per op: one publish,
// one delivery, one ack whose processing is waited for (a double ack).
//
//	go test -run x -bench BenchmarkWorkQueueAck -benchtime 500x -count 3 ./worker/
func BenchmarkWorkQueueAck(b *testing.B) {
	for _, tc := range []struct {
		name string
		keep bool // a message the consumer never takes stays in the stream
	}{{"drains", false}, {"keeps-one", true}} {
		b.Run(tc.name, func(b *testing.B) {
			_, js := natstest.RunServer(b)
			ctx := context.Background()
			stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "WQ", Subjects: []string{"wq.>"},
				Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage})
			require.NoError(b, err)
			if tc.keep {
				_, err = js.Publish(ctx, "wq.kept", nil)
				require.NoError(b, err)
			}
			cons, err := stream.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "c", FilterSubject: "wq.task",
				AckPolicy: jetstream.AckExplicitPolicy})
			require.NoError(b, err)
			var publish, ack time.Duration
			for b.Loop() {
				start := time.Now()
				_, err := js.Publish(ctx, "wq.task", []byte("x"))
				require.NoError(b, err)
				publish += time.Since(start)
				msg, err := cons.Next()
				require.NoError(b, err)
				start = time.Now()
				require.NoError(b, msg.DoubleAck(ctx))
				ack += time.Since(start)
			}
			b.ReportMetric(float64(publish.Microseconds())/float64(b.N), "publish_us/op")
			b.ReportMetric(float64(ack.Microseconds())/float64(b.N), "ack_us/op")
		})
	}
}
