package kv

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// BucketsConfig describes the KV buckets [Provision] creates.
type BucketsConfig struct {
	// Names of the deployment. Zero means [streams.DefaultNames].
	Names streams.Names
	// Replicas of every bucket. Default 1.
	Replicas int
	// MarkerTTL is how long a delete marker of an expired key is kept (at
	// least 1s). Default 1 minute.
	MarkerTTL time.Duration
}

// Provision creates or updates the task, lock, worker and control buckets.
// It is idempotent. A nil cfg means every default.
func Provision(ctx context.Context, js jetstream.JetStream, cfg *BucketsConfig) error {
	if cfg == nil {
		cfg = &BucketsConfig{}
	}
	names := cfg.Names
	replicas := cmp.Or(cfg.Replicas, 1)
	marker := cmp.Or(cfg.MarkerTTL, time.Minute)
	buckets := []jetstream.KeyValueConfig{
		{Bucket: names.TasksBucket(), Description: "ax task records (state machine, trail)"},
		{Bucket: names.LocksBucket(), Description: "ax leases and the leader lock"},
		{Bucket: names.WorkersBucket(), Description: "ax worker membership"},
		{Bucket: names.ControlBucket(), Description: "ax control state: pressure, cron, paused types"},
	}
	for _, b := range buckets {
		b.History = 1
		b.Storage = jetstream.FileStorage
		b.Replicas = replicas
		b.LimitMarkerTTL = marker
		if _, err := js.CreateOrUpdateKeyValue(ctx, b); err != nil {
			return fmt.Errorf("provision bucket %s: %w", b.Bucket, err)
		}
	}
	return nil
}
