package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/axtest"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/natstest"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// The ack of a succeeded task's message waits [worker.TestConfig.AckDelay]
// after its SUCCEEDED record (the message stays in its bucket meanwhile),
// then goes without anything else happening; a negative delay acks at once.
func TestSucceededAckWaitsItsDelay(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		delay time.Duration
	}{
		{"delayed", 1500 * time.Millisecond},
		{"at once", -1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			reg := axtest.Registry(t, "noop", func(context.Context, *worker.Task) error { return nil })
			b.StartWorker(t, worker.Config{Registry: reg, Test: worker.TestConfig{AckDelay: tc.delay}})
			ctx := context.Background()
			id := b.Submit(t, ax.TaskSpec{Type: "noop"})
			done := b.WaitState(t, id, kv.StateSucceeded)
			if tc.delay < 0 {
				require.Eventually(t, func() bool { return axtest.BucketMessages(t, ctx, b.JS) == 0 },
					time.Second, 5*time.Millisecond, "acked at once")
				return
			}
			// Well inside the delay: the message is still there.
			time.Sleep(tc.delay / 3)
			require.Equal(t, uint64(1), axtest.BucketMessages(t, ctx, b.JS), "the ack waits its delay")
			require.Eventually(t, func() bool { return axtest.BucketMessages(t, ctx, b.JS) == 0 },
				10*time.Second, 10*time.Millisecond, "the ack goes after its delay")
			require.GreaterOrEqual(t, time.Since(*done.FinishedAt), tc.delay*9/10)
		})
	}
}

// Behind a backlog the ack goes at once: a task delivered while its
// consumer had more messages to deliver does not wait; only the last of the
// backlog, delivered with nothing behind it, does.
func TestBacklogAcksAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx := context.Background()
	ids := make([]string, 5)
	for i := range ids { // one key: one shard, one consumer
		ids[i] = b.Submit(t, ax.TaskSpec{Type: "noop", Key: "k"})
	}
	reg := axtest.Registry(t, "noop", func(context.Context, *worker.Task) error { return nil })
	b.StartWorker(t, worker.Config{Registry: reg, Concurrency: 1, Test: worker.TestConfig{AckDelay: time.Hour}})
	for _, id := range ids {
		b.WaitState(t, id, kv.StateSucceeded)
	}
	require.Eventually(t, func() bool { return axtest.BucketMessages(t, ctx, b.JS) == 1 },
		5*time.Second, 5*time.Millisecond, "the backlog's acks went at once")
	require.Never(t, func() bool { return axtest.BucketMessages(t, ctx, b.JS) == 0 },
		300*time.Millisecond, 20*time.Millisecond, "the last one's ack waits (an hour)")
}

// A worker's Stop sends the acks still waiting: after it returns, the
// succeeded task's message leaves its bucket at once, rather than after its
// ack wait and a redelivery.
func TestStopSendsWaitingAcks(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reg := axtest.Registry(t, "noop", func(context.Context, *worker.Task) error { return nil })
	w, _ := b.StartWorker(t, worker.Config{Registry: reg, Test: worker.TestConfig{AckDelay: time.Hour}})
	ctx := context.Background()
	ids := make([]string, 3)
	for i := range ids { // one at a time: each delivered with nothing behind it
		ids[i] = b.Submit(t, ax.TaskSpec{Type: "noop"})
		b.WaitState(t, ids[i], kv.StateSucceeded)
	}
	require.Equal(t, uint64(len(ids)), axtest.BucketMessages(t, ctx, b.JS), "each ack waits (an hour)")
	axtest.Stop(t, w)
	require.Eventually(t, func() bool { return axtest.BucketMessages(t, ctx, b.JS) == 0 },
		2*time.Second, 5*time.Millisecond, "Stop acked what waited")
	for _, id := range ids {
		require.Equal(t, kv.StateSucceeded, b.Get(t, id).State)
	}
}

// A worker that dies while a succeeded task's ack waits (its connection
// cut, no Stop) leaves the message in its bucket; it comes back after its
// ack wait to another worker, which drops it on its SUCCEEDED record: the
// handler does not run again and the bucket drains.
func TestAckLostInItsDelayRunsNothingAgain(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	b := setup(t, &streams.Config{AckWait: ackWait})
	var runs atomic.Int32
	reg := axtest.Registry(t, "noop", func(context.Context, *worker.Task) error { runs.Add(1); return nil })
	_, nc := b.StartWorker(t, worker.Config{ID: "dies", Registry: reg, AckWait: ackWait, Test: worker.TestConfig{AckDelay: time.Hour}})
	ctx := context.Background()
	id := b.Submit(t, ax.TaskSpec{Type: "noop"})
	b.WaitState(t, id, kv.StateSucceeded)
	nc.Close() // dies: the ack never goes
	require.Equal(t, uint64(1), axtest.BucketMessages(t, ctx, b.JS))

	b.StartWorker(t, worker.Config{ID: "next", Registry: reg, AckWait: ackWait})
	require.Eventually(t, func() bool { return axtest.BucketMessages(t, ctx, b.JS) == 0 },
		3*ackWait+5*time.Second, 20*time.Millisecond, "the redelivery is dropped and acked")
	require.Equal(t, int32(1), runs.Load(), "the handler ran once")
	rec := b.Get(t, id)
	require.Equal(t, kv.StateSucceeded, rec.State)
	require.Equal(t, 1, rec.Attempt)
}

// BenchmarkWorkQueueAck prices what [worker.DefaultAckDelay] avoids on an
// idle mesh: the ack that drains a work-queue stream (its last message;
// the file store then makes a new block, writes a tombstone and deletes
// the old file) against one that leaves a message behind, and the publish
// that follows each, into a drained stream or not. Per op: one publish,
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
