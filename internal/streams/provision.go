package streams

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Defaults of [Config].
const (
	DefaultCapacity      = 1_000_000
	DefaultAckWait       = 30 * time.Second
	DefaultMaxAckPending = 2_000
	// DefaultBucketDuplicates is the de-duplication window of the priority
	// buckets: the least the server allows (it cannot be off). JetStream
	// de-duplicates by Nats-Msg-Id per stream, across tenants: within the
	// window a publish of an id another tenant just used is answered
	// "duplicate" and not stored. ax de-duplicates a task id per tenant by
	// its record, so the buckets keep the server's window as short as it
	// goes (docs/SECURITY.md).
	DefaultBucketDuplicates = 100 * time.Millisecond
	// DefaultDuplicates is the de-duplication window of AX_DLQ, AX_TRAIL
	// and AX_DELAYED, which only ax writes: a retried publish of one dead
	// letter is stored once.
	DefaultDuplicates  = 2 * time.Minute
	DefaultTrailMaxAge = 7 * 24 * time.Hour
	DefaultPinnedTTL   = 10 * time.Second
	// DefaultStreamMaxBytes bounds each priority bucket, AX_DLQ, AX_DELAYED
	// and AX_TRAIL: 8 GiB in all, which docs/ax-permissions.conf's account
	// limit (16 GiB) leaves room beside for the KV buckets.
	DefaultStreamMaxBytes = 1 << 30
	// DefaultMaxMsgSize bounds one task message (headers and payload) in a
	// priority bucket; AX_DLQ and AX_DELAYED allow [HeaderRoom] more.
	// [Provision] lowers it to fit the server's max_payload.
	DefaultMaxMsgSize = 1 << 20
	// HeaderRoom is what a dead letter or a schedule may add to a task
	// message: the failure or schedule headers.
	HeaderRoom = 64 << 10
	// DefaultPriorityPolicy of the shard consumers.
	DefaultPriorityPolicy = "overflow"
	// PriorityGroup is the priority group name of every shard consumer.
	PriorityGroup = "ax"
)

