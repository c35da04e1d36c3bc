package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/nats-io/nats.go/jetstream"
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
	cons, err := e.workQueue(ctx, "BENCH_BASELINE", "bench.baseline", 20_000)
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
	before, start := e.usage(), time.Now()
	for range o.Tasks {
		for {
			_, err := e.js.PublishAsync("bench.baseline", stamp(make([]byte, o.Payload)))
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return nil, fmt.Errorf("baseline publish: %w", err)
			}
			select { // the publish window is full: let it drain
			case <-e.js.PublishAsyncComplete():
			case <-ctx.Done():
				return nil, ctx.Err()
			}
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
	after := e.usage()
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

// workQueue makes the bare JetStream of a baseline: a file-stored
// WorkQueue stream name on subject and one pull consumer of it, with at
// most maxAckPending messages unacknowledged (0: the server's default).
func (e *env) workQueue(ctx context.Context, name, subject string, maxAckPending int) (jetstream.Consumer, error) {
	stream, err := e.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{subject},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage})
	if err != nil {
		return nil, err
	}
	return stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "baseline", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: maxAckPending})
}

// Throughput submits o.Tasks no-op tasks with pipelined SubmitBatch calls
// while o.Workers workers of o.Concurrency slots run them, with full state
// tracking (record at submit, claim, completion, trail).
func Throughput(ctx context.Context, o Options) (*Result, error) {
	r, err := newRun(ctx, o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	var lat latencies
	var done counter
	if err := r.start(ctx, o, "noop", noop(&lat, &done)); err != nil {
		return nil, err
	}
	bar := startProgress(o.Progress, "throughput", o.Tasks, done.load)
	before, start := r.usage(), time.Now()
	const chunk = 5_000
	tasks := make([]ax.TaskSpec, 0, chunk)
	for i := 0; i < o.Tasks; i += chunk {
		tasks = tasks[:0]
		for range min(chunk, o.Tasks-i) {
			tasks = append(tasks, ax.TaskSpec{Type: "noop", Priority: ax.P2, Payload: stamp(make([]byte, o.Payload))})
		}
		if _, err := r.client.SubmitBatch(ctx, tasks); err != nil {
			return nil, fmt.Errorf("throughput submit: %w", err)
		}
	}
	submitted := time.Since(start)
	if err := waitFor(ctx, func() bool { return done.load() >= int64(o.Tasks) }); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	after := r.usage()
	bar.end()
	res := &Result{Scenario: "throughput", Concurrency: o.Concurrency, Workers: o.Workers, Sync: o.Sync}
	measure(res, o.Tasks, elapsed, before, after)
	res.SubmitPerSec = float64(o.Tasks) / submitted.Seconds()
	lat.fill(res)
	return res, nil
}
