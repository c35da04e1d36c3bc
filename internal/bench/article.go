package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
)

// ArticleOptions shape the design article's load test.
type ArticleOptions struct {
	Tenants   int           // default 10
	TimeScale float64       // handler durations are uniform in 100 ms–2 s times this; default 0.01
	Timeout   time.Duration // how long to wait for every task to settle; default 30m
}

const (
	failOnce   byte = 1
	failAlways byte = 2
	// articlePayload: 8 bytes submit stamp, 1 byte plan, 4 bytes duration in µs.
	articlePayload = 13
)

func (a ArticleOptions) withDefaults() ArticleOptions {
	if a.Tenants == 0 {
		a.Tenants = 10
	}
	if a.TimeScale == 0 {
		a.TimeScale = 0.01
	}
	if a.Timeout == 0 {
		a.Timeout = 30 * time.Minute
	}
	return a
}

// Article reproduces the design article's load test, scaled: o.Tasks tasks
// over a.Tenants tenants and all priorities, handlers of 100 ms–2 s times the
// time scale, o.Workers workers, 5 % of tasks failing once and 0.5 % failing
// for good. It counts retries, dead letters, duplicates (a handler start of
// an attempt that had started already) and lost tasks (submitted, never
// settled) instead of assuming them.
func Article(ctx context.Context, o Options, a ArticleOptions) (*Result, error) {
	a = a.withDefaults()
	run, err := newRun(ctx, o)
	if err != nil {
		return nil, err
	}
	defer run.close()

	h := &articleHandler{started: make(map[string]uint32, o.Tasks)}
	if err := run.start(ctx, o, "article", h.handle); err != nil {
		return nil, err
	}
	ws := run.workers

	settled := func() int64 {
		var n int64
		for _, w := range ws {
			n += w.Stats().Succeeded + w.Stats().Dead
		}
		return n
	}
	bar := startProgress(o.Progress, "article", o.Tasks, settled)
	before, start := run.usage(), time.Now()
	planned, err := submitArticle(ctx, run, o, a)
	if err != nil {
		return nil, err
	}
	submitted := time.Since(start)
	waitCtx, cancel := context.WithTimeout(ctx, a.Timeout)
	defer cancel()
	_ = waitFor(waitCtx, func() bool { return settled() >= int64(o.Tasks) })
	elapsed := time.Since(start)
	after := run.usage()
	bar.end()

	r := &Result{Scenario: "article", Concurrency: o.Concurrency, Workers: o.Workers, Sync: o.Sync}
	measure(r, o.Tasks, elapsed, before, after)
	r.SubmitPerSec = float64(o.Tasks) / submitted.Seconds()
	r.Extra = map[string]float64{"time_scale": a.TimeScale}
	h.latencies(r)
	var retried, dead int64
	for _, w := range ws {
		retried += w.Stats().Retried
		dead += w.Stats().Dead
	}
	dlq, err := run.js.Stream(ctx, run.names.DLQStream())
	if err != nil {
		return nil, err
	}
	info, err := dlq.Info(ctx)
	if err != nil {
		return nil, err
	}
	r.Counts = map[string]int64{
		"tenants": int64(a.Tenants), "planned_fail_once": planned[failOnce], "planned_fail_always": planned[failAlways],
		"retries": retried, "dead": dead, "dlq_messages": int64(info.State.Msgs),
		"duplicates": h.duplicates.load(), "lost": int64(o.Tasks) - settled(),
	}
	return r, nil
}

// articleHandler runs the article's tasks: it sleeps each task's planned
// duration, fails as planned, and counts duplicate starts and the first
// attempts' latencies per priority.
type articleHandler struct {
	mu         sync.Mutex
	started    map[string]uint32 // bit n: attempt n+1 started; mu must be held
	duplicates counter
	byPriority [streams.Priorities]latencies
}

func (h *articleHandler) handle(ctx context.Context, t *worker.Task) error {
	h.mu.Lock()
	bit := uint32(1) << min(t.Attempt-1, 31)
	if h.started[t.ID]&bit != 0 {
		h.duplicates.n.Add(1)
	}
	h.started[t.ID] |= bit
	h.mu.Unlock()
	if t.Attempt == 1 {
		level, _ := t.Priority.Level()
		h.byPriority[level].add(since(t.Payload))
	}
	plan := t.Payload[8]
	timer := time.NewTimer(time.Duration(binary.LittleEndian.Uint32(t.Payload[9:])) * time.Microsecond)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	switch {
	case plan == failAlways:
		return worker.Permanent(fmt.Errorf("article: planned permanent failure"))
	case plan == failOnce && t.Attempt == 1:
		return fmt.Errorf("article: planned failure of the first attempt")
	}
	return nil
}

// latencies writes the latency percentiles per priority and over all of
// them into r.
func (h *articleHandler) latencies(r *Result) {
	var all latencies
	for p := range h.byPriority {
		p50, p99, _ := h.byPriority[p].percentiles()
		r.Extra[fmt.Sprintf("p%d_latency_p50_ms", p)] = p50
		r.Extra[fmt.Sprintf("p%d_latency_p99_ms", p)] = p99
		all.d = append(all.d, h.byPriority[p].d...)
	}
	all.fill(r)
}

// submitArticle submits the article's tasks in batches and returns how
// many of them were planned to fail once and for good.
func submitArticle(ctx context.Context, env *run, o Options, a ArticleOptions) ([3]int64, error) {
	var planned [3]int64
	const chunk = 5_000
	for i := 0; i < o.Tasks; i += chunk {
		batch := make([]ax.TaskSpec, min(chunk, o.Tasks-i))
		for j := range batch {
			payload := stamp(make([]byte, max(o.Payload, articlePayload)))
			switch r := rand.Float64(); {
			case r < 0.005:
				payload[8] = failAlways
			case r < 0.055:
				payload[8] = failOnce
			}
			planned[payload[8]]++
			d := time.Duration(float64(100*time.Millisecond+rand.N(1900*time.Millisecond)) * a.TimeScale)
			binary.LittleEndian.PutUint32(payload[9:], uint32(d.Microseconds()))
			batch[j] = ax.TaskSpec{Type: "article", Tenant: fmt.Sprintf("tenant%02d", (i+j)%a.Tenants),
				Priority: ax.PriorityOf(rand.IntN(streams.Priorities)), MaxAttempts: 3, Payload: payload}
		}
		if _, err := env.client.SubmitBatch(ctx, batch); err != nil {
			return planned, fmt.Errorf("article submit: %w", err)
		}
	}
	return planned, nil
}