// Config describes the streams and consumers [Provision] creates.
type Config struct {
	// Names of the deployment. Zero means [DefaultNames].
	Names Names
	// Replicas of every stream and consumer. Default 1.
	Replicas int
	// Capacity of each priority bucket in messages (MaxMsgs with DiscardNew;
	// a full bucket refuses publishes with err_code 10077). Default 1,000,000.
	Capacity int64
	// AckWait of the shard consumers: how long a delivered task may go without
	// an ack or an in-progress heartbeat before it is redelivered. Default 30s.
	AckWait time.Duration
	// MaxAckPending of each shard consumer. Default 2,000.
	MaxAckPending int
	// Duplicates is the de-duplication window of the priority buckets, at
	// least 100ms. Default 100ms ([DefaultBucketDuplicates]): the window is
	// shared by every tenant of a bucket, and a task id is de-duplicated per
	// tenant by its record. AX_DLQ, AX_TRAIL and AX_DELAYED keep 2m
	// ([DefaultDuplicates]).
	Duplicates time.Duration
	// TrailMaxAge bounds how long AX_TRAIL keeps events. Default 7 days.
	TrailMaxAge time.Duration
	// DLQMaxAge bounds how long AX_DLQ keeps dead letters. Zero keeps them
	// until they are deleted or replayed.
	DLQMaxAge time.Duration
	// PriorityPolicy of the shard consumers' priority group: "overflow"
	// (the default: owners pull, idle workers steal a shard's backlog above
	// a threshold), "pinned_client" (the server delivers a shard only to
	// its pinned owner) or "none" (no group). See
	// docs/decisions/priority-policy-measured.md for the measurements behind
	// the default.
	PriorityPolicy string
	// PinnedTTL of a pinned_client group. Default 10s.
	PinnedTTL time.Duration
	// BucketMaxBytes bounds each priority bucket's storage (MaxBytes with
	// DiscardNew: a full bucket refuses publishes with err_code 10077
	// "maximum bytes exceeded", as [Config.Capacity] does by count).
	// Default 1 GiB; -1 means unbounded.
	BucketMaxBytes int64
	// DLQMaxBytes bounds AX_DLQ; at the bound the oldest dead letters are
	// removed. Default 1 GiB; -1 means unbounded.
	DLQMaxBytes int64
	// DelayedMaxBytes bounds AX_DELAYED. Message schedules forbid
	// DiscardNew, so at the bound the oldest schedules are removed (their
	// records stay PENDING; docs/SECURITY.md). Default 1 GiB; -1 means
	// unbounded.
	DelayedMaxBytes int64
	// TrailMaxBytes bounds AX_TRAIL; at the bound the oldest events are
	// removed. Default 1 GiB; -1 means unbounded.
	TrailMaxBytes int64
	// WorkflowMaxBytes bounds AX_WORKFLOWS; at the bound new workflows are
	// refused (DiscardNew). Default 512 MiB; -1 means unbounded.
	WorkflowMaxBytes int64
	// MaxMsgSize bounds one message of a priority bucket; AX_DLQ and
	// AX_DELAYED take [HeaderRoom] more, and all three must fit the
	// server's max_payload, so that whatever a bucket accepts fits a dead
	// letter or a schedule of it. Default 1 MiB or the server's
	// max_payload less HeaderRoom, whichever is smaller; -1 means the
	// latter. [Provision] refuses a larger value (raise max_payload
	// first). A delayed task must leave [TaskRoom] below it.
	MaxMsgSize int32
	// Layout is how the priority buckets hand tasks to workers: one
	// catch-all consumer per shard ([LayoutShared]), one per task type
	// ([LayoutPools]) or one per tenant ([LayoutFair]). Zero means
	// LayoutShared. A deployment keeps the layout it was created with:
	// Provision refuses to switch it ([ErrLayoutChange]).
	Layout Layout
	// Types whose consumers Provision creates up front on a
	// [LayoutPools] deployment (for workers not allowed to create
	// consumers).
	Types []string
	// Tenants whose consumers Provision creates up front on a
	// [LayoutFair] deployment.
	Tenants []string
	// MemoryConsumers keeps the shard consumers' state (what each has
	// delivered and had acknowledged, pending redeliveries and their
	// delay, delivery counts) in the server's memory instead of a state
	// file per consumer that the server writes up to 10 times a second,
	// which cost about 30 % of the CPU per task on a loaded machine
	// (docs/decisions/memory-consumers.md). Tasks stay on disk either
	// way. The state is lost when a single server restarts (the server
	// forgets the consumers: provision again) or when every node of a
	// cluster restarts at once (the consumers start over): each task not
	// yet acknowledged is then delivered again as a first delivery, its
	// retry delay forgotten, and a RUNNING task's takeover waits an ack
	// wait per delivery its record counts. Only for the shared layout
	// (Layout zero). Default false. The server cannot switch an existing
	// consumer: [Provision] refuses with [ErrImmutable].
	MemoryConsumers bool
}

func (c *Config) withDefaults() *Config {
	if c == nil {
		c = &Config{}
	}
	out := *c
	out.Replicas = cmp.Or(out.Replicas, 1)
	out.Capacity = cmp.Or(out.Capacity, DefaultCapacity)
	out.AckWait = cmp.Or(out.AckWait, DefaultAckWait)
	out.MaxAckPending = cmp.Or(out.MaxAckPending, DefaultMaxAckPending)
	out.Duplicates = cmp.Or(out.Duplicates, DefaultBucketDuplicates)
	out.TrailMaxAge = cmp.Or(out.TrailMaxAge, DefaultTrailMaxAge)
	out.PinnedTTL = cmp.Or(out.PinnedTTL, DefaultPinnedTTL)
	out.PriorityPolicy = cmp.Or(out.PriorityPolicy, DefaultPriorityPolicy)
	out.BucketMaxBytes = cmp.Or(out.BucketMaxBytes, DefaultStreamMaxBytes)
	out.DLQMaxBytes = cmp.Or(out.DLQMaxBytes, DefaultStreamMaxBytes)
	out.DelayedMaxBytes = cmp.Or(out.DelayedMaxBytes, DefaultStreamMaxBytes)
	out.WorkflowMaxBytes = cmp.Or(out.WorkflowMaxBytes, DefaultStreamMaxBytes/2)
	out.TrailMaxBytes = cmp.Or(out.TrailMaxBytes, DefaultStreamMaxBytes)
	out.MaxMsgSize = cmp.Or(out.MaxMsgSize, DefaultMaxMsgSize)
	out.Layout = cmp.Or(out.Layout, LayoutShared)
	return &out
}

