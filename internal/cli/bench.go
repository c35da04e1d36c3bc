package cli

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/ax-mesh/ax/internal/bench"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/spf13/cobra"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// benchFlags are the flags of `ax bench` beyond [bench.Options].
type benchFlags struct {
	o         bench.Options
	rate      int
	burst     int           // limits: the rate limit's burst
	hold      time.Duration // limits: how long a limited task's handler runs
	limit     string        // limits: concurrency, rate or both
	duration  time.Duration
	timeScale float64
	tenants   int
	window    time.Duration
	useServer bool
	transport string // tcp, in-process or both
	quiet     bool
	profile   string        // CPU profile file
	trace     bool          // trace every task (an SDK tracer provider, spans dropped)
	shared    bool          // fairness: on a deployment without fair shares
	byKey     bool          // fairness: between two keys of one tenant, without fair shares
	fairHold  time.Duration // fairness: how long a task of the backlog runs
	workflow  bench.WorkflowOptions
}

type benchRunner func(context.Context, bench.Options) ([]*bench.Result, error)

// benchScenario is a scenario and its defaults where they differ from the flags'.
type benchScenario struct {
	run                         benchRunner
	tasks, workers, slots, rate int
}

func (f *benchFlags) scenarios() map[string]benchScenario {
	single := func(r *bench.Result, err error) ([]*bench.Result, error) {
		if err != nil {
			return nil, err
		}
		return []*bench.Result{r}, nil
	}
	return map[string]benchScenario{
		"baseline": {run: func(ctx context.Context, o bench.Options) ([]*bench.Result, error) {
			return single(bench.Baseline(ctx, o))
		}},
		// throughput runs baseline first, in the same process, and reports its ratio to it.
		"throughput": {run: func(ctx context.Context, o bench.Options) ([]*bench.Result, error) {
			base, err := bench.Baseline(ctx, o)
			if err != nil {
				return nil, err
			}
			r, err := bench.Throughput(ctx, o)
			if err != nil {
				return nil, err
			}
			ratio := r.CompletePerSec / base.CompletePerSec
			r.RatioToBaseline = &ratio
			if r.CPUMicrosPer > 0 {
				// The ratio by CPU cost (bare JetStream's CPU per message over ax's
				// per task): the rate ratio when both are bound by CPU, and much
				// steadier than the rates when other work shares the cores.
				r.Extra = map[string]float64{"cpu_ratio_to_baseline": base.CPUMicrosPer / r.CPUMicrosPer}
			}
			return []*bench.Result{base, r}, nil
		}},
		// pools runs baseline, then throughput without and with pools (one
		// pool serving the one task type), and reports the ratios.
		"pools": {run: func(ctx context.Context, o bench.Options) ([]*bench.Result, error) {
			base, err := bench.Baseline(ctx, o)
			if err != nil {
				return nil, err
			}
			o.Layout = streams.LayoutShared
			shared, err := bench.Throughput(ctx, o)
			if err != nil {
				return nil, err
			}
			o.Layout = streams.LayoutPools
			pools, err := bench.Throughput(ctx, o)
			if err != nil {
				return nil, err
			}
			pools.Scenario = "throughput-pools"
			for _, r := range []*bench.Result{shared, pools} {
				ratio := r.CompletePerSec / base.CompletePerSec
				r.RatioToBaseline = &ratio
			}
			pools.Extra = map[string]float64{"ratio_to_shared": pools.CompletePerSec / shared.CompletePerSec}
			if pools.CPUMicrosPer > 0 {
				pools.Extra["cpu_ratio_to_shared"] = shared.CPUMicrosPer / pools.CPUMicrosPer
			}
			return []*bench.Result{base, shared, pools}, nil
		}},
		// floor runs baseline, then bare JetStream through ax's operations
		// per task, through three designs with fewer and on streams in async
		// persist mode, then ax: how much of ax's cost its operations take,
		// and what fewer would save.
		"floor": {run: func(ctx context.Context, o bench.Options) ([]*bench.Result, error) {
			base, err := bench.Baseline(ctx, o)
			if err != nil {
				return nil, err
			}
			out := []*bench.Result{base}
			for _, plan := range bench.FloorPlans() {
				r, err := bench.Floor(ctx, o, plan)
				if err != nil {
					return nil, err
				}
				out = append(out, r)
			}
			r, err := bench.Throughput(ctx, o)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
			floor := out[1] // the first plan: ax's own operations
			for _, x := range out[1:] {
				ratio := x.CompletePerSec / base.CompletePerSec
				x.RatioToBaseline = &ratio
				x.Extra = map[string]float64{}
				if x.CPUMicrosPer > 0 {
					x.Extra["cpu_ratio_to_baseline"] = base.CPUMicrosPer / x.CPUMicrosPer
					x.Extra["cpu_ratio_to_floor"] = floor.CPUMicrosPer / x.CPUMicrosPer
				}
				x.Extra["ratio_to_floor"] = x.CompletePerSec / floor.CompletePerSec
			}
			return out, nil
		}},
		"latency": {run: func(ctx context.Context, o bench.Options) ([]*bench.Result, error) {
			return single(bench.Latency(ctx, o, f.rate, f.duration))
		}},
		// paced-baseline is latency's reference: bare JetStream at --rate.
		"paced-baseline": {run: func(ctx context.Context, o bench.Options) ([]*bench.Result, error) {
			return single(bench.PacedBaseline(ctx, o, f.rate, f.duration))
		}},
		"priority": {tasks: 100_000, rate: 200, run: func(ctx context.Context, o bench.Options) ([]*bench.Result, error) {
			return single(bench.Priority(ctx, o, o.Tasks, f.rate, f.duration))
		}},
		"delay": {tasks: 10_000, run: func(ctx context.Context, o bench.Options) ([]*bench.Result, error) {
			return single(bench.Delay(ctx, o, f.window))
		}},
		// limits runs the concurrency scenario, then the rate one with half
		// as many tasks (--limit picks one).
		"limits": {tasks: 2_000, workers: 3, slots: 64, rate: 100, run: func(ctx context.Context, o bench.Options) ([]*bench.Result, error) {
			if f.limit != "concurrency" && f.limit != "rate" && f.limit != "both" {
				return nil, fmt.Errorf("--limit %q: want concurrency, rate or both", f.limit)
			}
			var out []*bench.Result
			if f.limit != "rate" {
				r, err := bench.Limits(ctx, o, f.hold)
				if err != nil {
					return nil, err
				}
				out = append(out, r)
			}
			if f.limit != "concurrency" {
				o.Tasks /= 2
				r, err := bench.RateLimits(ctx, o, f.rate, f.burst)
				if err != nil {
					return nil, err
				}
				out = append(out, r)
			}
			return out, nil
		}},
		"workflow": {run: func(ctx context.Context, o bench.Options) ([]*bench.Result, error) {
			return bench.Workflow(ctx, o, f.workflow)
		}},
		"fairness": {tasks: 100_000, rate: 20, run: func(ctx context.Context, o bench.Options) ([]*bench.Result, error) {
			return bench.Fairness(ctx, o, bench.FairnessOptions{Rate: f.rate, Shared: f.shared, ByKey: f.byKey, Hold: f.fairHold})
		}},
		"article": {tasks: 500_000, workers: 8, slots: 16, run: func(ctx context.Context, o bench.Options) ([]*bench.Result, error) {
			return single(bench.Article(ctx, o, bench.ArticleOptions{TimeScale: f.timeScale, Tenants: f.tenants}))
		}},
	}
}

