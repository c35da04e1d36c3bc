package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/worker"
)

// Latency submits tasks at a steady rate while one worker runs them and
// reports submit-to-start latency: the latency a lightly loaded ax adds.
func Latency(ctx context.Context, o Options, rate int, duration time.Duration) (*Result, error) {
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
	total := int(float64(rate) * duration.Seconds())
	bar := startProgress(o.Progress, "latency", total, done.load)
	before, start := r.usage(), time.Now()
	if err := pace(ctx, r.client, rate, total, func(int) ax.TaskSpec {
		return ax.TaskSpec{Type: "noop", Priority: ax.P2, Payload: stamp(make([]byte, o.Payload))}
	}); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, func() bool { return done.load() >= int64(total) }); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	after := r.usage()
	bar.end()
	res := &Result{Scenario: "latency", Concurrency: o.Concurrency, Workers: o.Workers, Sync: o.Sync}
	measure(res, total, elapsed, before, after)
	res.SubmitPerSec = float64(rate)
	lat.fill(res)
	return res, nil
}

// PacedBaseline is bare JetStream at a steady rate, the reference of
// [Latency]: rate messages a second for duration into one WorkQueue
// stream, published as [Latency] submits (one at a time, or pipelined when
// more than one is due in a millisecond), pulled by one consumer and acked.
// It prices one stored message when the load comes a few at a time: no
// batch shares a round trip, a wake-up or a write to the socket.
func PacedBaseline(ctx context.Context, o Options, rate int, duration time.Duration) (*Result, error) {
	e, err := newEnv(ctx, o, "axbase", 0)
	if err != nil {
		return nil, err
	}
	defer e.close()
	cons, err := e.workQueue(ctx, "BENCH_PACED", "bench.paced", 0)
	if err != nil {
		return nil, err
	}
	var lat latencies
	var done counter
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		lat.add(since(msg.Data()))
		_ = msg.Ack()
		done.n.Add(1)
	})
	if err != nil {
		return nil, err
	}
	defer cc.Stop()
	total := int(float64(rate) * duration.Seconds())
	bar := startProgress(o.Progress, "paced baseline", total, done.load)
	before, start := e.usage(), time.Now()
	err = paceBy(ctx, rate, total, func(n int) error {
		if n == 1 {
			_, err := e.js.Publish(ctx, "bench.paced", stamp(make([]byte, o.Payload)))
			return err
		}
		for range n {
			if _, err := e.js.PublishAsync("bench.paced", stamp(make([]byte, o.Payload))); err != nil {
				return err
			}
		}
		select {
		case <-e.js.PublishAsyncComplete():
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	if err != nil {
		return nil, fmt.Errorf("paced baseline: %w", err)
	}
	if err := waitFor(ctx, func() bool { return done.load() >= int64(total) }); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	after := e.usage()
	bar.end()
	res := &Result{Scenario: "paced-baseline", Concurrency: 1, Workers: 1, Sync: o.Sync}
	measure(res, total, elapsed, before, after)
	res.SubmitPerSec = float64(rate)
	lat.fill(res)
	return res, nil
}

// Priority fills P4 with a backlog, then submits P0 tasks at a steady rate
// while the backlog drains, and reports the P0 submit-to-start latency.
func Priority(ctx context.Context, o Options, backlog, rate int, duration time.Duration) (*Result, error) {
	r, err := newRun(ctx, o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	var filled counter
	bar := startProgress(o.Progress, "backlog", backlog, filled.load)
	const chunk = 5_000
	for i := 0; i < backlog; i += chunk {
		tasks := make([]ax.TaskSpec, min(chunk, backlog-i))
		for j := range tasks {
			tasks[j] = ax.TaskSpec{Type: "noop", Priority: ax.P4, Payload: make([]byte, o.Payload)}
		}
		if _, err := r.client.SubmitBatch(ctx, tasks); err != nil {
			return nil, fmt.Errorf("priority backlog: %w", err)
		}
		filled.n.Add(int64(len(tasks)))
	}
	bar.end()

	var urgent latencies
	var urgentDone, drained counter
	if err := r.start(ctx, o, "noop", func(_ context.Context, t *worker.Task) error {
		if t.Priority == ax.P0 {
			urgent.add(since(t.Payload))
			urgentDone.n.Add(1)
		} else {
			drained.n.Add(1)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	total := int(float64(rate) * duration.Seconds())
	bar = startProgress(o.Progress, "P0 tasks", total, urgentDone.load)
	before, start := r.usage(), time.Now()
	if err := pace(ctx, r.client, rate, total, func(int) ax.TaskSpec {
		return ax.TaskSpec{Type: "noop", Priority: ax.P0, Payload: stamp(make([]byte, o.Payload))}
	}); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, func() bool { return urgentDone.load() >= int64(total) }); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	after := r.usage()
	bar.end()
	res := &Result{Scenario: "priority", Concurrency: o.Concurrency, Workers: o.Workers, Sync: o.Sync}
	measure(res, total, elapsed, before, after)
	res.SubmitPerSec = float64(rate)
	urgent.fill(res)
	res.Counts = map[string]int64{"p4_backlog": int64(backlog), "p4_drained_meanwhile": drained.load()}
	return res, nil
}

// pace submits total tasks at rate per second, in small batches every
// millisecond tick, catching up when it falls behind.
func pace(ctx context.Context, client *ax.Client, rate, total int, task func(i int) ax.TaskSpec) error {
	sent := 0
	return paceBy(ctx, rate, total, func(n int) error {
		batch := make([]ax.TaskSpec, 0, n)
		for i := sent; i < sent+n; i++ {
			batch = append(batch, task(i))
		}
		sent += n
		if n == 1 {
			_, err := client.Submit(ctx, batch[0])
			return err
		}
		_, err := client.SubmitBatch(ctx, batch)
		return err
	})
}

// paceBy calls send with the number of messages due each millisecond at
// rate, until total were sent.
func paceBy(ctx context.Context, rate, total int, send func(n int) error) error {
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent := 0
	for sent < total {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		due := min(total, int(time.Since(start).Seconds()*float64(rate)))
		if due <= sent {
			continue
		}
		if err := send(due - sent); err != nil {
			return err
		}
		sent = due
	}
	return nil
}

// waitFor polls cond every millisecond until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}
