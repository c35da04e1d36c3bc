// Package bench implements `ax bench`: load scenarios that measure ax on
// one machine, each against a NATS server of its own (in its own process
// over loopback TCP, or embedded in this one) or a given one, with bare
// JetStream measured the same way as the baseline.
package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/ax-mesh/ax"
	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/embedded"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/worker"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Options are the flags shared by every scenario.
type Options struct {
	Server string // NATS URL; empty runs a server of the run's own in a temp dir
	// ServerCommand, when set (and Server is empty), runs that server in its
	// own process: the command (the ax binary and "server") is given a
	// listen address, a monitoring address and a data directory, and is
	// reached over loopback TCP, as in a deployment. Empty embeds the server
	// in this process (connected in-process, no TCP).
	ServerCommand []string
	Sync          string    // the run's server flush policy: "", "always" or an interval
	Tasks         int       // tasks per run
	Concurrency   int       // handler slots per worker
	Prefetch      int       // worker.Config.PrefetchPerShard (0: its default)
	Workers       int       // workers in this process
	Payload       int       // payload bytes
	Progress      io.Writer // progress bar; nil for none
	// Layout is the layout ax is provisioned with ([streams.Config.Layout];
	// the bare JetStream baseline has none). Zero means
	// [streams.LayoutShared].
	Layout streams.Layout
	// FairTenants are the tenants whose consumers a [streams.LayoutFair]
	// deployment makes and lists up front.
	FairTenants []string
	// Tracer, when set, is the tracer provider of the run's client and
	// workers (every task traced: what tracing costs).
	Tracer trace.TracerProvider
	// PublishOnly submits with a publish-only client
	// ([ax.Config.PublishOnly]): no record at submit, the worker that first
	// sees a task creates it with its claim.
	PublishOnly bool
	// MemoryConsumers provisions ax's shard consumers with their state in
	// the server's memory ([streams.Config.MemoryConsumers]).
	MemoryConsumers bool
	// FloorBatch is the most messages one pull of a pipelined floor plan
	// brings, and so the size of its batches of writes and acks (0:
	// [DefaultFloorBatch]).
	FloorBatch int
	// FloorLoops is how many fetch loops a pipelined floor plan runs on
	// each shard consumer (0: one).
	FloorLoops int
}

// env is one scenario's NATS server, connection and provisioned ax.
type env struct {
	srv   *embedded.Server // the embedded server, or nil
	child *child           // the server process, or nil
	dir   string
	nc    *nats.Conn
	// connectOpts are the options of nc, for another connection.
	connectOpts []nats.Option
	js          jetstream.JetStream
	names       streams.Names
}

