package cli

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/metrics"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

// leaderFlags are the flags of every command that runs the leader loops.
type leaderFlags struct {
	id             string
	leaseTTL       time.Duration
	agingThreshold time.Duration
	alert          float64
	refuse         float64
	pause          float64
	resume         float64
	ackWait        time.Duration
	sweepEvery     time.Duration
}

func (f *leaderFlags) add(cmd *cobra.Command, withAckWait bool) {
	fs := cmd.Flags()
	fs.StringVar(&f.id, "scheduler-id", "", "id of this scheduler in the leader lease (default: <hostname>-<random>)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", kv.DefaultLeaseTTL, "TTL of the leader lease (whole seconds); a new leader takes over within it")
	fs.DurationVar(&f.agingThreshold, "aging-threshold", scheduler.DefaultAgingThreshold, "lift a task waiting this long one priority level (-1ns: off)")
	def := ax.DefaultPressureThresholds()
	fs.Float64Var(&f.alert, "pressure-alert", def.Alert, "bucket depth that raises an alert, and below which a refusing bucket admits non-core tasks again")
	fs.Float64Var(&f.refuse, "pressure-refuse", def.Refuse, "bucket depth from which the server refuses non-core tasks (until the depth is below --pressure-alert)")
	fs.Float64Var(&f.pause, "pressure-pause", def.Pause, "bucket depth at which P3/P4 dispatch pauses")
	fs.Float64Var(&f.resume, "pressure-resume", def.Resume, "depth below which paused dispatch resumes")
	fs.DurationVar(&f.sweepEvery, "sweep-interval", 0, "how often the reconciler checks the task records due for a check (default 1s)")
	if withAckWait {
		fs.DurationVar(&f.ackWait, "ack-wait", 0, "ack wait of the shard consumers; 0 reads it from them, another value must equal theirs (else the command fails: the deployment owns it)")
	}
}

func (f *leaderFlags) config(names streams.Names, ackWait time.Duration, log *zap.Logger) *scheduler.Config {
	aging := f.agingThreshold
	if aging < 0 {
		aging = -1
	}
	return &scheduler.Config{
		Names: names, ID: f.id, LeaseTTL: f.leaseTTL, AgingThreshold: aging,
		Pressure: ax.PressureThresholds{Alert: f.alert, Refuse: f.refuse, Pause: f.pause, Resume: f.resume},
		AckWait:  ackWait, SweepInterval: f.sweepEvery, Logger: log,
	}
}

func addScheduler(root *cobra.Command, e *env) {
	var f leaderFlags
	var mf metricsFlags
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run the leader loops (delayed release, cron, aging, backpressure, sweeping) and the management API",
		Long: `ax scheduler campaigns for the leader lease (key "leader" in AX_LOCKS) and, while
it leads, runs the control loops that must not run twice. Run two or more for
availability: when the leader dies, another takes over within one lease TTL.
Every instance also serves the management API (NATS micro service "ax" on
ax.admin.>, a queue group shared by all instances) and, with --metrics-addr,
Prometheus metrics. It does not provision: run ax provision first (it waits,
saying so, until the streams and buckets exist).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			d, err := e.startDaemon(ctx, "ax scheduler", roleScheduler, mf, true)
			if err != nil {
				return err
			}
			defer d.close()
			// ax scheduler does not provision (ax provision does, with
			// the deployment's settings): it waits until deploy.Open
			// finds the deployment, and the leader's lock bucket.
			var dep *deploy.Deployment
			err = waitFor(ctx, d.log, provisionHint, func() error {
				var err error
				if dep, err = e.openDeployment(ctx, d.js, deploy.Options{}); err != nil {
					return err
				}
				return waitBuckets(ctx, d, dep.Names().LocksBucket())
			})
			if err != nil {
				return err
			}
			cfg := f.config(dep.Names(), f.ackWait, d.log)
			observeLeader(cfg, d.metrics)
			// The leader reads the streams' settings as it starts: a
			// cluster whose stream leaders are being elected (a node
			// restarted) answers after a while, as for a worker.
			var l *scheduler.Leader
			err = waitFor(ctx, d.log, provisionHint, func() error {
				var err error
				l, err = dep.Leader(ctx, cfg)
				return settled(err)
			})
			if err != nil {
				return err
			}
			admin, err := startAdmin(ctx, dep, d.log)
			if err != nil {
				return err
			}
			defer func() { _ = admin.Stop(context.WithoutCancel(ctx)) }()
			var wg sync.WaitGroup
			defer wg.Wait()
			wg.Go(func() { reportLeading(ctx, l, d.metrics) })
			fmt.Fprintf(e.errOut, "scheduler %s campaigning on %s (the deployment's ack wait: %s); management API on %s\n",
				l.ID(), d.nc.ConnectedUrlRedacted(), dep.AckWait(), dep.Names().AdminSubject(">"))
			return l.Run(ctx)
		},
	}
	f.add(cmd, true)
	mf.add(cmd)
	root.AddCommand(cmd)
}

// observeLeader feeds the leader's pressure reports to m (the highest
// bucket level; only the leader reports) and counts its reconciler's repairs
// and the mistyped submits its watch saw.
func observeLeader(cfg *scheduler.Config, m *metrics.Metrics) {
	if m == nil {
		return
	}
	cfg.OnPressure = func(p ax.Pressure) {
		level := 0
		for _, b := range p.Buckets {
			level = max(level, int(b.Level))
		}
		m.SetPressure(level)
	}
	cfg.OnRepair = func(r control.Repair) { m.Repaired(string(r.State), r.Action) }
	cfg.OnReject = func(r control.RejectedSubmit) { m.RejectedSubmit(r.Reason) }
	cfg.OnForeignValue = m.ForeignValueRepaired
}

// reportLeading sets the leader gauge of m from l every second until ctx ends.
func reportLeading(ctx context.Context, l *scheduler.Leader, m *metrics.Metrics) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		m.SetLeader(l.Leading())
		select {
		case <-ctx.Done():
			m.SetLeader(false)
			return
		case <-tick.C:
		}
	}
}

// startLeader runs a leader contender of dep in the background; the
// returned function stops it and waits.
func startLeader(ctx context.Context, dep *deploy.Deployment, cfg *scheduler.Config, m *metrics.Metrics) (func(), error) {
	l, err := dep.Leader(ctx, cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.Run(ctx) })
	if m != nil {
		wg.Go(func() { reportLeading(ctx, l, m) }) // ax_leader (it read 0 under ax dev)
	}
	return func() { cancel(); wg.Wait() }, nil
}
