package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/control"
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Provision creates ax's streams, consumers and buckets on js, failing the
// test on error. cfg may be nil for the defaults.
func Provision(t testing.TB, js jetstream.JetStream, cfg *streams.Config) {
	t.Helper()
	if cfg == nil {
		cfg = &streams.Config{}
	}
	// Generous: on a loaded 2-core machine running other suites, creating
	// 168 streams and consumers has taken more than 30 s.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := streams.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("natstest: provision streams: %v", err)
	}
	if err := kv.Provision(ctx, js, &kv.BucketsConfig{Names: cfg.Names, Replicas: cfg.Replicas}); err != nil {
		t.Fatalf("natstest: provision buckets: %v", err)
	}
	if err := control.ListTenants(ctx, js, cfg.Names, cfg.Tenants...); err != nil {
		t.Fatalf("natstest: list tenants: %v", err)
	}
}
