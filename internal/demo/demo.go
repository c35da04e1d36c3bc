// Package demo submits the demo load of `ax dev` and summarizes it.
package demo

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/worker"
)

// Options shape the demo load.
type Options struct {
	Tasks    int       // how many tasks
	Progress io.Writer // live progress line; nil for none
}

// Summary is what the demo measured.
type Summary struct {
	Submitted int
	Succeeded int64
	Retried   int64
	Dead      int64
	Elapsed   time.Duration
	// Latency is submit (enqueue) to first start, over the succeeded tasks.
	LatencyP50, LatencyP99 time.Duration
	SampleIDs              []string
}

// Print writes the summary for a person (the hint to look at a sample
// task is the caller's: it knows where the tasks can be read).
func (s *Summary) Print(w io.Writer) {
	rate := float64(s.Succeeded+s.Dead) / s.Elapsed.Seconds()
	fmt.Fprintf(w, "\ndemo: %d tasks in %s: %d done, %d retried attempts, %d dead; %.0f tasks/s; start latency p50 %s, p99 %s\n",
		s.Submitted, s.Elapsed.Round(time.Millisecond), s.Succeeded, s.Retried, s.Dead, rate,
		s.LatencyP50.Round(time.Microsecond), s.LatencyP99.Round(time.Microsecond))
}

// Run submits a mixed load of built-in "sleep" and "fail" tasks (5 % fail
// once, 0.5 % fail for good) over three tenants and all priorities, and
// waits until the workers have settled every one.
func Run(ctx context.Context, client *ax.Client, ws []*worker.Worker, o Options) (*Summary, error) {
	base := totals(ws)
	tasks := make([]ax.TaskSpec, o.Tasks)
	tenants := []string{"acme", "globex", "initech"}
	for i := range tasks {
		t := ax.TaskSpec{Type: "sleep", Tenant: tenants[i%len(tenants)], Priority: ax.PriorityOf(rand.IntN(5))}
		fail := 0
		switch r := rand.Float64(); {
		case r < 0.005:
			t.Type = "fail"
		case r < 0.055:
			fail = 1
		}
		t.Payload = fmt.Appendf(nil, `{"ms":%d,"fail":%d}`, rand.IntN(10), fail)
		tasks[i] = t
	}
	start := time.Now()
	stopProgress := progress(ctx, o.Progress, ws, base, o.Tasks, start)
	defer stopProgress()
	infos, err := client.SubmitBatch(ctx, tasks)
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	for {
		t := totals(ws)
		if t.succeeded-base.succeeded+t.dead-base.dead >= int64(o.Tasks) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	elapsed := time.Since(start)
	stopProgress()
	t := totals(ws)
	s := &Summary{Submitted: o.Tasks, Succeeded: t.succeeded - base.succeeded, Retried: t.retried - base.retried,
		Dead: t.dead - base.dead, Elapsed: elapsed}
	lat := latencies(ctx, client, infos)
	if len(lat) > 0 {
		slices.Sort(lat)
		s.LatencyP50 = lat[len(lat)/2]
		s.LatencyP99 = lat[len(lat)*99/100]
	}
	for _, info := range infos[:min(3, len(infos))] {
		s.SampleIDs = append(s.SampleIDs, info.ID)
	}
	return s, nil
}

// latencies reads enqueue-to-first-start times from the records' trails.
func latencies(ctx context.Context, client *ax.Client, infos []ax.TaskInfo) []time.Duration {
	var out []time.Duration
	for _, info := range infos {
		rec, _, err := client.Store().Get(ctx, kv.Ref{Tenant: info.Tenant, ID: info.ID})
		if err != nil || len(rec.Trail) < 2 {
			continue
		}
		out = append(out, rec.Trail[1].At.Sub(rec.CreatedAt))
	}
	return out
}

type counts struct{ succeeded, retried, dead int64 }

func totals(ws []*worker.Worker) counts {
	var c counts
	for _, w := range ws {
		s := w.Stats()
		c.succeeded += s.Succeeded
		c.retried += s.Retried
		c.dead += s.Dead
	}
	return c
}

// progress prints a live line until the returned function is called.
func progress(ctx context.Context, out io.Writer, ws []*worker.Worker, base counts, total int, start time.Time) func() {
	if out == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				fmt.Fprintln(out)
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			t := totals(ws)
			n := t.succeeded - base.succeeded + t.dead - base.dead
			fmt.Fprintf(out, "\r%6d/%d settled  %5.1f%%  retried %d  dead %d  %.0f tasks/s   ", n, total,
				100*float64(n)/float64(total), t.retried-base.retried, t.dead-base.dead, float64(n)/time.Since(start).Seconds())
		}
	}()
	var once bool
	return func() {
		if !once {
			once = true
			close(done)
			<-finished
		}
	}
}