func (c *Config) validate() error {
	switch {
	case c.Replicas < 1 || c.Replicas > 5:
		return fmt.Errorf("streams config: Replicas %d is not 1..5", c.Replicas)
	case c.Capacity < 1:
		return fmt.Errorf("streams config: Capacity %d must be positive", c.Capacity)
	case c.AckWait < time.Second:
		return fmt.Errorf("streams config: AckWait %s must be at least 1s", c.AckWait)
	case c.Duplicates < DefaultBucketDuplicates:
		return fmt.Errorf("streams config: Duplicates %s must be at least %s (the server's least window)", c.Duplicates, DefaultBucketDuplicates)
	case c.BucketMaxBytes < -1 || c.DLQMaxBytes < -1 || c.DelayedMaxBytes < -1 || c.TrailMaxBytes < -1 || c.WorkflowMaxBytes < -1 || c.MaxMsgSize < -1:
		return fmt.Errorf("streams config: BucketMaxBytes %d, DLQMaxBytes %d, DelayedMaxBytes %d, TrailMaxBytes %d, WorkflowMaxBytes %d, MaxMsgSize %d: each must be positive or -1",
			c.BucketMaxBytes, c.DLQMaxBytes, c.DelayedMaxBytes, c.TrailMaxBytes, c.WorkflowMaxBytes, c.MaxMsgSize)
	}
	if _, err := c.priorityPolicy(); err != nil {
		return err
	}
	if err := c.Layout.validate(); err != nil {
		return fmt.Errorf("streams config: %w", err)
	}
	if c.MemoryConsumers && c.Layout.Routed() {
		return fmt.Errorf("streams config: MemoryConsumers is for the shared layout's shard consumers, not layout %s", c.Layout)
	}
	if len(c.Types) > 0 && c.Layout != LayoutPools {
		return fmt.Errorf("streams config: Types %v need Layout %s", c.Types, LayoutPools)
	}
	if len(c.Tenants) > 0 && c.Layout != LayoutFair {
		return fmt.Errorf("streams config: Tenants %v need Layout %s", c.Tenants, LayoutFair)
	}
	for _, t := range c.Tenants {
		if err := ValidateToken("tenant", t); err != nil {
			return fmt.Errorf("streams config: %w", err)
		}
	}
	for _, t := range c.Types {
		if err := ValidateToken("task type", t); err != nil {
			return fmt.Errorf("streams config: %w", err)
		}
	}
	return nil
}

func (c *Config) priorityPolicy() (jetstream.PriorityPolicy, error) {
	switch c.PriorityPolicy {
	case "none":
		return jetstream.PriorityPolicyNone, nil
	case "overflow":
		return jetstream.PriorityPolicyOverflow, nil
	case "pinned_client":
		return jetstream.PriorityPolicyPinned, nil
	}
	return 0, fmt.Errorf("streams config: PriorityPolicy %q is not none, overflow or pinned_client", c.PriorityPolicy)
}

// maxPayload is the max_payload of the server js is connected to, or 0
// when unknown.
func maxPayload(js jetstream.JetStream) int64 {
	if nc := js.Conn(); nc != nil {
		return nc.MaxPayload()
	}
	return 0
}

