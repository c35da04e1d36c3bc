package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"go.uber.org/zap"
)

// Delay submits o.Tasks delayed tasks due at random times within window
// (after a lead time for submitting them), runs the leader in this process,
// and reports firing lateness: when each task was stored in its bucket minus
// the time it was due. No worker runs, so the release is all that is timed.
func Delay(ctx context.Context, o Options, window time.Duration) (*Result, error) {
	e, err := newEnv(ctx, o, "axbench", 0)
	if err != nil {
		return nil, err
	}
	defer e.close()
	l, err := scheduler.New(ctx, e.js, &scheduler.Config{Names: e.names, Logger: zap.NewNop(), AgingThreshold: -1})
	if err != nil {
		return nil, err
	}
	lctx, stopLeader := context.WithCancel(ctx)
	var lwg sync.WaitGroup
	lwg.Go(func() { _ = l.Run(lctx) })
	defer func() { stopLeader(); lwg.Wait() }()
	client, err := ax.NewClient(ctx, e.js, &ax.Config{Names: e.names})
	if err != nil {
		return nil, err
	}
	lead := 10 * time.Second // submitting takes a few seconds
	first := time.Now().Add(lead)
	var submitted counter
	bar := startProgress(o.Progress, "delayed", o.Tasks, submitted.load)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for s := range 8 {
		wg.Go(func() {
			for i := s; i < o.Tasks; i += 8 {
				runAt := first.Add(rand.N(window - lead))
				if _, err := client.Submit(ctx, ax.TaskSpec{Type: "noop", Priority: ax.P1, RunAt: runAt}); err != nil {
					errs <- err
					return
				}
				submitted.n.Add(1)
			}
		})
	}
	wg.Wait()
	bar.end()
	select {
	case err := <-errs:
		return nil, fmt.Errorf("delay submit: %w", err)
	default:
	}
	stream, err := e.js.Stream(ctx, e.names.PriorityStream(1))
	if err != nil {
		return nil, err
	}
	var released counter
	bar = startProgress(o.Progress, "released", o.Tasks, released.load)
	before, start := e.usage(), time.Now()
	if err := waitFor(ctx, func() bool {
		info, err := stream.Info(ctx)
		if err == nil {
			released.n.Store(int64(info.State.Msgs))
		}
		return released.load() >= int64(o.Tasks)
	}); err != nil {
		return nil, err
	}
	after := e.usage()
	bar.end()
	var late latencies
	for seq := uint64(1); len(late.d) < o.Tasks; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		if err != nil {
			return nil, fmt.Errorf("delay: read released task %d: %w", seq, err)
		}
		runAt, err := time.Parse(time.RFC3339Nano, msg.Header.Get(streams.HeaderRunAt))
		if err != nil {
			return nil, fmt.Errorf("delay: released task %d has no %s", seq, streams.HeaderRunAt)
		}
		late.add(msg.Time.Sub(runAt))
	}
	r := &Result{Scenario: "delay", Sync: o.Sync}
	measure(r, o.Tasks, time.Since(start), before, after)
	r.CompletePerSec = 0
	late.fill(r)
	earliest := slices.Min(late.d)
	r.Extra = map[string]float64{"window_s": window.Seconds(), "min_ms": float64(earliest) / float64(time.Millisecond)}
	return r, nil
}
