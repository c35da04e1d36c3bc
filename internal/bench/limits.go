package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/worker"
	"go.uber.org/zap"
)

// Figures of the limits scenario.
const (
	// LimitsConcurrency is the limit of the limited type.
	LimitsConcurrency = 10
	// LimitsFreeTasks is how many free tasks run in each phase of
	// [Limits], per limited task: enough that each phase lasts a second
	// or more (2,000 free tasks ran in half a second, where a shared
	// host's stalls moved the ratio by half).
	LimitsFreeTasks = 4
	// LimitsHold is how long a limited task's handler runs unless
	// [Limits] is given another time.
	LimitsHold = 20 * time.Millisecond
	// limitsBatch is the size of a submit batch.
	limitsBatch = 500
)

// execGauge counts the executions of a handler running at once, from the
// handlers themselves, with the time of each change.
type execGauge struct {
	mu     sync.Mutex
	now    int
	peak   int
	events []gaugeEvent
}

type gaugeEvent struct {
	at      time.Time
	running int
}

func (g *execGauge) change(delta int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now += delta
	g.peak = max(g.peak, g.now)
	g.events = append(g.events, gaugeEvent{at: time.Now(), running: g.now})
}

// utilisation is the mean of running/limit between from and to.
func (g *execGauge) utilisation(limit int, from, to time.Time) float64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !to.After(from) {
		return 0
	}
	var area float64
	running, last := 0, from
	for _, e := range g.events {
		if e.at.After(to) {
			break
		}
		if e.at.After(from) {
			area += float64(min(running, limit)) * e.at.Sub(last).Seconds()
			last = e.at
		}
		running = e.running
	}
	area += float64(min(running, limit)) * to.Sub(last).Seconds()
	return area / (float64(limit) * to.Sub(from).Seconds())
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// earlier returns the earlier of a and b.
func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// lastStart is when the handler last started an execution.
func (g *execGauge) lastStart() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	var at time.Time
	for i, e := range g.events {
		if i == 0 || e.running > g.events[i-1].running {
			at = e.at
		}
	}
	return at
}