// fitServer sets the MaxMsgSize of c so that AX_DLQ and AX_DELAYED
// ([HeaderRoom] more) fit maxPayload: the default is the smaller of
// [DefaultMaxMsgSize] and maxPayload - HeaderRoom, -1 is the latter, and
// a larger explicit value is refused. maxPayload <= 0 (unknown) leaves c
// as it is.
func (c *Config) fitServer(maxPayload int64) (*Config, error) {
	out := Config{}
	if c != nil {
		out = *c
	}
	if maxPayload <= 0 {
		return &out, nil
	}
	largest := maxPayload - HeaderRoom
	if largest < TaskRoom {
		return nil, fmt.Errorf("streams config: the server's max_payload %d leaves no room for a task beside the %d bytes a dead letter or a schedule adds: raise max_payload", maxPayload, HeaderRoom)
	}
	switch {
	case out.MaxMsgSize == 0:
		out.MaxMsgSize = int32(min(DefaultMaxMsgSize, largest))
	case out.MaxMsgSize == -1:
		out.MaxMsgSize = int32(min(largest, 1<<31-1-HeaderRoom))
	case int64(out.MaxMsgSize) > largest:
		return nil, fmt.Errorf("streams config: MaxMsgSize %d is above the server's max_payload %d less the %d bytes a dead letter or a schedule adds (at most %d): lower it, or raise max_payload",
			out.MaxMsgSize, maxPayload, HeaderRoom, largest)
	}
	return &out, nil
}

// withHeaderRoom is the MaxMsgSize of AX_DLQ and AX_DELAYED: a task
// message with the headers a dead letter or a schedule adds.
func (c *Config) withHeaderRoom() int32 {
	if c.MaxMsgSize < 0 {
		return -1
	}
	return c.MaxMsgSize + HeaderRoom
}

// Report says what [Provision] did.
type Report struct {
	Created   []string // streams and consumers created
	Updated   []string // streams and consumers updated, with the changed settings
	Unchanged int      // streams and consumers already as configured
}

func (r *Report) String() string {
	return fmt.Sprintf("created %d, updated %d, unchanged %d", len(r.Created), len(r.Updated), r.Unchanged)
}

// Provision creates or updates every stream and shard consumer of cfg. It is
// idempotent: a second run changes nothing. On an existing stream it updates
// what the server can update and returns [ErrImmutable] for what it cannot,
// and it refuses to change subjects or the shard transform ([ErrLayoutChange]).
func Provision(ctx context.Context, js jetstream.JetStream, cfg *Config) (*Report, error) {
	cfg, err := cfg.fitServer(maxPayload(js))
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	report := &Report{}
	var updated []jetstream.StreamConfig
	for _, sc := range StreamConfigs(cfg) {
		before := len(report.Updated)
		if err := ensureStream(ctx, js, cfg.Names, sc, report); err != nil {
			return report, err
		}
		if len(report.Updated) > before {
			updated = append(updated, sc)
		}
	}
	for p := range Priorities {
		if cfg.Layout.Routed() { // no catch-all consumers: one per type or tenant ([EnsureTypeConsumers], [EnsureTenantConsumers])
			if err := refuseShardConsumers(ctx, js, cfg.Names, p); err != nil {
				return report, err
			}
			continue
		}
		stream := cfg.Names.PriorityStream(p)
		for shard := range Shards {
			cc, err := ConsumerConfig(cfg, p, shard)
			if err != nil {
				return report, err
			}
			if err := ensureConsumer(ctx, js, stream, cc, report); err != nil {
				return report, err
			}
		}
	}
	for _, t := range cfg.Types {
		n, err := EnsureTypeConsumers(ctx, js, cfg, t)
		if n > 0 {
			report.Created = append(report.Created, fmt.Sprintf("%d consumers of type %s", n, t))
		}
		if err != nil {
			return report, err
		}
	}
	for _, t := range cfg.Tenants {
		n, err := EnsureTenantConsumers(ctx, js, cfg, t)
		if n > 0 {
			report.Created = append(report.Created, fmt.Sprintf("%d consumers of tenant %s", n, t))
		}
		if err != nil {
			return report, err
		}
	}
	if err := recheckStreams(ctx, js, cfg.Names, updated); err != nil {
		return report, err
	}
	return report, nil
}