func addBench(root *cobra.Command, e *env) {
	var f benchFlags
	scenarios := f.scenarios()
	var names []string
	for name := range scenarios {
		names = append(names, name)
	}
	slices.Sort(names)
	cmd := &cobra.Command{
		Use:   "bench SCENARIO",
		Short: "Measure ax: " + strings.Join(names, ", "),
		Long: `ax bench runs a load scenario against a NATS server of its own, started for the
run: by default in its own process (ax server) reached over loopback TCP, as in a
deployment; with --transport in-process embedded in the bench process; with
--transport both, once each way. With --use-server it runs against the one given
by --server. It prints a progress bar while it runs and a table at the end (--json
for machines): the CPU per task of the bench process (client and workers) and of
the server process apart and in total, and the server's operations per task
(stream and KV writes, acks, deliveries, requests) from the server's own
statistics. See docs/BENCHMARKS.md.

  throughput  N no-op tasks submitted with pipelined publishes while workers run
              them; bare JetStream (baseline) runs first and the ratios of the rates
              and of the CPU per task are printed
  pools       throughput without pools, then with one pool (a pools deployment
              whose workers serve the one task type), against the same baseline
  baseline    N messages through one WorkQueue stream and one pull consumer
  floor       baseline; bare JetStream doing ax's server operations per task
              (message, record create, read, two record writes, ack; no ax code)
              and three sets with fewer (no read; no record at submit; the
              outcome only), and ax's in async persist mode; then throughput:
              the ratios to the floor show what ax's own code costs, and what
              fewer operations would save
  latency     a paced load (--rate for --duration): submit-to-start latency
  paced-baseline
              bare JetStream at --rate for --duration (one WorkQueue stream,
              one pull consumer): latency's reference, one stored message a
              task when the load comes a few at a time
  priority    a P4 backlog of N tasks, then P0 tasks at --rate: P0 latency
  article     the design article's load test, scaled (--tasks, --time-scale)
  delay       N delayed tasks due within --window: release lateness p50/p99/max
  limits      3 workers x 64 slots: 4N no-op tasks of one type alone, then a
              backlog of N tasks of a type limited to 10 at once mesh-wide (each
              runs --hold, 20 ms) and, once it waits, 4N more of the first beside
              it, then 4N alone again: the peak of limited executions at once
              (counted by the handlers), the limit's utilisation while tasks
              waited (also split: while the unlimited type ran beside them, and
              after), and the unlimited type's rate beside the waiting backlog
              over its faster rate alone;
              then N/2 tasks of a type limited to --rate starts per second
              (default 100) with --burst: the most starts in any 1 s window
              (counted by the handlers) and the limit's use while tasks waited
              (--limit concurrency or rate runs one of the two)
  fairness    a fair deployment: tenant bulk's backlog of N tasks (default 100,000)
              drains alone, then again while tenant paced submits --rate tasks a
              second (default 20): the backlog's rate beside the paced tenant over
              its rate alone, and the paced tenant's submit-to-start latency;
              --shared-layout runs it without fair shares, for comparison;
              --by-key runs it between two partition keys of one tenant on a
              deployment without fair shares (the backlog on one shard), and
              --fair-hold makes each backlog task run that long (default 0)
  workflow    a workflow's release (the leader in the bench process): wf-plain,
              the fan-out's tasks submitted without dependencies; wf-fanout, a
              root, --fan-out children (default 10,000) after it and a fan-in
              back to one, as a tree of joins (a task waits for at most 1,000
              parents: a join per 1,000 children, then one after the joins),
              checked (each task once, none before a parent ended), its CPU per
              edge over wf-plain's (cpu_us_per_edge) and over the same tasks
              submitted by a publish-only client (wf-plain-publish-only), as the
              leader releases them; wf-chain, --chain tasks
              one after the other (default 1,000): elapsed_s from the submit to
              the last task's start, and per link (p50/p99/max) how long after
              its parent's record said SUCCEEDED (finished_at) a child started;
              --only chain runs wf-chain alone`,
		Args:      cobra.ExactArgs(1),
		ValidArgs: names,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, ok := scenarios[args[0]]
			if !ok {
				return usageError{fmt.Errorf("unknown scenario %q (want one of %s)", args[0], strings.Join(names, ", "))}
			}
			o := f.o
			if s.tasks != 0 && !cmd.Flags().Changed("tasks") {
				o.Tasks = s.tasks
			}
			if s.workers != 0 && !cmd.Flags().Changed("workers") {
				o.Workers = s.workers
			}
			if s.slots != 0 && !cmd.Flags().Changed("concurrency") {
				o.Concurrency = s.slots
			}
			if s.rate != 0 && !cmd.Flags().Changed("rate") {
				f.rate = s.rate
			}
			modes := map[string][]string{"tcp": {"tcp"}, "in-process": {"in-process"}, "both": {"tcp", "in-process"}}[f.transport]
			if modes == nil {
				return fmt.Errorf("--transport %q: want tcp, in-process or both", f.transport)
			}
			if o.FloorBatch < 1 || o.FloorLoops < 1 {
				return fmt.Errorf("--floor-batch %d, --floor-loops %d: each must be at least 1", o.FloorBatch, o.FloorLoops)
			}
			if f.useServer {
				o.Server = e.server
				modes = []string{"given"}
			}
			if !f.quiet {
				o.Progress = e.errOut
			}
			if f.trace {
				provider := sdktrace.NewTracerProvider() // no exporter: spans are made, sampled and dropped
				defer func() { _ = provider.Shutdown(context.WithoutCancel(cmd.Context())) }()
				o.Tracer = provider
			}
			if f.profile != "" {
				pf, err := os.Create(f.profile)
				if err != nil {
					return err
				}
				defer pf.Close()
				if err := pprof.StartCPUProfile(pf); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			var results []*bench.Result
			for _, mode := range modes {
				o.ServerCommand = nil
				if mode == "tcp" {
					self, err := os.Executable()
					if err != nil {
						return err
					}
					o.ServerCommand = []string{self, "server"}
				}
				r, err := s.run(cmd.Context(), o)
				if err != nil {
					return err
				}
				results = append(results, r...)
			}
			return bench.Print(e.out, results, e.jsonOut)
		},
	}
	fs := cmd.Flags()
	fs.IntVarP(&f.o.Tasks, "tasks", "n", 200_000, "tasks per run (priority: the P4 backlog, default 100,000; article: default 500,000)")
	fs.IntVarP(&f.o.Concurrency, "concurrency", "c", 64, "handler slots per worker (article: default 16)")
	fs.IntVar(&f.o.Workers, "workers", 1, "workers in this process (article: default 8)")
	fs.IntVar(&f.o.Prefetch, "prefetch", 0, "messages of each shard consumer a worker holds at most (ax worker --prefetch; default: 2 x concurrency / 32)")
	fs.IntVar(&f.o.Payload, "payload", 200, "payload bytes")
	fs.IntVar(&f.o.FloorBatch, "floor-batch", bench.DefaultFloorBatch, "floor: the most messages one pull of a pipelined plan brings (its batches of writes and acks)")
	fs.IntVar(&f.o.FloorLoops, "floor-loops", 1, "floor: fetch loops of a pipelined plan on each shard consumer")
	fs.StringVar(&f.o.Sync, "sync", "", `the run's server flush policy: "always" or an interval (default: the server's)`)
	fs.IntVar(&f.rate, "rate", 2_000, "tasks per second of the paced scenarios (priority: P0 tasks, default 200; limits: the rate limit, default 100; fairness: the paced tenant's, default 20)")
	fs.IntVar(&f.burst, "burst", 10, "limits: the rate limit's burst")
	fs.DurationVar(&f.hold, "hold", bench.LimitsHold, "limits: how long a task of the concurrency-limited type runs (its handler sleeps)")
	fs.StringVar(&f.limit, "limit", "both", "limits: the scenarios to run: concurrency, rate or both")
	fs.DurationVar(&f.duration, "duration", 10*time.Second, "length of the paced scenarios")
	fs.Float64Var(&f.timeScale, "time-scale", 0.01, "article: handler durations of 100 ms–2 s are multiplied by this")
	fs.IntVar(&f.tenants, "tenants", 10, "article: tenants")
	fs.DurationVar(&f.window, "window", time.Minute, "delay: tasks come due within this window (after 10 s of submitting)")
	fs.BoolVar(&f.useServer, "use-server", false, "run against --server instead of a server of the run's own")
	fs.StringVar(&f.transport, "transport", "tcp", "the run's own server: tcp (its own process, loopback TCP), in-process (embedded) or both")
	fs.BoolVarP(&f.quiet, "quiet", "q", false, "no progress bar")
	fs.BoolVar(&f.trace, "trace", false, "trace every task with the OpenTelemetry SDK (every span sampled, then dropped): what tracing costs")
	fs.BoolVar(&f.shared, "shared-layout", false, "fairness: on a deployment without fair shares (one catch-all consumer per shard)")
	fs.BoolVar(&f.byKey, "by-key", false, "fairness: between two partition keys of one tenant, on a deployment without fair shares")
	fs.DurationVar(&f.fairHold, "fair-hold", 0, "fairness: how long a task of the backlog runs (its handler sleeps)")
	fs.IntVar(&f.workflow.FanOut, "fan-out", 10_000, "workflow: children of the fan-out")
	fs.IntVar(&f.workflow.Chain, "chain", 1_000, "workflow: tasks of the chain")
	fs.BoolVar(&f.o.MemoryConsumers, "memory-consumers", false, "provision ax's shard consumers with their state in the server's memory (ax provision --memory-consumers)")
	fs.StringVar(&f.workflow.Only, "only", "", `workflow: run one part alone: "chain" (wf-chain only)`)
	fs.BoolVar(&f.o.PublishOnly, "publish-only", false, "submit with a publish-only client (ax submit --publish-only): no record at submit, the claim creates it (throughput, latency, limits)")
	fs.StringVar(&f.profile, "cpuprofile", "", "write a CPU profile of the bench process (client and workers; the server too with --transport in-process) to this file")
	root.AddCommand(cmd)
}