// newEnv starts the run's server (unless o.Server is set) and provisions
// ax with prefix, so that runs against a shared server do not collide.
func newEnv(ctx context.Context, o Options, prefix string, capacity int64) (*env, error) {
	e := &env{}
	url := o.Server
	var opts []nats.Option
	if url == "" {
		dir, err := os.MkdirTemp("", "ax-bench-")
		if err != nil {
			return nil, err
		}
		e.dir = dir
	}
	if url == "" && len(o.ServerCommand) > 0 {
		c, err := startChild(ctx, o.ServerCommand, e.dir, o.Sync)
		if err != nil {
			_ = os.RemoveAll(e.dir)
			return nil, err
		}
		e.child, url = c, c.url
	}
	if url == "" {
		srv, err := embedded.Start(ctx, embedded.Options{Listen: "127.0.0.1:0", DataDir: e.dir, Sync: o.Sync, Name: "ax-bench"})
		if err != nil {
			_ = os.RemoveAll(e.dir)
			return nil, err
		}
		e.srv = srv
		url = srv.ClientURL()
		opts = append(opts, nats.InProcessServer(srv.Server))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		e.close()
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	e.nc, e.connectOpts = nc, opts
	if e.js, err = jetstream.New(nc); err != nil {
		e.close()
		return nil, err
	}
	if e.names, err = streams.NewNames(prefix); err != nil {
		e.close()
		return nil, err
	}
	scfg := &streams.Config{Names: e.names, Capacity: capacity, MemoryConsumers: o.MemoryConsumers && prefix != "axbase"}
	if prefix != "axbase" {
		scfg.Layout = o.Layout
		if o.Layout == streams.LayoutFair {
			scfg.Tenants = o.FairTenants
		}
	}
	if _, err := streams.Provision(ctx, e.js, scfg); err != nil {
		e.close()
		return nil, err
	}
	if err := kv.Provision(ctx, e.js, &kv.BucketsConfig{Names: e.names}); err != nil {
		e.close()
		return nil, err
	}
	if err := control.ListTenants(ctx, e.js, e.names, scfg.Tenants...); err != nil {
		e.close()
		return nil, err
	}
	return e, nil
}

func (e *env) close() {
	if e.nc != nil {
		e.nc.Close()
	}
	if e.srv != nil {
		_ = e.srv.Stop(embedded.ShutdownGrace)
	}
	if e.child != nil {
		e.child.stop()
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

// usage is this process's CPU time and peak RSS, and what the server says
// about itself.
type usage struct {
	cpu     time.Duration // this process: client and workers, and the embedded server if any
	peakRSS int64         // bytes
	server  *serverStats  // nil when the server cannot be asked (--use-server)
	bucket  string        // the task bucket, whose writes are the records'
	mode    string        // how the run reaches its server: see [Result.Transport]
}

func (e *env) usage() usage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	u := usage{cpu: cpu, peakRSS: ru.Maxrss * 1024, server: e.settledStats(), bucket: e.names.TasksBucket(), mode: "given"}
	switch {
	case e.child != nil:
		u.mode = "tcp"
	case e.srv != nil:
		u.mode = "in-process"
	}
	return u
}

// run is a scenario's ax: its environment, a submit client and the workers.
type run struct {
	*env
	client     *ax.Client
	workers    []*worker.Worker
	stopLeader func() // set by startLeader
}

// newRun provisions ax (see [newEnv]) and opens a submit client.
func newRun(ctx context.Context, o Options) (*run, error) {
	prefix := "axbench"
	if o.Layout == streams.LayoutPools {
		prefix = "axpools" // a shared server keeps the two layouts apart
	}
	e, err := newEnv(ctx, o, prefix, 0)
	if err != nil {
		return nil, err
	}
	client, err := ax.NewClient(ctx, e.js, &ax.Config{Names: e.names, TracerProvider: o.Tracer, PublishOnly: o.PublishOnly})
	if err != nil {
		e.close()
		return nil, err
	}
	return &run{env: e, client: client}, nil
}

// start runs o.Workers workers of o.Concurrency slots with fn for taskType.
func (r *run) start(ctx context.Context, o Options, taskType string, fn worker.HandlerFunc) error {
	reg := worker.NewRegistry()
	if err := reg.Handle(taskType, fn, nil); err != nil {
		return err
	}
	for range o.Workers {
		w, err := worker.New(ctx, r.js, &worker.Config{Names: r.names, Registry: reg, Concurrency: o.Concurrency, PrefetchPerShard: o.Prefetch, Logger: zap.NewNop(), TracerProvider: o.Tracer})
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

// startLeader runs the scheduler's leader loops in this process until
// close, without aging (it would move tasks between buckets mid-run): a
// limited backlog larger than the workers' parking room steps aside into
// AX_DELAYED, which the leader releases, as in a deployment. The leader
// has a connection of its own, as `ax scheduler` has: its record watch
// and releases do not queue behind the workers' traffic on theirs.
func (r *run) startLeader(ctx context.Context) error {
	nc, err := nats.Connect(r.nc.ConnectedUrl(), r.connectOpts...)
	if err != nil {
		return fmt.Errorf("bench: leader connection: %w", err)
	}
	l, err := newLeader(ctx, nc, r.names)
	if err != nil {
		nc.Close()
		return err
	}
	lctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { _ = l.Run(lctx) })
	r.stopLeader = func() { stop(); wg.Wait(); nc.Close() }
	return nil
}

// newLeader is the bench's leader on connection nc.
func newLeader(ctx context.Context, nc *nats.Conn, names streams.Names) (*scheduler.Leader, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	return scheduler.New(ctx, js, &scheduler.Config{Names: names, Logger: zap.NewNop(), AgingThreshold: -1})
}

// close stops the workers and the leader, then the environment.
func (r *run) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, w := range r.workers {
		_ = w.Stop(ctx)
	}
	if r.stopLeader != nil {
		r.stopLeader()
	}
	r.env.close()
}

// noop is a no-op handler that records each task's submit-to-start latency
// and counts it.
func noop(lat *latencies, done *counter) worker.HandlerFunc {
	return func(_ context.Context, t *worker.Task) error {
		lat.add(since(t.Payload))
		done.n.Add(1)
		return nil
	}
}
