package deploy

import (
	"github.com/ax-mesh/ax/internal/kv"
	"github.com/ax-mesh/ax/internal/streams"
)

// The layout of streams, consumers and buckets is ax's storage layer
// (internal/streams, internal/kv), which is not API; these are the names an
// operator's program writes for what [Options] provisions and [Open]
// reports. A deployment's names are [ax.Names].
type (
	// StreamsConfig configures the priority streams and their consumers
	// (replicas, limits, ack wait, priority policy, [Layout], tenants):
	// [Options.Streams].
	StreamsConfig = streams.Config
	// StreamsReport lists the streams and consumers provisioning created
	// and updated: [Provisioned.Streams].
	StreamsReport = streams.Report
	// BucketsConfig configures the KV buckets (replicas, retention):
	// [Options.Buckets].
	BucketsConfig = kv.BucketsConfig
	// Layout is how a deployment's priority buckets hand tasks to workers:
	// [LayoutShared], [LayoutPools] or [LayoutFair], fixed when the
	// deployment is created (docs/API.md, "Layouts").
	Layout = streams.Layout
)

// The layouts of a deployment.
const (
	LayoutShared = streams.LayoutShared // one catch-all consumer per priority and shard (the default)
	LayoutPools  = streams.LayoutPools  // one consumer per task type, priority and shard
	LayoutFair   = streams.LayoutFair   // one consumer per tenant, priority and shard
)

// Shard returns the shard (0..31) of a task's partition key, as the
// priority streams compute it: a worker with fixed shards
// (worker.Config.Shards) serves the tasks of the keys of its shards.
func Shard(key string) int { return streams.Shard(key) }
