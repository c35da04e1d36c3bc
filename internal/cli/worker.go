package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/internal/builtin"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

// workerFlags are the flags of every command that runs workers.
type workerFlags struct {
	id          string
	concurrency int
	prefetch    int
	timeout     time.Duration
	maxAttempts int
	ackWait     time.Duration
	grace       time.Duration
	metrics     metricsFlags
	probe       string // journal of the "probe" test type; empty: not registered
	faults      bool   // register the fault-injection test types
	types       []string
	probeTypes  []string // names the probe is registered under instead of "probe"
}

func (f *workerFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.id, "id", "", "worker id (default: the user with --user and --password, as docs/ax-permissions.conf has one user per worker; else <hostname>-<random>)")
	fs.IntVarP(&f.concurrency, "concurrency", "c", worker.DefaultConcurrency, "tasks run at once per worker")
	fs.IntVar(&f.prefetch, "prefetch", 0, "messages of each shard consumer a worker holds at most before its slots take them (default: 2 x concurrency / 32, at least 1, at most 64); more takes fewer pull requests per task for fast tasks, and holds more tasks that another worker cannot take")
	fs.DurationVar(&f.timeout, "timeout", worker.DefaultTimeout, "default timeout of a task")
	fs.IntVar(&f.maxAttempts, "max-attempts", worker.DefaultMaxAttempts, "default attempts before a task is dead")
	fs.DurationVar(&f.ackWait, "ack-wait", 0, "ack wait of the shard consumers; 0 reads it from them, another value must equal theirs (else the command fails: the deployment owns it)")
	fs.DurationVar(&f.grace, "grace", worker.DefaultGracePeriod, "how long running tasks may finish on stop")
	f.metrics.add(cmd)
	fs.StringVar(&f.probe, "probe-journal", "", `register the "probe" test type, journaling executions to this file`)
	fs.StringSliceVar(&f.types, "types", nil, `serve only these of the registered types, e.g. "echo,sleep" (default: all); only on a pools deployment (ax provision --pools), which routes the worker only these types`)
	fs.StringSliceVar(&f.probeTypes, "probe-types", nil, `with --probe-journal, register the probe under these type names instead of "probe" (tests of worker pools)`)
	fs.BoolVar(&f.faults, "fault-types", false, `register the fault suite's types "exit" (ends this process), "panic" and "bigerror" (never in production)`)
}

// registry returns the built-in types, plus the probe and fault types when asked for;
// the returned close function closes the probe's journal.
func (f *workerFlags) registry(ctx context.Context, js jetstream.JetStream, names streams.Names, log *zap.Logger) (*worker.Registry, func(), error) {
	reg := worker.NewRegistry()
	if err := builtin.Register(reg, log); err != nil {
		return nil, nil, err
	}
	if f.faults {
		if err := builtin.RegisterFaults(reg); err != nil {
			return nil, nil, err
		}
	}
	if f.probe == "" {
		reg, err := f.only(reg)
		return reg, func() {}, err
	}
	probe, err := builtin.NewProbe(ctx, js, f.probe, strings.ToUpper(names.Prefix())+"_PROBE")
	if err != nil {
		return nil, nil, err
	}
	if err := probe.Register(reg, f.probeTypes...); err != nil {
		_ = probe.Close()
		return nil, nil, err
	}
	if reg, err = f.only(reg); err != nil {
		_ = probe.Close()
		return nil, nil, err
	}
	return reg, func() { _ = probe.Close() }, nil
}

// only narrows reg to --types, if given.
func (f *workerFlags) only(reg *worker.Registry) (*worker.Registry, error) {
	if len(f.types) == 0 {
		return reg, nil
	}
	out, err := reg.Only(f.types...)
	if err != nil {
		return nil, fmt.Errorf("--types: %w (registered: %s)", err, strings.Join(reg.Types(), ", "))
	}
	return out, nil
}

func (f *workerFlags) config(names streams.Names, reg *worker.Registry, log *zap.Logger) *worker.Config {
	return &worker.Config{
		Names: names, ID: f.id, Registry: reg, Concurrency: f.concurrency, PrefetchPerShard: f.prefetch,
		DefaultTimeout: f.timeout, DefaultMaxAttempts: f.maxAttempts,
		AckWait: f.ackWait, GracePeriod: f.grace, Logger: log, Version: Version,
	}
}

func addWorker(root *cobra.Command, e *env) {
	var wf workerFlags
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a worker with the built-in task types (sleep, fail, echo)",
		Long: `ax worker joins the mesh of workers (a lease on AX_WORKERS/<id>, renewed while
it runs, released when it stops) and consumes the shards the shared assignment
gives it; shards move between workers as they join and leave. See them with
ax workers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if wf.id == "" {
				// A worker of docs/ax-permissions.conf hears the cancel
				// notices of the id named as its user.
				wf.id = e.userName()
			}
			d, err := e.startDaemon(cmd.Context(), "ax worker", roleWorker, wf.metrics, true)
			if err != nil {
				return err
			}
			defer d.close()
			// The deployment may not exist yet (provisioned by ax
			// provision or ax dev, started in any order): wait until
			// deploy.Open finds its streams and every bucket a worker
			// binds (not AX_LOCKS, the leader's, which a worker may not
			// read). A flag that disagrees with it is not waited out.
			var reg *worker.Registry
			closeReg := func() {}
			var w *worker.Worker
			var ackWait time.Duration
			err = waitFor(cmd.Context(), d.log, provisionHint, func() error {
				dep, err := e.openDeployment(cmd.Context(), d.js, deploy.Options{})
				if err != nil {
					return err
				}
				if reg == nil {
					if reg, closeReg, err = wf.registry(cmd.Context(), d.js, dep.Names(), d.log); err != nil {
						reg = nil
						return err
					}
				}
				cfg := wf.config(dep.Names(), reg, d.log)
				cfg.Observer = d.metrics
				w, err = dep.Worker(cmd.Context(), cfg)
				ackWait = dep.AckWait()
				return settled(err)
			})
			defer closeReg()
			if err != nil {
				return err
			}
			fmt.Fprintf(e.errOut, "worker %s joining the mesh on %s (the deployment's ack wait: %s)\n", w.ID(), d.nc.ConnectedUrlRedacted(), ackWait)
			done := make(chan error, 1)
			go func() { done <- w.Run(cmd.Context()) }()
			select {
			case <-w.Ready():
				// Each shard it owns now has a pull request on the server:
				// what is submitted from here on starts in priority order.
				fmt.Fprintf(e.errOut, "worker %s ready: it serves its shards\n", w.ID())
				return <-done
			case err := <-done:
				return err
			}
		},
	}
	wf.add(cmd)
	root.AddCommand(cmd)
}

// startWorkers starts n workers of dep, each with its own config copy.
func startWorkers(ctx context.Context, dep *deploy.Deployment, n int, cfg *worker.Config) ([]*worker.Worker, error) {
	var out []*worker.Worker
	for i := range n {
		c := *cfg
		if c.ID != "" && n > 1 {
			c.ID = fmt.Sprintf("%s-%d", cfg.ID, i)
		}
		w, err := dep.Worker(ctx, &c)
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			return out, errors.Join(err, stopWorkers(context.WithoutCancel(ctx), out))
		}
		out = append(out, w)
	}
	return out, nil
}

func stopWorkers(ctx context.Context, ws []*worker.Worker) error {
	var errs []error
	for _, w := range ws {
		errs = append(errs, w.Stop(ctx))
	}
	return errors.Join(errs...)
}
