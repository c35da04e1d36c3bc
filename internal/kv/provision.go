package kv

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
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
	// UniqueMaxBytes bounds the unique-task claims bucket (AX_UNIQUE): a
	// producer may write claims with any period, so the bucket must not
	// grow into the account's storage; at the bound a new claim is refused
	// (the submit fails, saying so). Default 256 MiB; -1 lifts it.
	UniqueMaxBytes int64
}

// DefaultUniqueMaxBytes is the default [BucketsConfig.UniqueMaxBytes].
const DefaultUniqueMaxBytes = 256 << 20

// Provision creates or updates the task, lock, worker, control, limits
// and unique-claims buckets.
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
		{Bucket: names.ControlBucket(), Description: "ax control state: backpressure, cron jobs, shard and pool tables, unserved-type deadlines, the leader's reports, limits and pauses"},
		{Bucket: names.LimitsBucket(), Description: "ax limits in use: concurrency slots held, rate tokens"},
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
	return provisionUnique(ctx, js, names.UniqueBucket(), replicas, cmp.Or(cfg.UniqueMaxBytes, DefaultUniqueMaxBytes))
}

// provisionUnique creates or updates the stream of the unique-claims
// bucket, which producers write, as a KV bucket of history 1 that allows
// per-message TTLs (a claim's period) and refuses roll-ups: a
// `Nats-Rollup: all` on one key's subject would purge every tenant's
// claims. nats.go makes every bucket allow roll-ups, and the server needs
// them for delete markers, so this bucket is made here, without markers: an
// expired claim just goes, and ax releases one with a delete marker that
// has a TTL of its own.
func provisionUnique(ctx context.Context, js jetstream.JetStream, bucket string, replicas int, maxBytes int64) error {
	cfg := jetstream.StreamConfig{
		Name:              StreamName(bucket),
		Description:       "ax unique-task claims (per-key TTL: the unique period)",
		Subjects:          []string{KeySubject(bucket, ">")},
		MaxMsgsPerSubject: 1,
		MaxBytes:          maxBytes,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		MaxMsgSize:        -1,
		Storage:           jetstream.FileStorage,
		Replicas:          replicas,
		DenyDelete:        true,
		Duplicates:        2 * time.Minute,
		AllowDirect:       true,
		Discard:           jetstream.DiscardNew,
		AllowMsgTTL:       true,
	}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("provision bucket %s: %w", bucket, err)
	}
	return nil
}
