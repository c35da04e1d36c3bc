package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Result is one scenario's figures. Durations are in milliseconds.
type Result struct {
	Scenario        string             `json:"scenario"`
	Tasks           int                `json:"tasks"`
	Workers         int                `json:"workers,omitempty"`
	Concurrency     int                `json:"concurrency,omitempty"`
	Sync            string             `json:"sync"`
	ElapsedSeconds  float64            `json:"elapsed_s"`
	SubmitPerSec    float64            `json:"submit_per_s,omitempty"`
	CompletePerSec  float64            `json:"complete_per_s,omitempty"`
	CPUSecPer1000   float64            `json:"cpu_s_per_1000,omitempty"`
	CPUMicrosPer    float64            `json:"cpu_us_per_task,omitempty"`
	PeakRSSMiB      float64            `json:"peak_rss_mib,omitempty"`
	LatencyP50Ms    float64            `json:"latency_p50_ms,omitempty"`
	LatencyP99Ms    float64            `json:"latency_p99_ms,omitempty"`
	LatencyMaxMs    float64            `json:"latency_max_ms,omitempty"`
	RatioToBaseline *float64           `json:"ratio_to_baseline,omitempty"`
	Counts          map[string]int64   `json:"counts,omitempty"`
	Extra           map[string]float64 `json:"extra,omitempty"`
}

// Print writes results as a table, or as JSON lines when asJSON.
func Print(w io.Writer, results []*Result, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\ttasks\tsync\tsubmit/s\tcomplete/s\tvs baseline\tcpu µs/task\tpeak RSS MiB\tp50 ms\tp99 ms\tmax ms\t")
	for _, r := range results {
		ratio := "-"
		if r.RatioToBaseline != nil {
			ratio = fmt.Sprintf("%.2f", *r.RatioToBaseline)
		}
		sync := r.Sync
		if sync == "" {
			sync = "default"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.0f\t%.0f\t%s\t%.1f\t%.0f\t%.2f\t%.2f\t%.2f\t\n", r.Scenario, r.Tasks, sync,
			r.SubmitPerSec, r.CompletePerSec, ratio, r.CPUMicrosPer, r.PeakRSSMiB, r.LatencyP50Ms, r.LatencyP99Ms, r.LatencyMaxMs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if len(r.Counts) == 0 && len(r.Extra) == 0 {
			continue
		}
		var parts []string
		for _, k := range sortedKeys(r.Counts) {
			parts = append(parts, fmt.Sprintf("%s=%d", k, r.Counts[k]))
		}
		for _, k := range sortedKeys(r.Extra) {
			parts = append(parts, fmt.Sprintf("%s=%.2f", k, r.Extra[k]))
		}
		fmt.Fprintf(w, "%s: %s\n", r.Scenario, strings.Join(parts, " "))
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// latencies collects durations from many goroutines.
type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

// percentiles returns p50, p99 and max in milliseconds.
func (l *latencies) percentiles() (p50, p99, maxMs float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return ms(s[len(s)/2]), ms(s[min(len(s)-1, len(s)*99/100)]), ms(s[len(s)-1])
}

func (l *latencies) fill(r *Result) {
	r.LatencyP50Ms, r.LatencyP99Ms, r.LatencyMaxMs = l.percentiles()
}

// measure fills the rate, CPU and RSS fields of r for n tasks.
func measure(r *Result, n int, elapsed time.Duration, before, after usage) {
	r.Tasks = n
	r.ElapsedSeconds = elapsed.Seconds()
	r.CompletePerSec = float64(n) / elapsed.Seconds()
	cpu := after.cpu - before.cpu
	r.CPUSecPer1000 = cpu.Seconds() / float64(n) * 1000
	r.CPUMicrosPer = float64(cpu.Microseconds()) / float64(n)
	r.PeakRSSMiB = float64(after.peakRSS) / (1 << 20)
}