// recheckStreams applies again what a concurrent writer undid of the
// updates Provision made. The leader's admission step ([SetAdmission])
// writes back the whole configuration it read (JetStream has no partial or
// conditional stream update): one that read before our update and wrote
// after it restores the old settings. By now (the consumers took many round
// trips) such a write has landed; what it changed of the admission is kept.
func recheckStreams(ctx context.Context, js jetstream.JetStream, n Names, updated []jetstream.StreamConfig) error {
	for _, want := range updated {
		stream, err := js.Stream(ctx, want.Name)
		if err != nil {
			return fmt.Errorf("look up stream %s: %w", want.Name, err)
		}
		have := stream.CachedInfo().Config
		want = keepAdmission(n, have, want)
		changed := streamChanges(have, want)
		if len(changed) == 0 {
			continue
		}
		if _, err := js.UpdateStream(ctx, want); err != nil {
			return fmt.Errorf("%w: stream %s: update %s again (a concurrent update undid it): %w", ErrImmutable, want.Name, strings.Join(changed, ", "), err)
		}
	}
	return nil
}

// StreamConfigs returns the configurations of the priority, dead-letter,
// trail and delayed streams.
func StreamConfigs(cfg *Config) []jetstream.StreamConfig {
	cfg = cfg.withDefaults()
	n := cfg.Names
	var out []jetstream.StreamConfig
	for p := range Priorities {
		var metadata map[string]string
		maxConsumers := 0
		if cfg.Layout.Routed() {
			metadata, maxConsumers = routedMetadata(cfg), poolsMaxConsumers
		}
		// What a producer's headers could make the server do is refused
		// here (the zero values, written out): no roll-up (Nats-Rollup
		// would purge other tenants' tasks), no per-message TTL (Nats-TTL),
		// no schedules (Nats-Schedule…), no counters (Nats-Incr), no batch
		// publishes (Nats-Batch-…). docs/SECURITY.md lists what the server
		// still answers a producer.
		out = append(out, jetstream.StreamConfig{
			AllowRollup:        false,
			AllowMsgTTL:        false,
			AllowMsgSchedules:  false,
			AllowMsgCounter:    false,
			AllowAtomicPublish: false,
			AllowBatchPublish:  false,
			Name:               n.PriorityStream(p),
			Description:        fmt.Sprintf("ax priority bucket P%d (WorkQueue, %d shards)", p, Shards),
			Subjects:           []string{n.SubmitFilter(p), n.CoreFilter(p), n.CopyFilter(p)},
			Retention:          jetstream.WorkQueuePolicy,
			Storage:            jetstream.FileStorage,
			Replicas:           cfg.Replicas,
			MaxMsgs:            cfg.Capacity,
			MaxBytes:           cfg.BucketMaxBytes,
			MaxMsgSize:         cfg.MaxMsgSize,
			Discard:            jetstream.DiscardNew,
			Duplicates:         cfg.Duplicates,
			AllowDirect:        true,
			Metadata:           metadata,
			MaxConsumers:       maxConsumers,
			SubjectTransform: &jetstream.SubjectTransformConfig{
				Source:      n.IngestFilter(p),
				Destination: n.ShardTransform(p),
			},
		})
	}
	out = append(out, jetstream.StreamConfig{
		Name:        n.DLQStream(),
		Description: "ax dead letters: failed tasks with their reason, for replay",
		Subjects:    []string{n.DLQFilter()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxMsgs:     -1,
		MaxBytes:    cfg.DLQMaxBytes,
		MaxMsgSize:  cfg.withHeaderRoom(),
		MaxAge:      cfg.DLQMaxAge,
		Duplicates:  ownWindow(cfg.DLQMaxAge),
		AllowDirect: true,
	}, jetstream.StreamConfig{
		Name:        n.TrailStream(),
		Description: "ax trail: one event per task state change",
		Subjects:    []string{n.TrailFilter()},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    cfg.Replicas,
		MaxMsgs:     -1,
		MaxBytes:    cfg.TrailMaxBytes,
		MaxMsgSize:  -1,
		MaxAge:      cfg.TrailMaxAge,
		Duplicates:  ownWindow(cfg.TrailMaxAge),
		AllowDirect: true,
	}, DelayedStreamConfig(cfg), WorkflowStreamConfig(cfg))
	return out
}

// ownWindow is the de-duplication window of a stream only ax writes:
// [DefaultDuplicates], or its MaxAge when shorter (the server's bound).
func ownWindow(maxAge time.Duration) time.Duration {
	if maxAge > 0 && maxAge < DefaultDuplicates {
		return maxAge
	}
	return DefaultDuplicates
}

// ConsumerConfig returns the configuration of the durable pull consumer of
// (priority, shard).
func ConsumerConfig(cfg *Config, priority, shard int) (jetstream.ConsumerConfig, error) {
	cfg = cfg.withDefaults()
	policy, err := cfg.priorityPolicy()
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	cc := jetstream.ConsumerConfig{
		Durable:       cfg.Names.ConsumerName(priority, shard),
		Description:   fmt.Sprintf("ax shard %d of P%d", shard, priority),
		FilterSubject: cfg.Names.ShardFilter(priority, shard),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       cfg.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: cfg.MaxAckPending,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		Replicas:      cfg.Replicas,
		MemoryStorage: cfg.MemoryConsumers,
	}
	if policy != jetstream.PriorityPolicyNone {
		cc.PriorityPolicy = policy
		cc.PriorityGroups = []string{PriorityGroup}
		if policy == jetstream.PriorityPolicyPinned {
			cc.PinnedTTL = cfg.PinnedTTL
		}
	}
	return cc, nil
}

func ensureStream(ctx context.Context, js jetstream.JetStream, n Names, want jetstream.StreamConfig, report *Report) error {
	stream, err := js.Stream(ctx, want.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if _, err := js.CreateStream(ctx, want); err != nil {
			return fmt.Errorf("create stream %s: %w", want.Name, err)
		}
		report.Created = append(report.Created, "stream "+want.Name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", want.Name, err)
	}
	have := stream.CachedInfo().Config
	if err := checkLayout(n, have, want); err != nil {
		return err
	}
	want = keepAdmission(n, have, want)
	changed := streamChanges(have, want)
	if len(changed) == 0 {
		report.Unchanged++
		return nil
	}
	if _, err := js.UpdateStream(ctx, want); err != nil {
		return fmt.Errorf("%w: stream %s: update %s: %w", ErrImmutable, want.Name, strings.Join(changed, ", "), err)
	}
	report.Updated = append(report.Updated, fmt.Sprintf("stream %s (%s)", want.Name, strings.Join(changed, ", ")))
	return nil
}

// keepAdmission leaves a priority bucket's admission as the leader set it:
// while the bucket refuses non-core tasks its stream lacks the submit
// subject ([Names.SubmitFilter]), and provisioning must not add it back.
func keepAdmission(n Names, have, want jetstream.StreamConfig) jetstream.StreamConfig {
	p, ok := n.PriorityOf(want.Name)
	if !ok || !n.Refusing(have) {
		return want
	}
	want.Subjects = slices.DeleteFunc(slices.Clone(want.Subjects), func(s string) bool { return s == n.SubmitFilter(p) })
	return want
}

// checkLayout refuses what would move stored tasks: another shard transform
// (or, for a stream without one, another first subject), another retention
// or storage.
func checkLayout(n Names, have, want jetstream.StreamConfig) error {
	transform := func(t *jetstream.SubjectTransformConfig) string {
		if t == nil {
			return "none"
		}
		return t.Source + " -> " + t.Destination
	}
	if want.SubjectTransform == nil {
		// The first subject is the layout; later ones may be added.
		if len(have.Subjects) == 0 || len(want.Subjects) == 0 || have.Subjects[0] != want.Subjects[0] {
			return fmt.Errorf("%w: stream %s has subjects %v, want %v", ErrLayoutChange, want.Name, have.Subjects, want.Subjects)
		}
	} else if transform(have.SubjectTransform) != transform(want.SubjectTransform) {
		return fmt.Errorf("%w: stream %s has shard transform %q, want %q (the shard count is part of the data layout; drain and recreate the stream to change it)",
			ErrLayoutChange, want.Name, transform(have.SubjectTransform), transform(want.SubjectTransform))
	}
	if _, ok := n.PriorityOf(want.Name); ok && have.Metadata[MetaRouting] != want.Metadata[MetaRouting] {
		return fmt.Errorf("%w: stream %s routes by %s, want %s (a deployment keeps the layout it was created with: drain and recreate the stream to change it)",
			ErrLayoutChange, want.Name, routing(have), routing(want))
	}
	if have.Retention != want.Retention {
		return fmt.Errorf("%w: stream %s has retention %s, want %s", ErrImmutable, want.Name, have.Retention, want.Retention)
	}
	if have.Storage != want.Storage {
		return fmt.Errorf("%w: stream %s has storage %s, want %s", ErrImmutable, want.Name, have.Storage, want.Storage)
	}
	return nil
}

func streamChanges(have, want jetstream.StreamConfig) []string {
	var changed []string
	check := func(name string, differ bool) {
		if differ {
			changed = append(changed, name)
		}
	}
	check("Subjects", !slices.Equal(have.Subjects, want.Subjects))
	check("SubjectTransform", !reflect.DeepEqual(have.SubjectTransform, want.SubjectTransform))
	check("Replicas", have.Replicas != want.Replicas)
	check("MaxMsgs", have.MaxMsgs != want.MaxMsgs)
	check("MaxBytes", have.MaxBytes != want.MaxBytes)
	check("MaxMsgSize", have.MaxMsgSize != want.MaxMsgSize)
	check("Discard", have.Discard != want.Discard)
	check("MaxAge", have.MaxAge != want.MaxAge)
	check("Duplicates", have.Duplicates != want.Duplicates)
	check("AllowRollup", have.AllowRollup != want.AllowRollup)
	check("AllowMsgTTL", have.AllowMsgTTL != want.AllowMsgTTL)
	check("AllowMsgSchedules", have.AllowMsgSchedules != want.AllowMsgSchedules)
	check("AllowMsgCounter", have.AllowMsgCounter != want.AllowMsgCounter)
	check("AllowAtomicPublish", have.AllowAtomicPublish != want.AllowAtomicPublish)
	check("AllowBatchPublish", have.AllowBatchPublish != want.AllowBatchPublish)
	check("AllowDirect", have.AllowDirect != want.AllowDirect)
	check("Description", have.Description != want.Description)
	check("Metadata", !maps.Equal(axMetadata(have.Metadata), axMetadata(want.Metadata)))
	return changed
}

// axMetadata returns the ax_ keys of a stream's metadata (the server adds
// keys of its own).
func axMetadata(md map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range md {
		if strings.HasPrefix(k, "ax_") {
			out[k] = v
		}
	}
	return out
}

func routing(sc jetstream.StreamConfig) string {
	switch LayoutOf(sc) {
	case LayoutPools:
		return "task type (pools)"
	case LayoutFair:
		return "tenant (fair shares)"
	}
	return "shard (one consumer per priority and shard)"
}

func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, want jetstream.ConsumerConfig, report *Report) error {
	name := stream + "/" + want.Durable
	if err := checkFilter(want.FilterSubject, stream); err != nil {
		return err
	}
	consumer, err := js.Consumer(ctx, stream, want.Durable)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		if _, err := js.CreateConsumer(ctx, stream, want); err != nil {
			return fmt.Errorf("create consumer %s: %w", name, err)
		}
		report.Created = append(report.Created, "consumer "+name)
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up consumer %s: %w", name, err)
	}
	have := consumer.CachedInfo().Config
	if have.AckPolicy != want.AckPolicy || have.DeliverPolicy != want.DeliverPolicy {
		return fmt.Errorf("%w: consumer %s has ack policy %s and deliver policy %s, want %s and %s (delete it to recreate)",
			ErrImmutable, name, have.AckPolicy, have.DeliverPolicy, want.AckPolicy, want.DeliverPolicy)
	}
	if have.MemoryStorage != want.MemoryStorage {
		keep := "provision without --memory-consumers to keep it"
		if have.MemoryStorage {
			keep = "provision with --memory-consumers to keep it"
		}
		return fmt.Errorf("%w: consumer %s keeps its state in %s, want %s, and the server cannot switch it: "+
			"%s, or stop the workers, delete the shard consumers (nats consumer rm %s %s, and the others) and provision again; "+
			"the tasks not yet acknowledged are then delivered again (docs/OPERATIONS.md, \"Memory-stored consumers\")",
			ErrImmutable, name, consumerStorage(have.MemoryStorage), consumerStorage(want.MemoryStorage), keep, stream, want.Durable)
	}
	var changed []string
	check := func(field string, differ bool) {
		if differ {
			changed = append(changed, field)
		}
	}
	check("FilterSubject", have.FilterSubject != want.FilterSubject || len(have.FilterSubjects) > 0)
	check("AckWait", have.AckWait != want.AckWait)
	check("MaxDeliver", have.MaxDeliver != want.MaxDeliver)
	check("MaxAckPending", have.MaxAckPending != want.MaxAckPending)
	check("PriorityPolicy", have.PriorityPolicy != want.PriorityPolicy || !slices.Equal(have.PriorityGroups, want.PriorityGroups))
	check("PinnedTTL", have.PinnedTTL != want.PinnedTTL)
	check("Description", have.Description != want.Description)
	if len(changed) == 0 {
		report.Unchanged++
		return nil
	}
	if _, err := js.UpdateConsumer(ctx, stream, want); err != nil {
		return fmt.Errorf("%w: consumer %s: update %s: %w", ErrImmutable, name, strings.Join(changed, ", "), err)
	}
	report.Updated = append(report.Updated, fmt.Sprintf("consumer %s (%s)", name, strings.Join(changed, ", ")))
	return nil
}

