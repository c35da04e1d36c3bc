package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/zap"
)

// stamp writes the submit time into the first 8 bytes of a payload.
func stamp(payload []byte) []byte {
	out := make([]byte, max(len(payload), 8))
	binary.LittleEndian.PutUint64(out, uint64(time.Now().UnixNano()))
	return out
}

// since reads the submit time of a stamped payload.
func since(payload []byte) time.Duration {
	if len(payload) < 8 {
		return 0
	}
	return time.Since(time.Unix(0, int64(binary.LittleEndian.Uint64(payload))))
}

// Baseline pushes o.Tasks messages through bare JetStream: async publishes
// into one WorkQueue stream, one durable pull consumer, explicit acks, and
// o.Concurrency handlers: the engine's limit on this machine.
func Baseline(ctx context.Context, o Options) (*Result, error) {
	e, err := newEnv(ctx, o, "axbase", 0)
	if err != nil {
		return nil, err
	}
	defer e.close()
	stream, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: "BENCH_BASELINE", Subjects: []string{"bench.baseline"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, err
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "baseline", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 20_000})
	if err != nil {
		return nil, err
	}
	var lat latencies
	var done counter
	all := make(chan struct{})
	work := make(chan jetstream.Msg, o.Concurrency)
	var wg sync.WaitGroup
	for range o.Concurrency {
		wg.Go(func() {
			for msg := range work {
				lat.add(since(msg.Data()))
				_ = msg.Ack()
				if done.n.Add(1) == int64(o.Tasks) {
					close(all)
				}
			}
		})
	}
	cc, err := cons.Consume(func(msg jetstream.Msg) { work <- msg })
	if err != nil {
		return nil, err
	}
	bar := startProgress(o.Progress, "baseline", o.Tasks, done.load)
	before, start := readUsage(), time.Now()
	for range o.Tasks {
		if _, err := e.js.PublishAsync("bench.baseline", stamp(make([]byte, o.Payload))); err != nil {
			return nil, fmt.Errorf("baseline publish: %w", err)
		}
	}
	<-e.js.PublishAsyncComplete()
	submitted := time.Since(start)
	select {
	case <-all:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	elapsed := time.Since(start)
	after := readUsage()
	bar.end()
	cc.Stop()
	close(work)
	wg.Wait()
	r := &Result{Scenario: "baseline", Concurrency: o.Concurrency, Workers: 1, Sync: o.Sync}
	measure(r, o.Tasks, elapsed, before, after)
	r.SubmitPerSec = float64(o.Tasks) / submitted.Seconds()
	lat.fill(r)
	return r, nil
}

// Throughput submits o.Tasks no-op tasks with pipelined SubmitBatch calls
// while o.Workers workers of o.Concurrency slots run them, with full state
// tracking (record at submit, claim, completion, trail).
func Throughput(ctx context.Context, o Options) (*Result, error) {
	e, err := newEnv(ctx, o, "axbench", 0)
	if err != nil {
		return nil, err
	}
	defer e.close()
	var lat latencies
	var done counter
	all := make(chan struct{})
	reg := worker.NewRegistry()
	if err := reg.Handle("noop", func(_ context.Context, t *worker.Task) error {
		lat.add(since(t.Payload))
		if done.n.Add(1) == int64(o.Tasks) {
			close(all)
		}
		return nil
	}, nil); err != nil {
		return nil, err
	}
	ws, err := startWorkers(ctx, e, o, reg)
	if err != nil {
		return nil, err
	}
	defer stopAll(ws)
	client, err := scheduler.NewClient(ctx, e.js, &scheduler.Config{Names: e.names})
	if err != nil {
		return nil, err
	}
	bar := startProgress(o.Progress, "throughput", o.Tasks, done.load)
	before, start := readUsage(), time.Now()
	const chunk = 5_000
	tasks := make([]scheduler.Task, 0, chunk)
	for i := 0; i < o.Tasks; i += chunk {
		tasks = tasks[:0]
		for range min(chunk, o.Tasks-i) {
			tasks = append(tasks, scheduler.Task{Type: "noop", Priority: 2, Payload: stamp(make([]byte, o.Payload))})
		}
		if _, err := client.SubmitBatch(ctx, tasks); err != nil {
			return nil, fmt.Errorf("throughput submit: %w", err)
		}
	}
	submitted := time.Since(start)
	select {
	case <-all:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	elapsed := time.Since(start)
	after := readUsage()
	bar.end()
	r := &Result{Scenario: "throughput", Concurrency: o.Concurrency, Workers: o.Workers, Sync: o.Sync}
	measure(r, o.Tasks, elapsed, before, after)
	r.SubmitPerSec = float64(o.Tasks) / submitted.Seconds()
	lat.fill(r)
	return r, nil
}

// startWorkers starts o.Workers workers on e with reg.
func startWorkers(ctx context.Context, e *env, o Options, reg *worker.Registry) ([]*worker.Worker, error) {
	var ws []*worker.Worker
	for range o.Workers {
		w, err := worker.New(ctx, e.js, &worker.Config{Names: e.names, Registry: reg, Concurrency: o.Concurrency, Logger: zap.NewNop()})
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			stopAll(ws)
			return nil, err
		}
		ws = append(ws, w)
	}
	return ws, nil
}

func stopAll(ws []*worker.Worker) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, w := range ws {
		_ = w.Stop(ctx)
	}
}
