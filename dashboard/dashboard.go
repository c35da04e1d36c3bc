package dashboard

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/ax-mesh/ax/admin"
	"github.com/ax-mesh/ax/internal/stderrlog"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go"
	"go.uber.org/zap"
)

// Defaults of [Config].
const (
	DefaultInterval    = 2 * time.Second
	DefaultHistory     = 150 // 5 minutes at the default interval
	DefaultRateWindow  = time.Minute
	DefaultCallTimeout = 10 * time.Second
)

//go:embed assets
var assets embed.FS

// Config configures a [Dashboard].
type Config struct {
	// Conn is the NATS connection the admin calls use; its permissions
	// bound what the dashboard can see and do. Required. The dashboard
	// chains a handler in front of its async error handler to recognize
	// permission violations.
	Conn *nats.Conn
	// Names of the deployment. Zero means [streams.DefaultNames].
	Names streams.Names
	// AllowActions enables cancel, pause, resume, reprioritize and replay.
	// Default false: read-only, the action endpoints answer 403.
	AllowActions bool
	// ActionToken must accompany every action (header X-Ax-Token; the page
	// takes it from the URL fragment #token=… once). Empty with
	// AllowActions means a random token made by [New]; read it with
	// [Dashboard.ActionToken].
	ActionToken string
	// AllowedHosts are the host names (or addresses) the Host header of a
	// request may name, besides localhost, 127.0.0.1, ::1 and the address
	// [Dashboard.Serve] listens on; any other request is answered 421 (a
	// DNS-rebound page). Add the names a proxy or remote browser uses.
	AllowedHosts []string
	// Interval between two stats samples (overview and charts). Default 2s;
	// the sampler waits longer when a sample takes more than half of it.
	Interval time.Duration
	// History is how many samples the charts keep. Default 150.
	History int
	// RateWindow is the window of the rates and run times of a sample.
	// Default 1m.
	RateWindow time.Duration
	// CallTimeout bounds one admin call. Default 10s.
	CallTimeout time.Duration
	// Version is shown in the page header.
	Version string
	// Logger. Default: warnings and errors as JSON lines on standard
	// error (zap's production encoding at warn level), so that a server
	// outage is not silent; zap.NewNop() silences it.
	Logger *zap.Logger
}

func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	out.Interval = cmp.Or(out.Interval, DefaultInterval)
	out.History = cmp.Or(out.History, DefaultHistory)
	out.RateWindow = cmp.Or(out.RateWindow, DefaultRateWindow)
	out.CallTimeout = cmp.Or(out.CallTimeout, DefaultCallTimeout)
	if out.Logger == nil {
		out.Logger = stderrlog.New()
	}
	return &out
}

func (c *Config) validate() error {
	if c.Conn == nil {
		return errors.New("dashboard config: Conn is required")
	}
	if c.Interval < 100*time.Millisecond || c.History < 2 || c.RateWindow < time.Second || c.CallTimeout < 100*time.Millisecond {
		return fmt.Errorf("dashboard config: want Interval >= 100ms, History >= 2, RateWindow >= 1s, CallTimeout >= 100ms; have %s, %d, %s, %s",
			c.Interval, c.History, c.RateWindow, c.CallTimeout)
	}
	return nil
}

// Dashboard is the web UI's HTTP handler and the sampler behind its
// overview and charts. Create it with [New]; serve it with [Dashboard.Serve],
// or mount [Dashboard.Handler] and run [Dashboard.Run] yourself.
type Dashboard struct {
	cfg   *Config
	api   *admin.Client
	names streams.Names
	log   *zap.Logger
	perms permissions
	mux   *http.ServeMux
	hosts *hostGuard
	token string // the action token; "" when read-only

	mu      sync.Mutex
	history []Sample      // oldest first, at most cfg.History (mu)
	latest  *Overview     // the last overview (mu)
	changed chan struct{} // closed and replaced at each sample (mu)
}

// New returns a dashboard for the deployment cfg names.
func New(cfg *Config) (*Dashboard, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var err error
	d := &Dashboard{cfg: cfg, api: admin.NewClient(cfg.Conn, cfg.Names), names: cfg.Names,
		log: cfg.Logger.Named("dashboard"), changed: make(chan struct{})}
	if cfg.AllowActions {
		d.token = cfg.ActionToken
		if d.token == "" {
			if d.token, err = newToken(); err != nil {
				return nil, err
			}
		}
	}
	d.hosts = newHostGuard(cfg.AllowedHosts)
	d.perms.watch(cfg.Conn)
	d.mux = d.routes()
	return d, nil
}

// ActionToken returns the token every action must carry ("" when the
// dashboard is read-only).
func (d *Dashboard) ActionToken() string { return d.token }

// Handler serves the pages and the JSON API under /api/, to requests whose
// Host header names an allowed host ([Config.AllowedHosts]).
func (d *Dashboard) Handler() http.Handler { return d.hosts.wrap(d.mux) }

func (d *Dashboard) routes() *http.ServeMux {
	static, _ := fs.Sub(assets, "assets")
	mux := http.NewServeMux()
	mux.Handle("GET /", withHeaders(http.FileServerFS(static)))
	mux.HandleFunc("GET /api/overview", d.handleOverview)
	mux.HandleFunc("GET /api/live", d.handleLive)
	mux.HandleFunc("GET /api/workers", d.handleWorkers)
	mux.HandleFunc("GET /api/tasks", d.handleTasks)
	mux.HandleFunc("GET /api/tasks/{id}", d.handleTask)
	mux.HandleFunc("GET /api/dlq", d.handleDLQ)
	mux.HandleFunc("GET /api/cron", d.handleCron)
	mux.HandleFunc("GET /api/limits", d.handleLimits)
	mux.HandleFunc("GET /api/workflows", d.handleWorkflows)
	mux.HandleFunc("GET /api/workflows/{id}", d.handleWorkflow)
	mux.HandleFunc("POST /api/actions/{verb}", d.handleAction)
	return mux
}

// withHeaders adds the security headers of the static pages.
func withHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; img-src 'self' data:")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("X-Frame-Options", "DENY")
		h.ServeHTTP(w, r)
	})
}

// Serve listens on addr and serves the dashboard, with its sampler, until
// ctx ends; ready, if not nil, gets the bound address first.
func (d *Dashboard) Serve(ctx context.Context, addr string, ready func(net.Addr)) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("dashboard: listen on %s: %w", addr, err)
	}
	d.hosts.allow(l.Addr().String())
	d.hosts.allow(addr)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	srv := &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }} // ends live streams at shutdown
	if ready != nil {
		ready(l.Addr())
	}
	d.log.Info("dashboard_serving", zap.String("addr", l.Addr().String()), zap.Bool("allow_actions", d.cfg.AllowActions))
	var wg sync.WaitGroup
	wg.Go(func() { _ = d.Run(ctx) })
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err = <-done:
		err = fmt.Errorf("dashboard: serve: %w", err)
	case <-ctx.Done():
		shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer stop()
		_ = srv.Shutdown(shutdownCtx)
		if serr := <-done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
			err = fmt.Errorf("dashboard: serve: %w", serr)
		}
	}
	cancel()
	wg.Wait()
	return err
}
