// Package embedded runs a NATS server with JetStream inside an ax process,
// for `ax dev` and for the test suites' server processes.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
)

// Options configure [Start].
type Options struct {
	// Listen is the client address, host:port. Default "127.0.0.1:4222".
	Listen string
	// DataDir holds the JetStream store. Required.
	DataDir string
	// Sync is "always" (fsync every write) or a Go duration (flush period);
	// empty keeps the server default (2 minutes).
	Sync string
	// Name of the server; default "ax-dev".
	Name string
	// MaxPayload is the largest message the server accepts, in bytes.
	// Default 1 MiB (the server's default).
	MaxPayload int32
	// Cluster, when set, joins a JetStream cluster: its route address and
	// the routes of all members.
	Cluster *ClusterOptions
	// Logger receives the server's log lines; nil disables them.
	Logger *zap.Logger
	// Monitor, when set, serves the server's HTTP monitoring endpoints
	// (/varz, /jsz, …) on this host:port; `ax bench` reads them.
	Monitor string
}

// ClusterOptions join the embedded server to a cluster.
type ClusterOptions struct {
	Name   string   // cluster name, the same on every member
	Listen string   // route address, host:port
	Routes []string // route URLs of every member, e.g. nats://127.0.0.1:6222
}

// ErrDataDirInUse is returned by [Start] when another server holds the
// data directory.
var ErrDataDirInUse = errors.New("data dir in use")

// ErrAddrInUse is returned by [Start] when the listen address is taken.
var ErrAddrInUse = errors.New("address in use")

// ShutdownGrace bounds [Server.Stop]: past it the process goes on without
// waiting for the server (what is on disk is safe).
const ShutdownGrace = 30 * time.Second

// Server is a running embedded server that holds its data directory.
type Server struct {
	*server.Server
	unlock func()
}

// Stop shuts the server down and releases its data directory, waiting at
// most grace (default [ShutdownGrace]) for the shutdown: a shutdown that
// hangs is reported and left behind, and Stop returns an error saying so.
func (s *Server) Stop(grace time.Duration) error {
	if grace <= 0 {
		grace = ShutdownGrace
	}
	done := make(chan struct{})
	go func() {
		s.Shutdown()
		s.WaitForShutdown()
		close(done)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		s.unlock()
		return nil
	case <-t.C:
		// The process is about to exit: the kernel releases the lock.
		return fmt.Errorf("embedded server: shutdown did not finish within %s; exiting anyway (what is on disk is safe)", grace)
	}
}

// Start starts the server and waits until it accepts connections, or until
// ctx ends. It fails at once when the data directory is held by another
// server or the listen address is taken.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.DataDir == "" {
		return nil, fmt.Errorf("embedded server: DataDir is required")
	}
	host, port, err := splitHostPort(o.Listen, "127.0.0.1:4222")
	if err != nil {
		return nil, fmt.Errorf("embedded server: listen: %w", err)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(max(port, 0)))
	unlock, err := lockDataDir(o.DataDir, addr)
	if err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			unlock()
		}
	}()
	if port > 0 {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("embedded server: %w: cannot listen on %s (another server, or another program, has it; pass another --listen): %w", ErrAddrInUse, addr, err)
		}
		_ = l.Close()
	}
	opts := &server.Options{
		ServerName: o.Name,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.DataDir,
		NoSigs:     true,
		NoLog:      o.Logger == nil,
		MaxPayload: o.MaxPayload,
	}
	if opts.ServerName == "" {
		opts.ServerName = "ax-dev"
	}
	if err := applySync(opts, o.Sync); err != nil {
		return nil, err
	}
	if o.Monitor != "" {
		mhost, mport, err := splitHostPort(o.Monitor, "")
		if err != nil {
			return nil, fmt.Errorf("embedded server: monitor: %w", err)
		}
		opts.HTTPHost, opts.HTTPPort = mhost, mport
	}
	if c := o.Cluster; c != nil {
		chost, cport, err := splitHostPort(c.Listen, "127.0.0.1:6222")
		if err != nil {
			return nil, fmt.Errorf("embedded server: cluster listen: %w", err)
		}
		opts.Cluster = server.ClusterOpts{Name: c.Name, Host: chost, Port: cport}
		opts.Routes = server.RoutesFromStr(strings.Join(c.Routes, ","))
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded server: %w", err)
	}
	if o.Logger != nil {
		srv.SetLoggerV2(&zapLogger{log: o.Logger.Named("nats").Sugar()}, false, false, false)
	}
	go srv.Start()
	deadline := time.Now().Add(30 * time.Second)
	for !srv.ReadyForConnections(100 * time.Millisecond) {
		if ctx.Err() != nil || time.Now().After(deadline) {
			srv.Shutdown()
			if ctx.Err() != nil {
				return nil, fmt.Errorf("embedded server: start interrupted: %w", context.Cause(ctx))
			}
			return nil, fmt.Errorf("embedded server: not ready within 30s on %s", addr)
		}
	}
	ok = true
	return &Server{Server: srv, unlock: unlock}, nil
}

// applySync sets the JetStream flush policy: "always" or a duration.
func applySync(opts *server.Options, sync string) error {
	switch sync {
	case "":
	case "always":
		opts.SyncAlways = true
		opts.SyncInterval = 2 * time.Minute
	default:
		d, err := time.ParseDuration(sync)
		if err != nil || d <= 0 {
			return fmt.Errorf("embedded server: sync %q is not \"always\" or a positive duration such as \"1s\"", sync)
		}
		opts.SyncInterval = d
	}
	return nil
}

func splitHostPort(addr, def string) (string, int, error) {
	if addr == "" {
		addr = def
	}
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return "", 0, fmt.Errorf("port %q: %w", p, err)
	}
	if port == 0 {
		port = -1 // random
	}
	return host, port, nil
}

type zapLogger struct{ log *zap.SugaredLogger }

func (l *zapLogger) Noticef(format string, v ...any) { l.log.Infof(format, v...) }
func (l *zapLogger) Warnf(format string, v ...any)   { l.log.Warnf(format, v...) }
func (l *zapLogger) Fatalf(format string, v ...any)  { l.log.Errorf(format, v...) }
func (l *zapLogger) Errorf(format string, v ...any)  { l.log.Errorf(format, v...) }
func (l *zapLogger) Debugf(format string, v ...any)  { l.log.Debugf(format, v...) }
func (l *zapLogger) Tracef(format string, v ...any)  { l.log.Debugf(format, v...) }
