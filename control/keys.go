package control

import (
	"context"
	"fmt"

	"github.com/ax-mesh/ax/kv"
	"github.com/ax-mesh/ax/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// The keys of AX_CONTROL, every one of them: what each holds is in
// docs/WIRE.md ("AX_CONTROL"), and TestControlBucketKeysAreDocumented keeps
// the two together.
const (
	// PressureKey holds the leader's backpressure report (ax.Pressure),
	// which Go clients watch.
	PressureKey = "pressure"
	// ShardTableKey holds the shard table: which live worker consumes
	// which shards (written by the workers, worker/mesh.go).
	ShardTableKey = "shards"
	// PoolTableKey holds the per-type shard tables of a pools deployment.
	PoolTableKey = "pools"
	// CronKeyPrefix prefixes the key of a cron job: "cron.<name>".
	CronKeyPrefix = "cron."
	// ReconcilerKey holds the reconciler's report ([ReconcilerReport]).
	ReconcilerKey = "reconciler"
	// RejectsKey holds the report of mistyped submits ([RejectsReport]).
	RejectsKey = "rejects"
	// UnservedDeadlinesKey holds the deadlines an operator set for
	// unserved task types ([UnservedDeadlines]).
	UnservedDeadlinesKey = "unserved-deadlines"
	// LimitsKey holds the operator's concurrency and rate limits and the
	// paused types and tenants (kv.Limits; its reader and writer live with
	// the slots and tokens they govern, in kv/limits.go).
	LimitsKey = kv.LimitsKey
	// TenantsKey holds the tenants a fair deployment serves ([Tenants]):
	// those whose consumers exist, which the workers pull from.
	TenantsKey = "tenants"
)

// Open binds the AX_CONTROL bucket of the deployment named names, which
// kv.Provision creates.
func Open(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyValue, error) {
	bucket, err := js.KeyValue(ctx, names.ControlBucket())
	if err != nil {
		return nil, fmt.Errorf("bind the control bucket %s: %w", names.ControlBucket(), err)
	}
	return bucket, nil
}
