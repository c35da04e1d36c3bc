package cli

import (
	"context"
	"fmt"
	"net"

	"github.com/ax-mesh/ax/metrics"
	"github.com/ax-mesh/ax/scheduler"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go/jetstream"
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

// startAdmin starts the management API on js.
func startAdmin(ctx context.Context, js jetstream.JetStream, names streams.Names, log *zap.Logger) (*scheduler.Admin, error) {
	admin, err := scheduler.NewAdmin(ctx, js, &scheduler.AdminConfig{Names: names, Version: Version, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := admin.Start(ctx); err != nil {
		return nil, err
	}
	return admin, nil
}
