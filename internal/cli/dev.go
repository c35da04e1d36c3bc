package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/dashboard"
	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/internal/demo"
	"github.com/ax-mesh/ax/internal/embedded"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

// devFlags are the flags of `ax dev`.
type devFlags struct {
	listen   string
	data     string
	sync     string
	workers  int
	demo     int
	exit     bool
	capacity int64
	policy   string
	memory   bool // --memory-consumers
	layout   layoutFlags
	payload  int32
	wf       workerFlags
	lf       leaderFlags
	dash     dashboardFlags
}

func addDev(root *cobra.Command, e *env) {
	var f devFlags
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run everything on this machine: embedded NATS with JetStream, workers and a demo load",
		Long: `ax dev starts an embedded NATS server with JetStream (client port on --listen,
data in --data), provisions ax's streams, consumers and buckets, runs workers
with the built-in task types (sleep, fail, echo) and the scheduler's leader
loops (delayed and cron tasks, aging, backpressure), submits a demo load with a
live progress line and prints a summary. It then serves until Ctrl-C (or exits
with --exit), so that other ax commands can use it with --server.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDev(cmd.Context(), e, &f) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", "127.0.0.1:4222", "client address of the embedded NATS server")
	fs.StringVar(&f.data, "data", "./ax-data", "JetStream data directory")
	fs.StringVar(&f.sync, "sync", "", `JetStream flush policy: "always" or an interval such as "1s" (default: the server's 2m)`)
	fs.IntVar(&f.workers, "workers", 2, "workers to run in this process")
	fs.IntVar(&f.demo, "demo", 10_000, "demo tasks to submit (0: none, just serve)")
	fs.BoolVar(&f.exit, "exit", false, "exit after the demo instead of serving until Ctrl-C")
	fs.Int64Var(&f.capacity, "capacity", streams.DefaultCapacity, "capacity of each priority bucket, in tasks")
	fs.BoolVar(&f.memory, "memory-consumers", false, "keep the shard consumers' state in the server's memory (ax provision --memory-consumers); ax dev provisions them again at each start")
	fs.StringVar(&f.policy, "priority-policy", streams.DefaultPriorityPolicy, "priority policy of the shard consumers: overflow (work stealing), pinned_client or none")
	f.layout.add(fs, "route by task type (worker pools): a worker receives only the types it serves (see ax worker --types)",
		"fair shares between tenants: each tenant's tasks of a priority are a queue of their own, served in turn")
	fs.Int32Var(&f.payload, "max-payload", 1<<20, "largest message the embedded server accepts, in bytes")
	fs.StringVar(&f.dash.listen, "dashboard", "", `serve the web dashboard on this address, e.g. "127.0.0.1:8080" (default: none)`)
	fs.BoolVar(&f.dash.allowActions, "allow-actions", false, "allow actions (cancel, pause, resume, reprioritize, replay) in the dashboard")
	f.dash.addGuards(fs)
	f.dash.interval, f.dash.window = dashboard.DefaultInterval, dashboard.DefaultRateWindow
	f.wf.add(cmd)
	// ax dev provisions the deployment: its --ack-wait is the one provisioned.
	fs.Lookup("id").Usage = "worker id; with --workers above 1, each worker's is <id>-<n> (default: <hostname>-<random>)"
	fs.Lookup("ack-wait").Usage = fmt.Sprintf("ack wait of the shard consumers ax dev provisions (0: %s)", streams.DefaultAckWait)
	f.lf.add(cmd, false)
	root.AddCommand(cmd)
}

func runDev(ctx context.Context, e *env, f *devFlags) error {
	layout, err := f.layout.layout()
	if err != nil {
		return err
	}
	log, err := e.logger(false)
	if err != nil {
		return err
	}
	defer func() { _ = log.Sync() }()
	names, err := e.names()
	if err != nil {
		return err
	}
	srv, err := embedded.Start(ctx, embedded.Options{Listen: f.listen, DataDir: f.data, Sync: f.sync, MaxPayload: f.payload})
	if err != nil {
		return err
	}
	defer func() {
		if err := srv.Stop(embedded.ShutdownGrace); err != nil {
			fmt.Fprintln(e.errOut, err)
		}
	}()
	fmt.Fprintf(e.errOut, "NATS with JetStream on %s (data in %s)\n", srv.ClientURL(), f.data)

	nc, err := nats.Connect(srv.ClientURL(), nats.Name("ax dev"), nats.InProcessServer(srv.Server))
	if err != nil {
		return fmt.Errorf("connect to the embedded server: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	dep, err := e.provision(ctx, js, &streams.Config{Capacity: f.capacity, AckWait: f.wf.ackWait, PriorityPolicy: f.policy, Layout: layout, MemoryConsumers: f.memory})
	if err != nil {
		return err
	}
	m := metrics.New(f.wf.metrics.config(js, names))
	stopMetrics, err := e.startMetrics(ctx, f.wf.metrics.addr, m, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	// The ack wait is the deployment's, just provisioned from --ack-wait.
	lcfg := f.lf.config(names, 0, log.WithOptions(zap.IncreaseLevel(zap.WarnLevel)))
	observeLeader(lcfg, m)
	stopLeader, err := startLeader(ctx, dep, lcfg, m)
	if err != nil {
		return err
	}
	defer stopLeader()
	reg, closeReg, err := f.wf.registry(ctx, js, names, log)
	if err != nil {
		return err
	}
	defer closeReg()
	admin, err := startAdmin(ctx, dep, log)
	if err != nil {
		return err
	}
	defer func() { _ = admin.Stop(context.WithoutCancel(ctx)) }()
	stopDashboard, err := e.startDashboard(ctx, nc, names, &f.dash, log)
	if err != nil {
		return err
	}
	defer stopDashboard()
	wcfg := f.wf.config(names, reg, log.WithOptions(zap.IncreaseLevel(zap.WarnLevel)))
	wcfg.Observer, wcfg.AckWait = m, 0 // the deployment's, as for the leader
	ws, err := startWorkers(ctx, dep, f.workers, wcfg)
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.wf.grace+10*time.Second)
		defer cancel()
		if err := stopWorkers(stopCtx, ws); err != nil {
			log.Warn("stop_workers", zap.Error(err))
		}
	}()
	fmt.Fprintf(e.errOut, "%d workers x %d slots running; try: ax task get <id> --server %s\n", len(ws), f.wf.concurrency, srv.ClientURL())

	if f.demo > 0 {
		client, err := dep.Client(ctx, &ax.Config{Logger: log})
		if err != nil {
			return err
		}
		summary, err := demo.Run(ctx, client, ws, demo.Options{Tasks: f.demo, Progress: e.errOut})
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		if summary != nil {
			summary.Print(e.out)
			if len(summary.SampleIDs) > 0 {
				fmt.Fprintln(e.out, lookHint(f, srv.ClientURL(), summary.SampleIDs[0]))
			}
		}
	}
	if f.exit {
		return nil
	}
	fmt.Fprintln(e.errOut, "serving; Ctrl-C to stop")
	<-ctx.Done()
	return nil
}

// provision opens the deployment of --prefix provisioning it with cfg (its
// streams, consumers and buckets created or updated, deploy.Open with
// Provision) and says what changed.
func (e *env) provision(ctx context.Context, js jetstream.JetStream, cfg *streams.Config) (*deploy.Deployment, error) {
	dep, err := e.openDeployment(ctx, js, deploy.Options{Provision: true, Streams: cfg, Buckets: &kv.BucketsConfig{Replicas: cfg.Replicas}})
	if err != nil {
		return nil, err
	}
	report := dep.Provisioned().Streams
	fmt.Fprintf(e.errOut, "provisioned: %s\n", report)
	for _, u := range report.Updated {
		fmt.Fprintf(e.errOut, "  updated %s\n", u)
	}
	return dep, nil
}

// lookHint tells how to look at task id of the demo: at once against the
// server ax dev serves, or, with --exit, which stops that server, after
// starting ax dev again on the same data.
func lookHint(f *devFlags, url, id string) string {
	server := ""
	if url != nats.DefaultURL {
		server = " --server " + url
	}
	if !f.exit {
		return fmt.Sprintf("look at one: ax task trail %s%s", id, server)
	}
	listen := ""
	if f.listen != "127.0.0.1:4222" {
		listen = " --listen " + f.listen
	}
	return fmt.Sprintf("look at one: ax dev has stopped its server; its tasks stay in %s: run `ax dev --demo 0 --data %s%s`, then `ax task trail %s%s`",
		f.data, f.data, listen, id, server)
}
