package cli

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/ax-mesh/ax/dashboard"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"
)

// dashboardFlags are the flags of `ax dashboard`.
type dashboardFlags struct {
	listen       string
	allowActions bool
	actionToken  string
	allowHosts   []string
	interval     time.Duration
	window       time.Duration
}

func addDashboard(root *cobra.Command, e *env) {
	var f dashboardFlags
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard: buckets, workers, tasks and trails, dead letters, cron",
		Long: `ax dashboard serves a web UI on --addr that shows ax through its management
API (the ax.admin.* NATS service): per-bucket depth, in flight, rates, p99 and
pressure with live charts, the workers and their shards, task search with each
task's trail, the dead letters, and the cron schedules. It connects with the
--server and credential flags, so that user's NATS permissions apply; the
browser never talks NATS. It is read-only unless --allow-actions is given,
which enables cancel, pause, resume, reprioritize and replay (each confirmed).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDashboard(cmd.Context(), e, &f) },
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "addr", "127.0.0.1:8080", "HTTP address of the dashboard")
	// --listen is the NATS address of ax dev and ax server.
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "HTTP address of the dashboard")
	_ = fs.MarkDeprecated("listen", "use --addr (--listen is the NATS address of ax dev and ax server)")
	fs.BoolVar(&f.allowActions, "allow-actions", false, "allow cancel, pause, resume, reprioritize and replay from the UI")
	f.addGuards(fs)
	fs.DurationVar(&f.interval, "interval", dashboard.DefaultInterval, "time between two stats samples (overview and charts)")
	fs.DurationVar(&f.window, "rate-window", dashboard.DefaultRateWindow, "window of the rates and run times shown")
	root.AddCommand(cmd)
}

// addGuards adds the flags that say who may use the dashboard.
func (f *dashboardFlags) addGuards(fs *pflag.FlagSet) {
	fs.StringVar(&f.actionToken, "action-token", "",
		"token every action must carry, with --allow-actions (default $AX_DASHBOARD_TOKEN, else a random one, printed in the dashboard's URL)")
	fs.StringSliceVar(&f.allowHosts, "allow-host", nil,
		"host names the dashboard answers besides localhost, 127.0.0.1, ::1 and the host of its address (a proxy's or a remote browser's name)")
}

func runDashboard(ctx context.Context, e *env, f *dashboardFlags) error {
	d, err := e.startDaemon(ctx, "ax dashboard", roleOperator, metricsFlags{}, false)
	if err != nil {
		return err
	}
	defer d.close()
	stop, err := e.startDashboard(ctx, d.nc, d.names, f, d.log)
	if err != nil {
		return err
	}
	defer stop()
	<-ctx.Done()
	return nil
}

// startDashboard serves the dashboard on f.listen ("" serves nothing) until
// the returned stop is called or ctx ends.
func (e *env) startDashboard(ctx context.Context, nc *nats.Conn, names streams.Names, f *dashboardFlags, log *zap.Logger) (func(), error) {
	if f.listen == "" {
		return func() {}, nil
	}
	d, err := dashboard.New(&dashboard.Config{Conn: nc, Names: names, AllowActions: f.allowActions,
		ActionToken: f.actionToken, AllowedHosts: f.allowHosts, Interval: f.interval, RateWindow: f.window, Version: Version, Logger: log})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	go func() { errc <- d.Serve(ctx, f.listen, func(a net.Addr) { ready <- a }) }()
	select {
	case a := <-ready:
		if f.allowActions {
			fmt.Fprintf(e.errOut, "dashboard on http://%s/ (actions allowed: open http://%s/#token=%s to act)\n", a, a, d.ActionToken())
		} else {
			fmt.Fprintf(e.errOut, "dashboard on http://%s/ (read-only; --allow-actions enables actions)\n", a)
		}
	case err := <-errc:
		cancel()
		return nil, err
	}
	return func() { cancel(); <-errc }, nil
}
