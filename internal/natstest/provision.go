package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// Provision creates ax's streams, consumers and buckets on js, failing the
// test on error. cfg may be nil for the defaults.
func Provision(t testing.TB, js jetstream.JetStream, cfg *streams.Config) {
	t.Helper()
	if cfg == nil {
		cfg = &streams.Config{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := streams.Provision(ctx, js, cfg); err != nil {
		t.Fatalf("natstest: provision streams: %v", err)
	}
	if err := kv.Provision(ctx, js, &kv.BucketsConfig{Names: cfg.Names, Replicas: cfg.Replicas}); err != nil {
		t.Fatalf("natstest: provision buckets: %v", err)
	}
}
