package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/deploy"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/ax-mesh/ax/metrics"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
)

// startMetrics serves m on addr ("" serves nothing) until the returned stop
// is called or ctx ends.
func (e *env) startMetrics(ctx context.Context, addr string, m *metrics.Metrics, log *zap.Logger) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	go func() { errc <- m.Serve(ctx, addr, log, func(a net.Addr) { ready <- a }) }()
	select {
	case a := <-ready:
		fmt.Fprintf(e.errOut, "metrics on http://%s/metrics\n", a)
	case err := <-errc:
		cancel()
		return nil, err
	}
	return func() { cancel(); <-errc }, nil
}

// startAdmin starts the management API of dep.
func startAdmin(ctx context.Context, dep *deploy.Deployment, log *zap.Logger) (*admin.Service, error) {
	svc, err := dep.Admin(ctx, &admin.Config{Version: Version, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := svc.Start(ctx); err != nil {
		return nil, err
	}
	return svc, nil
}

// daemon is what a long-running command (ax worker, ax scheduler) holds: a
// JSON logger, a connection, the deployment's names and its metrics.
type daemon struct {
	log     *zap.Logger
	nc      *nats.Conn
	js      jetstream.JetStream
	names   streams.Names
	metrics *metrics.Metrics
	closers []func()
}

// metricsFlags are the flags of a command that serves Prometheus metrics.
type metricsFlags struct {
	addr   string // "" serves none
	labels int    // metrics.Config.MaxLabelValues
}

func (f *metricsFlags) add(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.addr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9464")
	fs.IntVar(&f.labels, "metrics-labels", metrics.DefaultMaxLabelValues,
		`task types, and tenants, that keep a metrics label of their own (the busiest; the others are counted under "_other"); -1: no bound`)
}

// config returns the metrics config of js and names with the flags' bound.
func (f *metricsFlags) config(js jetstream.JetStream, names streams.Names) *metrics.Config {
	return &metrics.Config{JetStream: js, Names: names, MaxLabelValues: f.labels}
}

// startDaemon connects as name in role (a refused permission fatal or not:
// see [env.connectAs]) and serves metrics as mf says. The bucket and
// dead-letter gauges, read from JetStream, are served by the control plane
// only (the scheduler role may read those streams; a worker may not).
func (e *env) startDaemon(ctx context.Context, name, role string, mf metricsFlags, fatal bool) (*daemon, error) {
	names, err := e.names()
	if err != nil {
		return nil, err
	}
	log, err := e.logger(true)
	if err != nil {
		return nil, err
	}
	d := &daemon{log: log, names: names, closers: []func(){func() { _ = log.Sync() }}}
	// Processes of a deployment start in any order: wait for NATS.
	err = waitFor(ctx, log, "nats", func() error {
		var err error
		d.nc, d.js, err = e.connectAs(name, role, fatal)
		if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) {
			return permanent{err}
		}
		return err
	})
	if err != nil {
		d.close()
		return nil, err
	}
	d.closers = append(d.closers, d.nc.Close)
	js := d.js
	if role != roleScheduler {
		js = nil
	}
	d.metrics = metrics.New(mf.config(js, names))
	stop, err := e.startMetrics(ctx, mf.addr, d.metrics, log)
	if err != nil {
		d.close()
		return nil, err
	}
	d.closers = append(d.closers, stop)
	return d, nil
}

// provisionHint is what a process waits for until the deployment is
// provisioned: ax provision (as the scheduler user) creates it, ax dev for
// development; ax scheduler does not.
const provisionHint = "the ax streams and buckets (run ax provision as the scheduler user, or ax dev)"

// waitBuckets binds each bucket (provisioning writes them one by one,
// after the streams).
func waitBuckets(ctx context.Context, d *daemon, buckets ...string) error {
	for _, bucket := range buckets {
		if _, err := d.js.KeyValue(ctx, bucket); err != nil {
			return fmt.Errorf("bucket %s: %w", bucket, err)
		}
	}
	return nil
}

// permanent marks an error [waitFor] must not wait out.
type permanent struct{ error }

func (p permanent) Unwrap() error { return p.error }

// waitFor calls fn until it succeeds, ctx ends or fn returns a [permanent]
// error, logging what it waits for (what) and why, with a backoff from
// 250 ms to 5 s: a deployment's processes start in any order, so a worker
// started before NATS or before the buckets exist waits for them.
func waitFor(ctx context.Context, log *zap.Logger, what string, fn func() error) error {
	wait := 250 * time.Millisecond
	for {
		err := fn()
		var p permanent
		if err == nil || errors.As(err, &p) {
			return err
		}
		if ctx.Err() != nil { // stopped, or a refused permission ended the command
			return fmt.Errorf("gave up waiting for %s: %w", what, err)
		}
		log.Warn("waiting", zap.String("for", what), zap.Duration("retry_in", wait), zap.Error(err))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("gave up waiting for %s: %w", what, err)
		case <-t.C:
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// close undoes startDaemon, last step first.
func (d *daemon) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}