// consumerStorage names where a consumer keeps its state.
func consumerStorage(memory bool) string {
	if memory {
		return "memory"
	}
	return "a file"
}

// checkFilter verifies that a shard filter "<prefix>.p<N>.<shard>.>" lies
// inside the stored subjects of stream, because the server accepts filters
// that match nothing.
func checkFilter(filter, stream string) error {
	tokens := strings.Split(filter, ".")
	if len(tokens) != 4 || tokens[3] != ">" {
		return fmt.Errorf("%w: consumer filter %q of %s is not <prefix>.p<N>.<shard>.>", ErrLayoutChange, filter, stream)
	}
	p, err := ParsePriority(tokens[1])
	if err != nil || !strings.HasSuffix(stream, fmt.Sprintf("_P%d", p)) {
		return fmt.Errorf("%w: consumer filter %q does not select the priority of stream %s", ErrLayoutChange, filter, stream)
	}
	var shard int
	if _, err := fmt.Sscanf(tokens[2], "%d", &shard); err != nil || shard < 0 || shard >= Shards || fmt.Sprint(shard) != tokens[2] {
		return fmt.Errorf("%w: consumer filter %q names shard %q outside 0..%d", ErrLayoutChange, filter, tokens[2], Shards-1)
	}
	return nil
}