// Limits runs o.Workers workers of o.Concurrency slots with two task
// types: "partner", limited to [LimitsConcurrency] running at once
// mesh-wide, whose handler runs hold ([LimitsHold] when 0), and "free",
// unlimited, a no-op. It first runs [LimitsFreeTasks] × o.Tasks free tasks
// alone, then a backlog of o.Tasks partner tasks and, once every one of
// them waits for the limit (or ran), as many free tasks beside them as
// alone, and reports the peak
// of partner executions at once (counted by the handlers), the limit's
// utilisation while partner tasks waited (utilisation: from the first
// start to the last; utilisation_beside_free: while the free type ran
// beside the backlog; utilisation_after_free: from the free type's end to
// the last start), and the free type's rate beside
// the waiting backlog over its rate alone (the faster of a run before the
// backlog and one after it; free_ratio_to_mean_alone: over their mean,
// which the faster of two noisy readings overstates; the partner tasks
// still waiting when the free ones had all run: limited_waiting_at_free_end).
func Limits(ctx context.Context, o Options, hold time.Duration) (*Result, error) {
	hold = cmp.Or(hold, LimitsHold)
	r, err := newRun(ctx, o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.startLeader(ctx); err != nil {
		return nil, err
	}
	if err := r.setLimits(ctx, kv.Limits{Limits: map[string]kv.Limit{"partner": {Concurrency: LimitsConcurrency}}}); err != nil {
		return nil, err
	}
	var partner execGauge
	var freeDone, partnerDone counter
	reg := worker.NewRegistry()
	if err := reg.Handle("partner", func(ctx context.Context, _ *worker.Task) error {
		partner.change(1)
		defer partner.change(-1)
		select {
		case <-time.After(hold):
		case <-ctx.Done():
		}
		partnerDone.n.Add(1)
		return nil
	}, nil); err != nil {
		return nil, err
	}
	if err := reg.Handle("free", func(context.Context, *worker.Task) error {
		freeDone.n.Add(1)
		return nil
	}, nil); err != nil {
		return nil, err
	}
	if err := r.startWorkers(ctx, o, reg); err != nil {
		return nil, err
	}

	// A warm-up (the first tasks of a fresh mesh wait for its consumers
	// and connections), then the free type alone.
	freeN := LimitsFreeTasks * o.Tasks
	if err := r.submitMany(ctx, "free", freeN/2); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, func() bool { return freeDone.load() >= int64(freeN/2) }); err != nil {
		return nil, err
	}
	freeDone.n.Store(0)
	bar := startProgress(o.Progress, "free alone", freeN, freeDone.load)
	start := time.Now()
	if err := r.submitMany(ctx, "free", freeN); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, func() bool { return freeDone.load() >= int64(freeN) }); err != nil {
		return nil, err
	}
	bar.end()
	alone := float64(freeN) / time.Since(start).Seconds()

	// The limited type's backlog, then the free type beside it while the
	// backlog waits for its limit: its tasks submitted, each seen by a
	// worker (parked, stepped aside or started), the first one started.
	freeDone.n.Store(0)
	bar = startProgress(o.Progress, "limited", o.Tasks, partnerDone.load)
	before, start := r.usage(), time.Now()
	if err := r.submitMany(ctx, "partner", o.Tasks); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, func() bool {
		var seen int64
		for _, w := range r.workers {
			seen += w.Stats().Limited
		}
		return partnerDone.load() > 0 && seen+partnerDone.load()+LimitsConcurrency >= int64(o.Tasks)
	}); err != nil {
		return nil, err
	}
	freeStart := time.Now()
	if err := r.submitMany(ctx, "free", freeN); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, func() bool { return freeDone.load() >= int64(freeN) }); err != nil {
		return nil, err
	}
	freeTook := time.Since(freeStart)
	waitingAtFreeEnd := int64(o.Tasks) - partnerDone.load()
	if err := waitFor(ctx, func() bool { return partnerDone.load() >= int64(o.Tasks) }); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	after := r.usage()
	// The free type alone again, the mesh warm: its faster run alone is
	// the one the ratio is taken against (the first, on a fresh server,
	// read as low as 0.6 of this one).
	freeDone.n.Store(0)
	again := time.Now()
	if err := r.submitMany(ctx, "free", freeN); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, func() bool { return freeDone.load() >= int64(freeN) }); err != nil {
		return nil, err
	}
	aloneAfter := float64(freeN) / time.Since(again).Seconds()
	bar.end()
	var firstStart time.Time
	partner.mu.Lock()
	if len(partner.events) > 0 {
		firstStart = partner.events[0].at
	}
	peak := partner.peak
	partner.mu.Unlock()
	lastStart, freeEnd := partner.lastStart(), freeStart.Add(freeTook)
	res := &Result{Scenario: "limits", Sync: o.Sync, Workers: o.Workers, Concurrency: o.Concurrency}
	measure(res, o.Tasks+freeN, elapsed, before, after) // both types' tasks of the phase
	beside := float64(freeN) / freeTook.Seconds()
	var held, handed, aside int64
	for _, w := range r.workers {
		held += w.Stats().Limited
		handed += w.Stats().HandedOn
		aside += w.Stats().SteppedAside
	}
	res.Extra = map[string]float64{
		"handed_on_per_task":          float64(handed) / float64(o.Tasks),
		"limit":                       LimitsConcurrency,
		"peak_concurrent":             float64(peak),
		"utilisation":                 partner.utilisation(LimitsConcurrency, firstStart, lastStart),
		"utilisation_beside_free":     partner.utilisation(LimitsConcurrency, later(firstStart, freeStart), earlier(freeEnd, lastStart)),
		"utilisation_after_free":      partner.utilisation(LimitsConcurrency, later(firstStart, freeEnd), lastStart),
		"free_alone_per_s":            max(alone, aloneAfter),
		"free_alone_first_per_s":      alone,
		"free_alone_after_per_s":      aloneAfter,
		"free_beside_per_s":           beside,
		"free_ratio_to_alone":         beside / max(alone, aloneAfter),
		"free_ratio_to_mean_alone":    beside / ((alone + aloneAfter) / 2),
		"held_back_per_task":          float64(held) / float64(o.Tasks),
		"stepped_aside_per_task":      float64(aside) / float64(o.Tasks),
		"limited_ideal_seconds":       float64(o.Tasks) * hold.Seconds() / LimitsConcurrency,
		"limited_hold_ms":             float64(hold.Milliseconds()),
		"limited_waiting_at_free_end": float64(waitingAtFreeEnd),
		"limited_actual_seconds":      elapsed.Seconds(),
	}
	if peak > LimitsConcurrency {
		return res, fmt.Errorf("limits: %d partner tasks ran at once, above the limit of %d", peak, LimitsConcurrency)
	}
	return res, nil
}

