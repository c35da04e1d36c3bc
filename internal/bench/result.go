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
	Scenario    string `json:"scenario"`
	Tasks       int    `json:"tasks"`
	Workers     int    `json:"workers,omitempty"`
	Concurrency int    `json:"concurrency,omitempty"`
	Sync        string `json:"sync"`
	// Transport is how the run reached its server: "tcp" (a server process
	// of its own over loopback), "in-process" (embedded, no TCP) or
	// "given" (--use-server).
	Transport      string  `json:"transport"`
	ElapsedSeconds float64 `json:"elapsed_s"`
	SubmitPerSec   float64 `json:"submit_per_s,omitempty"`
	CompletePerSec float64 `json:"complete_per_s,omitempty"`
	CPUSecPer1000  float64 `json:"cpu_s_per_1000,omitempty"`
	CPUMicrosPer   float64 `json:"cpu_us_per_task,omitempty"` // client + server
	// ClientCPUMicros is this process's CPU per task (client and workers;
	// in-process, the server's too); ServerCPUMicros the server process's.
	ClientCPUMicros float64 `json:"client_cpu_us_per_task,omitempty"`
	ServerCPUMicros float64 `json:"server_cpu_us_per_task,omitempty"`
	// Ops are the server operations per task, from the server's own
	// statistics (see [ops]).
	Ops             map[string]float64 `json:"ops_per_task,omitempty"`
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
	fmt.Fprintln(tw, "scenario\ttransport\ttasks\tsync\tsubmit/s\tcomplete/s\tvs baseline\tcpu µs/task\tclient\tserver\tpeak RSS MiB\tp50 ms\tp99 ms\tmax ms\t")
	for _, r := range results {
		ratio := "-"
		if r.RatioToBaseline != nil {
			ratio = fmt.Sprintf("%.2f", *r.RatioToBaseline)
		}
		sync := r.Sync
		if sync == "" {
			sync = "default"
		}
		server := "-"
		if r.Transport == "tcp" {
			server = fmt.Sprintf("%.1f", r.ServerCPUMicros)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%.0f\t%.0f\t%s\t%.1f\t%.1f\t%s\t%.0f\t%.2f\t%.2f\t%.2f\t\n", r.Scenario, r.Transport, r.Tasks, sync,
			r.SubmitPerSec, r.CompletePerSec, ratio, r.CPUMicrosPer, r.ClientCPUMicros, server, r.PeakRSSMiB, r.LatencyP50Ms, r.LatencyP99Ms, r.LatencyMaxMs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if len(r.Ops) == 0 {
			continue
		}
		var parts []string
		for _, k := range opOrder {
			parts = append(parts, fmt.Sprintf("%s=%.2f", k, r.Ops[k]))
		}
		fmt.Fprintf(w, "%s (%s) server ops per task: %s\n", r.Scenario, r.Transport, strings.Join(parts, " "))
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

// opOrder is the order in which [Print] lists [Result.Ops].
var opOrder = []string{"msg_writes", "kv_writes", "records", "acks", "deliveries", "requests", "api", "in_msgs", "out_msgs"}

// measure fills the rate, CPU, RSS and server operation fields of r for n
// tasks.
func measure(r *Result, n int, elapsed time.Duration, before, after usage) {
	r.Tasks = n
	r.Transport = after.mode
	r.ElapsedSeconds = elapsed.Seconds()
	r.CompletePerSec = float64(n) / elapsed.Seconds()
	client := after.cpu - before.cpu
	var server time.Duration
	if before.server != nil && after.server != nil {
		server = after.server.cpu - before.server.cpu
	}
	cpu := client + server
	perTask := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(n) }
	r.CPUSecPer1000 = cpu.Seconds() / float64(n) * 1000
	r.CPUMicrosPer = perTask(cpu)
	r.ClientCPUMicros = perTask(client)
	r.ServerCPUMicros = perTask(server)
	r.PeakRSSMiB = float64(after.peakRSS) / (1 << 20)
	r.Ops = ops(before.server, after.server, n, after.bucket)
}