// refuseShardConsumers returns [ErrLayoutChange] if bucket p of a pools
// deployment has catch-all shard consumers (p<N>-s<SS>), as a provision
// of the shared layout creates (added by hand, say): they overlap every
// type's consumer, so no worker of a type could start.
func refuseShardConsumers(ctx context.Context, js jetstream.JetStream, names Names, p int) error {
	stream, err := js.Stream(ctx, names.PriorityStream(p))
	if err != nil {
		return fmt.Errorf("look up stream %s: %w", names.PriorityStream(p), err)
	}
	shardConsumer := map[string]bool{}
	for shard := range Shards {
		shardConsumer[names.ConsumerName(p, shard)] = true
	}
	var found []string
	lister := stream.ConsumerNames(ctx)
	for name := range lister.Name() {
		if shardConsumer[name] {
			found = append(found, name)
		}
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("list consumers of %s: %w", names.PriorityStream(p), err)
	}
	if len(found) == 0 {
		return nil
	}
	slices.Sort(found)
	return fmt.Errorf("%w: stream %s routes by task type (pools) but has %d catch-all shard consumers (%s, …), "+
		"as the shared layout has; they overlap every type's consumer: once no worker of "+
		"the shard layout runs, remove them (nats consumer rm %s %s, and the others) and provision again",
		ErrLayoutChange, names.PriorityStream(p), len(found), found[0], names.PriorityStream(p), found[0])
}