// submitMany submits n tasks of taskType in batches.
func (r *run) submitMany(ctx context.Context, taskType string, n int) error {
	for i := 0; i < n; i += limitsBatch {
		specs := make([]ax.TaskSpec, 0, limitsBatch)
		for range min(limitsBatch, n-i) {
			specs = append(specs, ax.TaskSpec{Type: taskType, Priority: ax.P2})
		}
		if _, err := r.client.SubmitBatch(ctx, specs); err != nil {
			return fmt.Errorf("limits submit %s: %w", taskType, err)
		}
	}
	return nil
}

// setLimits writes the mesh's limits to AX_CONTROL, as `ax limit set` does.
func (r *run) setLimits(ctx context.Context, l kv.Limits) error {
	data, err := json.Marshal(l)
	if err != nil {
		return err
	}
	board, err := control.Open(ctx, r.js, r.names)
	if err != nil {
		return err
	}
	_, err = board.Put(ctx, control.LimitsKey, data)
	return err
}

// startWorkers starts o.Workers workers of o.Concurrency slots serving reg.
func (r *run) startWorkers(ctx context.Context, o Options, reg *worker.Registry) error {
	for range o.Workers {
		w, err := worker.New(ctx, r.js, &worker.Config{Names: r.names, Registry: reg, Concurrency: o.Concurrency, PrefetchPerShard: o.Prefetch, Logger: zap.NewNop()})
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			return err
		}
		r.workers = append(r.workers, w)
	}
	return nil
}

// RateLimits runs o.Workers workers of o.Concurrency slots with one task
// type, "sms", limited to rate starts per second mesh-wide with burst, and
// a no-op handler; it submits o.Tasks tasks at once and reports, from the
// starts the handlers saw, the most in any 1 s window (it fails above
// rate + burst) and the limit's use while tasks waited: the starts a token
// bucket of that rate and burst allows between the first start and the
// last, over those made.
func RateLimits(ctx context.Context, o Options, rate, burst int) (*Result, error) {
	if rate <= 0 {
		return nil, fmt.Errorf("limits: rate %d: want at least 1", rate)
	}
	r, err := newRun(ctx, o)
	if err != nil {
		return nil, err
	}
	defer r.close()
	if err := r.startLeader(ctx); err != nil {
		return nil, err
	}
	if err := r.setLimits(ctx, kv.Limits{Limits: map[string]kv.Limit{"sms": {Rate: float64(rate), Burst: burst}}}); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var starts []time.Time
	var done counter
	reg := worker.NewRegistry()
	if err := reg.Handle("sms", func(context.Context, *worker.Task) error {
		mu.Lock()
		starts = append(starts, time.Now())
		mu.Unlock()
		done.n.Add(1)
		return nil
	}, nil); err != nil {
		return nil, err
	}
	if err := r.startWorkers(ctx, o, reg); err != nil {
		return nil, err
	}
	bar := startProgress(o.Progress, "rate limited", o.Tasks, done.load)
	before, start := r.usage(), time.Now()
	if err := r.submitMany(ctx, "sms", o.Tasks); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, func() bool { return done.load() >= int64(o.Tasks) }); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	after := r.usage()
	bar.end()
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	most := 0 // starts in the busiest 1 s window
	for i, j := 0, 0; i < len(starts); i++ {
		for starts[i].Sub(starts[j]) >= time.Second {
			j++
		}
		most = max(most, i-j+1)
	}
	span := starts[len(starts)-1].Sub(starts[0]).Seconds()
	// A token bucket of rate and burst, full at the first start, allows
	// burst + rate × span starts by the last: at least burst+1 must wait
	// for it, so used is 1 when the limit was used in full.
	used := 1.0
	if span > 0 {
		used = float64(len(starts)-max(burst, 1)) / (float64(rate) * span)
	}
	res := &Result{Scenario: "limits-rate", Sync: o.Sync, Workers: o.Workers, Concurrency: o.Concurrency}
	measure(res, o.Tasks, elapsed, before, after)
	var held, aside int64
	for _, w := range r.workers {
		held += w.Stats().Limited
		aside += w.Stats().SteppedAside
	}
	res.Extra = map[string]float64{
		"rate":                   float64(rate),
		"burst":                  float64(burst),
		"most_starts_in_1s":      float64(most),
		"rate_used":              used,
		"held_back_per_task":     float64(held) / float64(o.Tasks),
		"stepped_aside_per_task": float64(aside) / float64(o.Tasks),
		"limited_ideal_seconds":  float64(o.Tasks-max(burst, 1)) / float64(rate),
		"limited_actual_seconds": span,
	}
	if most > rate+burst {
		return res, fmt.Errorf("limits: %d tasks started within 1 s, above the rate limit's %d + %d", most, rate, burst)
	}
	return res, nil
}
