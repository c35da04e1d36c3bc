package control

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ax-mesh/ax/internal/streams"
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
	// LimitsKey holds the mesh's flow control: the operator's concurrency
	// and rate limits and the paused types and tenants, as [Limits] JSON.
	// The management API writes it by compare-and-set; every worker
	// watches it.
	LimitsKey = "limits"
	// TenantsKey holds the tenants a fair deployment serves ([Tenants]):
	// those whose consumers exist, which the workers pull from.
	TenantsKey = "tenants"
	// WorkflowPausedPrefix prefixes the key of a paused workflow:
	// "workflow-paused.<tenant>.<id>" ([WorkflowPausedKey]), written by the
	// workflow.pause verb and deleted by workflow.resume. While it exists the
	// leader releases no task of the workflow.
	WorkflowPausedPrefix = "workflow-paused."
)

// WorkflowPausedKey is the key that marks tenant's workflow id paused.
func WorkflowPausedKey(tenant, id string) string { return WorkflowPausedPrefix + tenant + "." + id }

// ParseWorkflowPausedKey returns the tenant and id of a
// [WorkflowPausedKey]; ok is false for any other key.
func ParseWorkflowPausedKey(key string) (tenant, id string, ok bool) {
	rest, ok := strings.CutPrefix(key, WorkflowPausedPrefix)
	if !ok {
		return "", "", false
	}
	tenant, id, ok = strings.Cut(rest, ".")
	return tenant, id, ok && tenant != "" && id != "" && !strings.Contains(id, ".")
}

// WorkflowPause is the value of a [WorkflowPausedKey].
type WorkflowPause struct {
	PausedAt time.Time `json:"paused_at"`
	// SeenAt is when the leader saw the pause: it writes it once, at the
	// mark's revision, from the loop that releases the workflow's tasks,
	// so no release of it was under way then and none follows. Nil until
	// a leader has seen it.
	SeenAt *time.Time `json:"seen_at,omitempty"`
}

// Open binds the AX_CONTROL bucket of the deployment named names, which
// kv.Provision creates.
func Open(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyValue, error) {
	bucket, err := js.KeyValue(ctx, names.ControlBucket())
	if err != nil {
		return nil, fmt.Errorf("bind the control bucket %s: %w", names.ControlBucket(), err)
	}
	return bucket, nil
}
